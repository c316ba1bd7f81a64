//! Finding libcupti without help.
//!
//! Candidates, in order; the first that loads wins:
//! 1. `GPUPERF_CUPTI_PATH`;
//! 2. the directory of this library (an install that ships CUPTI beside gpuperf);
//! 3. `$CUDA_HOME`, `$CUDA_PATH`, then every `/usr/local/cuda*`, each in
//!    `extras/CUPTI/lib64`, `lib64` and `targets/x86_64-linux/lib`;
//! 4. NVIDIA's Python wheels: `site-packages/nvidia/*/lib` next to any NVIDIA
//!    library already mapped in the process (PyTorch's venv), and under
//!    `$VIRTUAL_ENV` and `$CONDA_PREFIX`;
//! 5. the loader path, by soname.
//!
//! Within one directory a library matching the CUDA runtime already loaded in the
//! process comes first, then the newest major.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

/// What the search may look at, so tests can stage it.
pub struct Inputs<'a> {
    /// Environment lookup.
    pub var: &'a dyn Fn(&str) -> Option<OsString>,
    /// Contents of `/proc/self/maps`.
    pub maps: &'a str,
    /// Directory of this library, when known.
    pub self_dir: Option<PathBuf>,
    /// Directories matched by `/usr/local/cuda*`.
    pub system_roots: Vec<PathBuf>,
}

/// Ordered candidate paths, each a file that exists or a bare soname for the loader.
pub fn candidates(inp: &Inputs<'_>) -> Vec<PathBuf> {
    let prefer = loaded_cudart_major(inp.maps);
    let mut out = Vec::new();
    if let Some(p) = (inp.var)("GPUPERF_CUPTI_PATH").filter(|v| !v.is_empty()) {
        out.push(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    dirs.extend(inp.self_dir.clone());
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| (inp.var)(v).filter(|v| !v.is_empty()).map(PathBuf::from))
        .collect();
    roots.extend(inp.system_roots.iter().cloned());
    for r in &roots {
        for sub in ["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib"] {
            dirs.push(r.join(sub));
        }
    }
    let mut nvidia: Vec<PathBuf> = wheel_roots(inp.maps);
    for v in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = (inp.var)(v).filter(|v| !v.is_empty()) {
            nvidia.extend(site_packages(Path::new(&prefix)).map(|sp| sp.join("nvidia")));
        }
    }
    for n in dedup(nvidia) {
        let mut libs: Vec<PathBuf> = read_dir(&n).into_iter().map(|d| d.join("lib")).collect();
        libs.sort();
        dirs.extend(libs);
    }
    for d in dedup(dirs) {
        out.extend(cupti_files(&d, prefer));
    }
    let mut names = vec!["libcupti.so.13", "libcupti.so.12", "libcupti.so"];
    if prefer == Some(12) {
        names.swap(0, 1);
    }
    out.extend(names.into_iter().map(PathBuf::from));
    dedup(out)
}

/// Where the search looked, for the "not found" message.
pub fn describe(inp: &Inputs<'_>) -> Vec<String> {
    let mut v = vec!["GPUPERF_CUPTI_PATH".to_owned()];
    if let Some(d) = &inp.self_dir {
        v.push(d.display().to_string());
    }
    v.push("$CUDA_HOME, $CUDA_PATH, /usr/local/cuda*".to_owned());
    v.push("site-packages/nvidia/*/lib".to_owned());
    v.push("the loader path".to_owned());
    v
}

fn dedup(v: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|p| seen.insert(p.clone())).collect()
}

fn read_dir(d: &Path) -> Vec<PathBuf> {
    fs::read_dir(d)
        .map(|it| it.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

/// `libcupti.so*` files in `dir`, best first.
fn cupti_files(dir: &Path, prefer: Option<u32>) -> Vec<PathBuf> {
    let mut found: Vec<(i64, PathBuf)> = read_dir(dir)
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            let rest = name.strip_prefix("libcupti.so")?;
            let major = rest
                .strip_prefix('.')
                .and_then(|r| r.split('.').next())
                .and_then(|m| m.parse::<u32>().ok());
            let rank = match (major, prefer) {
                (Some(m), Some(p)) if m == p => 1_000,
                (Some(m), _) => i64::from(m),
                (None, _) => -1,
            };
            p.is_file().then_some((rank, p))
        })
        .collect();
    // Best rank first; among equal ranks the shortest name (the soname link).
    found.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.as_os_str().len().cmp(&b.1.as_os_str().len()))
    });
    found.into_iter().map(|(_, p)| p).collect()
}

/// The major version of a `libcudart.so.N` mapped in the process.
fn loaded_cudart_major(maps: &str) -> Option<u32> {
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter_map(|p| p.rsplit('/').next()?.strip_prefix("libcudart.so."))
        .find_map(|v| v.split('.').next()?.parse().ok())
}

/// `…/site-packages/nvidia` directories of NVIDIA libraries mapped in the process.
fn wheel_roots(maps: &str) -> Vec<PathBuf> {
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter_map(|p| {
            let i = p.find("/site-packages/nvidia/")?;
            Some(PathBuf::from(&p[..i + "/site-packages/nvidia".len()]))
        })
        .collect()
}

fn site_packages(prefix: &Path) -> impl Iterator<Item = PathBuf> {
    let mut v: Vec<PathBuf> = read_dir(&prefix.join("lib"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python"))
        })
        .map(|p| p.join("site-packages"))
        .collect();
    v.sort();
    v.into_iter()
}

/// `/usr/local/cuda*` directories, newest name first.
pub fn system_roots() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = read_dir(Path::new("/usr/local"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cuda"))
        })
        .collect();
    v.sort();
    v.reverse();
    v
}

/// The directory of the mapped file that contains `addr`, from `/proc/self/maps`.
pub fn dir_of_mapping(maps: &str, addr: usize) -> Option<PathBuf> {
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (lo, hi) = f.next()?.split_once('-')?;
        let lo = usize::from_str_radix(lo, 16).ok()?;
        let hi = usize::from_str_radix(hi, 16).ok()?;
        let path = f.nth(4)?;
        ((lo..hi).contains(&addr) && path.starts_with('/'))
            .then(|| Path::new(path).parent().map(Path::to_path_buf))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn touch(p: &Path) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, b"").unwrap();
    }

    fn run(
        vars: &[(&str, &Path)],
        maps: &str,
        self_dir: Option<&Path>,
        roots: &[&Path],
    ) -> Vec<PathBuf> {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect();
        let var = |k: &str| m.get(k).cloned();
        candidates(&Inputs {
            var: &var,
            maps,
            self_dir: self_dir.map(Path::to_path_buf),
            system_roots: roots.iter().map(|p| p.to_path_buf()).collect(),
        })
    }

    #[test]
    fn explicit_path_then_self_then_cuda_home_then_system_then_loader() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let explicit = r.join("x/libcupti.so.13");
        let own = r.join("bin/libcupti.so.13");
        let home = r.join("cuda-home/extras/CUPTI/lib64/libcupti.so.12");
        let sys = r.join("usr-local-cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13");
        for p in [&own, &home, &sys] {
            touch(p);
        }
        let got = run(
            &[
                ("GPUPERF_CUPTI_PATH", &explicit),
                ("CUDA_HOME", &r.join("cuda-home")),
            ],
            "",
            Some(&r.join("bin")),
            &[&r.join("usr-local-cuda-13.0")],
        );
        let want: Vec<PathBuf> = vec![
            explicit,
            own,
            home,
            sys,
            "libcupti.so.13".into(),
            "libcupti.so.12".into(),
            "libcupti.so".into(),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn wheels_next_to_mapped_nvidia_libraries_and_in_the_venv() {
        let t = tempfile::tempdir().unwrap();
        let sp = t.path().join("venv/lib/python3.12/site-packages");
        let cu13 = sp.join("nvidia/cu13/lib/libcupti.so.13");
        let cu12 = sp.join("nvidia/cuda_cupti/lib/libcupti.so.12");
        touch(&cu13);
        touch(&cu12);
        let maps = format!(
            "7f00-7f10 r-xp 00000000 08:01 1 {}/nvidia/cuda_runtime/lib/libcudart.so.12\n",
            sp.display()
        );
        let got = run(&[], &maps, None, &[]);
        assert_eq!(&got[..2], &[cu13.clone(), cu12.clone()]);
        // The loader fallback prefers the loaded runtime's major.
        assert_eq!(got[2], PathBuf::from("libcupti.so.12"));
        // The same files are found from $VIRTUAL_ENV alone.
        let got = run(&[("VIRTUAL_ENV", &t.path().join("venv"))], "", None, &[]);
        assert_eq!(&got[..2], &[cu13, cu12]);
    }

    #[test]
    fn loaded_runtime_major_wins_within_a_directory() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("lib64");
        for n in [
            "libcupti.so",
            "libcupti.so.12",
            "libcupti.so.12.9.79",
            "libcupti.so.13",
        ] {
            touch(&d.join(n));
        }
        let maps = "1000-2000 r-xp 0 0:0 1 /usr/lib/libcudart.so.12.9.79\n";
        let got = run(&[], maps, Some(&d), &[]);
        assert_eq!(got[0], d.join("libcupti.so.12"));
        assert_eq!(got[1], d.join("libcupti.so.12.9.79"));
        assert_eq!(got[2], d.join("libcupti.so.13"));
        assert_eq!(got[3], d.join("libcupti.so"));
        let got = run(&[], "", Some(&d), &[]);
        assert_eq!(got[0], d.join("libcupti.so.13"));
    }

    #[test]
    fn mapping_lookup() {
        let maps = "1000-2000 r-xp 0 0:0 1 /opt/gpuperf/lib/libgpuperf_inject.so\n3000-4000 rw-p 0 0:0 0 \n";
        assert_eq!(
            dir_of_mapping(maps, 0x1800),
            Some(PathBuf::from("/opt/gpuperf/lib"))
        );
        assert_eq!(dir_of_mapping(maps, 0x3800), None);
        assert_eq!(dir_of_mapping(maps, 0x5000), None);
    }
}
