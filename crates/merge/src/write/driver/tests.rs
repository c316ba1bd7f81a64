use super::timeline::fence_items;
use super::*;
use crate::read::driver::DriverTrace;

fn fence(kind: DriverKind, ts_ns: u64, context: u64, seqno: u64, pid: u32) -> DriverEvent {
    DriverEvent {
        ts_ns,
        dur_ns: 0,
        id: context << 32 | seqno,
        ret: 0,
        pid,
        tid: pid + 1,
        kind,
        arg: 0,
        comm: "app".to_owned(),
        ring: String::new(),
        msg: String::new(),
    }
}

fn vblank_event(kind: DriverKind, ts_ns: u64, file: u64, seq: u32) -> DriverEvent {
    DriverEvent {
        arg: seq,
        ring: "crtc 0".to_owned(),
        ..fence(kind, ts_ns, 0, file, 7)
    }
}

#[test]
fn a_delivery_ends_the_oldest_event_asked_for_at_or_before_its_vblank() {
    use DriverKind::{VblankDelivered as D, VblankQueued as Q};
    let mut p = VblankPairer::default();
    p.queued(&vblank_event(Q, 1, 5, 10), "a");
    p.queued(&vblank_event(Q, 2, 5, 8), "b");
    // Another file's event is another's.
    p.queued(&vblank_event(Q, 3, 6, 8), "c");
    assert_eq!(p.delivered(&vblank_event(D, 4, 5, 8)), Some("b"));
    assert_eq!(p.delivered(&vblank_event(D, 5, 5, 9)), None);
    assert_eq!(p.delivered(&vblank_event(D, 6, 5, 11)), Some("a"));
    // Sequence numbers wrap: 8 is after 1, u32::MAX before it.
    p.queued(&vblank_event(Q, 7, 6, u32::MAX), "d");
    assert_eq!(p.delivered(&vblank_event(D, 8, 6, 1)), Some("d"));
    assert_eq!(p.delivered(&vblank_event(D, 9, 6, 1)), None);
    assert_eq!(p.delivered(&vblank_event(D, 10, 6, 8)), Some("c"));
    assert!(p.pending.is_empty());
}

#[test]
fn jobs_are_named_by_their_finished_fence_whose_context_names_its_ring() {
    use DriverKind::{
        FenceInit as I, FenceSignaled as S, JobDone as D, JobQueued as Q, JobRun as R,
    };
    let job = |kind, ts_ns, id| DriverEvent {
        id,
        ring: "sim-ring0".to_owned(),
        ..fence(kind, ts_ns, 0, 0, 10)
    };
    let id = 7 << 32 | 3;
    // Signalled in an interrupt, in nobody's name (as BPF sends it).
    let mut signal = fence(S, 300, 7, 3, 0);
    (signal.ret, signal.tid, signal.comm) = (1, 0, "[interrupt]".to_owned());
    // An older recording's job, known by a kernel address.
    let old = 0xffff_8880_0000_0040;
    let t = DriverTrace {
        events: vec![
            job(Q, 100, id),
            fence(I, 100, 7, 3, 10),
            job(R, 150, id),
            job(D, 250, id),
            signal,
            job(Q, 400, old),
            job(R, 410, old),
            job(D, 420, old),
        ],
        ..DriverTrace::default()
    };
    let items = timeline(&t, &[]);
    let jobs: Vec<&Vec<(&str, String)>> = items
        .iter()
        .filter(|i| i.name == "job")
        .map(|i| &i.args)
        .collect();
    assert_eq!(jobs[0][0], ("job", "7:3".to_owned()));
    assert!(jobs[1].iter().all(|(k, _)| *k != "job"), "{:?}", jobs[1]);
    let fence = items.iter().find(|i| i.name == "fence 3").unwrap();
    assert_eq!(
        fence.lane,
        Lane::Driver {
            group: Group::Fence,
            name: "fence context 7: drm_sched sim-ring0 finished".to_owned()
        }
    );
    assert!(
        fence
            .args
            .contains(&("signalled in", "interrupt".to_owned())),
        "{fence:?}"
    );
    assert!(
        fence
            .args
            .contains(&("made by", "app (pid 10, tid 11)".to_owned())),
        "{fence:?}"
    );
    assert!(
        items
            .iter()
            .all(|i| i.args.iter().all(|(_, v)| !v.contains("ffff")))
    );
}

#[test]
fn an_xid_in_interrupt_context_names_no_task_unless_its_message_does() {
    let mut e = fence(DriverKind::Xid, 1, 0, 0, 777);
    e.comm = "sim_app".to_owned();
    assert_eq!(xid_process(&e), Some((777, "sim_app".to_owned())));
    e.ret = 1;
    assert_eq!(xid_process(&e), None);
    e.msg = "pid=555, name=other_app, Ch 00000010".to_owned();
    assert_eq!(xid_process(&e), Some((555, "other_app".to_owned())));
}

/// Track, name, start, duration, maker.
type Row<'a> = (&'a str, &'a str, u64, Option<u64>, &'a str);

#[test]
fn fences_are_slices_on_one_track_per_context_halves_instants() {
    use DriverKind::{FenceInit as I, FenceSignaled as S, Ioctl};
    let mut ioctl = fence(Ioctl, 5, 0, 0, 7);
    ioctl.id = 3 << 32 | 1; // Not a fence, though its id looks like one.
    let events = vec![
        fence(I, 100, 3, 1, 10),
        fence(I, 150, 3, 2, 10),
        // Signalled in an interrupt, in its maker's name (as BPF sends it).
        fence(S, 200, 3, 1, 10),
        fence(S, 300, 3, 2, 10),
        fence(I, 400, 3, 3, 10),
        fence(I, 120, 9, 1, 11),
        fence(S, 180, 9, 1, 11),
        fence(S, 500, 9, 2, 11),
        ioctl,
    ];
    let mut items = Vec::new();
    fence_items(&events, &FxHashMap::default(), &mut items);
    let got: Vec<Row> = items
        .iter()
        .map(|i| {
            let Lane::Driver {
                group: Group::Fence,
                name,
            } = &i.lane
            else {
                panic!("{i:?}")
            };
            (
                name.as_str(),
                i.name.as_str(),
                i.start_ns,
                i.dur_ns,
                i.args[2].1.as_str(),
            )
        })
        .collect();
    // Overlapping fences share their context's track (the writers stack
    // them), however many contexts there are.
    assert_eq!(
        got,
        [
            (
                "fence context 3",
                "fence 1",
                100,
                Some(100),
                "app (pid 10, tid 11)"
            ),
            (
                "fence context 9",
                "fence 1",
                120,
                Some(60),
                "app (pid 11, tid 12)"
            ),
            (
                "fence context 3",
                "fence 2",
                150,
                Some(150),
                "app (pid 10, tid 11)"
            ),
            (
                "fence context 3",
                "fence 3 made",
                400,
                None,
                "app (pid 10, tid 11)"
            ),
            (
                "fence context 9",
                "fence 2 signalled",
                500,
                None,
                "app (pid 11, tid 12)"
            ),
        ]
    );
}
