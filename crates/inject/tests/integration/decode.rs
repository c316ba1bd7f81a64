//! Records laid out by the real CUPTI 12.9 and 13.0 headers, walked by the real
//! libcupti of the same major, decoded by gpuperf.

use std::ffi::CStr;
use std::path::Path;

use gpuperf_inject::Cupti;
use gpuperf_inject::decode::{Decoded, Place, decode};
use gpuperf_merge::model::PeerDevices;

use crate::support::{Wheels, gcc, wheels};

/// Builds the filler for one header set, fills a buffer, and decodes every record
/// that the real libcupti at `lib` walks.
fn fill_and_decode(w: &Wheels, major: u32) -> Vec<Decoded> {
    let (incs, lib, out) = match major {
        13 => (w.includes13(), w.lib13.join("libcupti.so.13"), "fill13.so"),
        _ => (w.includes12(), w.lib12.join("libcupti.so.12"), "fill12.so"),
    };
    let mut args: Vec<&str> = vec!["-shared", "-fPIC"];
    args.extend(incs.iter().map(String::as_str));
    let filler = gcc("fill_records.c", out, &args);
    // SAFETY: the library is our test helper, whose `gp_fill` has this signature.
    let fill = unsafe { libloading::Library::new(&filler) }.unwrap();
    // SAFETY: as above.
    let gp_fill: libloading::Symbol<unsafe extern "C" fn(*mut u8, usize) -> usize> =
        unsafe { fill.get(b"gp_fill\0") }.unwrap();
    // CUPTI's buffers are 8-byte aligned.
    let mut storage = vec![0u64; 1024];
    // SAFETY: a u64 slice viewed as bytes, same lifetime, no other borrow.
    let buf = unsafe { std::slice::from_raw_parts_mut(storage.as_mut_ptr().cast::<u8>(), 8192) };
    // SAFETY: `buf` is 8192 writable bytes.
    let n = unsafe { gp_fill(buf.as_mut_ptr(), buf.len()) };
    assert!(n > 0, "buffer too small");
    let cupti = Cupti::load(Path::new(&lib)).unwrap();
    let decoded: Vec<Decoded> = cupti
        .records(buf, n)
        .map(|r| decode(r).expect("complete record"))
        .collect();
    // Names are copied while the filler, which owns them, is loaded.
    for d in &decoded {
        if let Decoded::Kernel { name, .. } | Decoded::Device { name, .. } = d {
            assert!(!name.is_null());
        }
    }
    let names: Vec<String> = decoded
        .iter()
        .filter_map(|d| match d {
            // SAFETY: the pointers point at the filler's static strings; `fill` is alive.
            Decoded::Kernel { name, .. } | Decoded::Device { name, .. } => Some(
                unsafe { CStr::from_ptr(*name) }
                    .to_string_lossy()
                    .into_owned(),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        ["_Z9my_kernelPfi", "NVIDIA H100 80GB HBM3"],
        "{decoded:#?}"
    );
    decoded
}

fn check(decoded: &[Decoded]) {
    assert_eq!(decoded.len(), 8, "{decoded:#?}");
    match &decoded[0] {
        Decoded::Kernel {
            place, grid, block, ..
        } => {
            assert_eq!(
                *place,
                Place {
                    start_ns: 1000,
                    end_ns: 3500,
                    correlation_id: 42,
                    device: 1,
                    context: 2,
                    stream: 7,
                    graph_id: 9,
                    graph_node_id: 0x1234567890,
                }
            );
            assert_eq!((*grid, *block), ([128, 2, 1], [256, 1, 1]));
        }
        other => panic!("expected a kernel, got {other:?}"),
    }
    match &decoded[1] {
        Decoded::Memcpy {
            place,
            copy_kind,
            bytes,
            peer,
        } => {
            assert_eq!(*peer, None);
            // The runtime call's id wins over the driver's.
            assert_eq!(place.correlation_id, 43);
            assert_eq!(
                (place.start_ns, place.end_ns, place.stream),
                (4000, 4800, 7)
            );
            assert_eq!((*copy_kind, *bytes), (1, 1 << 20));
        }
        other => panic!("expected a memcpy, got {other:?}"),
    }
    match &decoded[2] {
        Decoded::Memset {
            place,
            value,
            bytes,
        } => {
            assert_eq!(
                (place.correlation_id, place.stream, place.start_ns),
                (45, 8, 5000)
            );
            assert_eq!((*value, *bytes), (0xab, 4096));
        }
        other => panic!("expected a memset, got {other:?}"),
    }
    match &decoded[3] {
        Decoded::Sync { place, sync_type } => {
            assert_eq!(
                (place.correlation_id, place.context, place.stream),
                (46, 2, 7)
            );
            assert_eq!((place.start_ns, place.end_ns, *sync_type), (6000, 9000, 3));
        }
        other => panic!("expected a sync, got {other:?}"),
    }
    assert!(
        matches!(
            decoded[4],
            Decoded::Overhead {
                kind: 0x10000,
                correlation_id: 48,
                start_ns: 10000,
                end_ns: 10250
            }
        ),
        "{:?}",
        decoded[4]
    );
    assert!(
        matches!(
            decoded[5],
            Decoded::Device {
                id: 1,
                cc: (9, 0),
                ..
            }
        ),
        "{:?}",
        decoded[5]
    );
    assert_eq!(
        decoded[6],
        Decoded::Context {
            context: 2,
            device: 1
        }
    );
    match &decoded[7] {
        Decoded::Memcpy {
            place,
            copy_kind,
            bytes,
            peer,
        } => {
            assert_eq!(
                *place,
                Place {
                    start_ns: 11000,
                    end_ns: 11500,
                    correlation_id: 47,
                    device: 1,
                    context: 2,
                    stream: 7,
                    graph_id: 5,
                    graph_node_id: 0x42,
                }
            );
            assert_eq!((*copy_kind, *bytes), (10, 1 << 16));
            assert_eq!(*peer, Some(PeerDevices { src: 1, dst: 3 }));
        }
        other => panic!("expected a peer-to-peer copy, got {other:?}"),
    }
}

#[test]
fn cuda13_records_walked_by_real_libcupti13() {
    let Some(w) = wheels() else { return };
    check(&fill_and_decode(&w, 13));
}

#[test]
fn cuda12_records_walked_by_real_libcupti12() {
    let Some(w) = wheels() else { return };
    check(&fill_and_decode(&w, 12));
}

#[test]
fn records_cut_short_are_refused_not_misread() {
    // A kernel record's fields end well past 64 bytes; a record cut there decodes
    // to nothing instead of reading past the buffer.
    let mut rec = vec![0u8; 64];
    rec[..4].copy_from_slice(&10u32.to_le_bytes());
    assert_eq!(decode(&rec), None);
    assert_eq!(decode(&rec[..2]), None);
    // Kinds gpuperf never enables are reported as such.
    let mut other = vec![0u8; 16];
    other[..4].copy_from_slice(&5u32.to_le_bytes());
    assert_eq!(decode(&other), Some(Decoded::Other { kind: 5 }));
}
