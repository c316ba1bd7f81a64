//! Every mangled name in the repository's traces and recordings, spelled by
//! gpuperf as binutils' c++filt spells it: the spelling PyTorch's profiler and
//! Nsight also use, so that a kernel has one name wherever a user looks.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpuperf_merge::model::{ActivityKind, Record, StringTable};
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::view::demangle;
use gpuperf_test_support::require::Need;

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file under `dir`, recursively (none when it does not exist).
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// The recorded traces, recordings and logs: `samples/recordings`, the real
/// traces shared beside the repository, and each crate's test data, less the
/// sources of test programs (whose `_Z` names are inputs the tests build).
fn trace_files() -> Vec<PathBuf> {
    let root = repo();
    let mut files = Vec::new();
    files_under(&root.join("samples/recordings"), &mut files);
    files_under(&root.join("../shared/fixtures/real"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        files_under(&krate.path().join("tests/data"), &mut files);
    }
    const SOURCES: [&str; 8] = ["c", "h", "py", "rs", "sh", "sql", "proto", "md"];
    files.retain(|f| {
        !f.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| SOURCES.contains(&e))
    });
    files.sort();
    files
}

/// The bytes of `path`, gunzipped where it is gzip.
fn contents(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap();
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        raw
    }
}

/// `_Z…` words in `bytes` (a `_Z` that no letter, digit or `_` precedes, and
/// the letters, digits and `_` after it): names in JSON, SQLite, text logs and
/// binary recordings alike.
fn scan_mangled(bytes: &[u8], out: &mut BTreeSet<String>) {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while let Some(at) = memchr::memmem::find(&bytes[i..], b"_Z") {
        let start = i + at;
        let len = bytes[start..].iter().take_while(|&&b| word(b)).count();
        if (start == 0 || !word(bytes[start - 1])) && len > 2 {
            out.insert(String::from_utf8_lossy(&bytes[start..start + len]).into_owned());
        }
        i = start + len.max(2);
    }
}

/// The kernel names gpuperf's readers deliver from `path`, where it is a GPU
/// trace they read.
fn kernel_names(path: &Path, out: &mut BTreeSet<String>) {
    let mut strings = StringTable::new();
    let Ok(inputs) = GpuInputs::open(&[path.to_owned()], &mut strings) else {
        return;
    };
    let mut visit = |r: &Record, s: &StringTable| {
        if let Record::Activity(a) = r
            && let ActivityKind::Kernel { name, .. } = a.kind
        {
            out.insert(s.get(name).to_owned());
        }
    };
    // A file that fails part-way still gave its names so far.
    let _ = inputs.visit(&mut strings, &mut visit);
}

/// c++filt's spelling of each name, in order.
fn cxxfilt(names: &[&String]) -> Option<Vec<String>> {
    let mut out = Vec::with_capacity(names.len());
    // As arguments, not on stdin, where c++filt splits words at characters
    // that are not a symbol's.
    for chunk in names.chunks(200) {
        let o = Command::new("c++filt").args(chunk).output().ok()?;
        assert!(o.status.success(), "c++filt failed: {o:?}");
        let text = String::from_utf8(o.stdout).unwrap();
        out.extend(text.lines().map(str::to_owned));
    }
    assert_eq!(out.len(), names.len(), "one line per name from c++filt");
    Some(out)
}

#[test]
fn recordings__every_mangled_name_spelled_as_cxxfilt_spells_it() {
    if Command::new("c++filt").arg("--version").output().is_err() {
        Need::CxxFilt.missing("c++filt not found on PATH (Debian: apt-get install binutils)");
        return;
    }
    let files = trace_files();
    let mut names = BTreeSet::new();
    let mut from_readers = BTreeSet::new();
    for f in &files {
        scan_mangled(&contents(f), &mut names);
        kernel_names(f, &mut from_readers);
    }
    names.extend(from_readers.into_iter().filter(|n| n.starts_with("_Z")));
    // The recordings of PyTorch programs hold templated kernels: the names
    // whose spelling differs between demanglers.
    assert!(
        names.iter().any(|n| n.starts_with("_ZN2at6native")) && names.len() > 40,
        "{} names in {} files: {names:#?}",
        names.len(),
        files.len()
    );
    let names: Vec<&String> = names.iter().collect();
    let want = cxxfilt(&names).expect("c++filt runs");
    let differ: Vec<String> = names
        .iter()
        .zip(&want)
        .filter_map(|(n, w)| {
            let ours = demangle(n);
            (ours != *w).then(|| format!("{n}\n  gpuperf: {ours}\n  c++filt: {w}"))
        })
        .collect();
    eprintln!(
        "{} mangled names in {} files: {} spelled as c++filt spells them",
        names.len(),
        files.len(),
        names.len() - differ.len()
    );
    assert!(
        differ.is_empty(),
        "{} of {} names spelled otherwise than by c++filt:\n{}",
        differ.len(),
        names.len(),
        differ.join("\n")
    );
}
