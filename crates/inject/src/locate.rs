//! Finding libcupti without help, and choosing among the ones found.
//!
//! Candidates, in order; the first that loads, suits the driver and lets
//! gpuperf subscribe wins:
//! 1. `GPUPERF_CUPTI_PATH`, taken as given;
//! 2. a libcupti already mapped in the process (PyTorch maps its own);
//! 3. the directory of this library (an install that ships CUPTI beside gpuperf);
//! 4. `$CUDA_HOME`, `$CUDA_PATH`, then every `/usr/local/cuda*`, each in
//!    `extras/CUPTI/lib64`, `lib64` and `targets/x86_64-linux/lib`;
//! 5. NVIDIA's Python wheels: `site-packages/nvidia/*/lib` next to any NVIDIA
//!    library already mapped in the process (PyTorch's venv), and under
//!    `$VIRTUAL_ENV` and `$CONDA_PREFIX`;
//! 6. the loader path, by soname.
//!
//! After the mapped one, libraries of the major of the CUDA runtime mapped in the
//! process come first (libcupti 12.9 has no callback ids for CUDA 13's
//! `__cudaLaunchKernel`), then the order above; within one directory the newest
//! version comes first. A major newer than the driver (`cuDriverGetVersion`) is
//! rejected before it is loaded: its `cuptiSubscribe` would fail.
//!
//! File names are compared by their whole version (`libcupti.so.13.1.115` over
//! `libcupti.so.13.0.85`, and within one driver's reach first: a 13.1 library
//! after a 13.0 one on a CUDA 13.0 driver). The CUDA toolkit's own files carry
//! CUPTI's release number instead (`libcupti.so.2025.3.1` behind the soname
//! `libcupti.so.13`): that is no CUDA major, so such a file is judged by its
//! `cuptiGetVersion` once loaded, never rejected or ranked by its name.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use gpuperf_merge::recording::env;

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
    /// `cuDriverGetVersion` (12080 for CUDA 12.8), when the driver answered.
    pub driver: Option<u32>,
}

/// The libraries to try, and the ones rejected before loading.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Paths to try in order, each a file that exists or a bare soname for the
    /// loader.
    pub candidates: Vec<PathBuf>,
    /// Paths not to load, with the reason.
    pub rejected: Vec<(PathBuf, String)>,
}

/// `CUDA 12.8` for `cuDriverGetVersion`'s 12080.
pub fn driver_name(version: u32) -> String {
    format!("CUDA {}.{}", version / 1000, version % 1000 / 10)
}

/// The CUDA major a `cuptiGetVersion` value belongs to: API 19 to 99 are
/// CUDA 12.x, 130001 is CUDA 13.0.
pub fn cupti_major(version: u32) -> Option<u32> {
    match version {
        19..=99 => Some(12),
        v if v >= 100_000 => Some(v / 10_000),
        _ => None,
    }
}

/// Why a libcupti of CUDA `major` cannot work with the driver, if it cannot.
pub fn too_new(major: u32, driver: Option<u32>) -> Option<String> {
    let d = driver?;
    (major > d / 1000)
        .then(|| format!("CUDA {major} is newer than the driver ({})", driver_name(d)))
}

/// Orders the candidates and rejects those the driver cannot run.
pub fn plan(inp: &Inputs<'_>) -> Plan {
    let prefer = loaded_cudart_major(inp.maps);
    let mut plan = Plan::default();
    if let Some(p) = (inp.var)(env::CUPTI_PATH).filter(|v| !v.is_empty()) {
        plan.candidates.push(PathBuf::from(p));
    }
    let mapped = mapped_cupti(inp.maps);
    let mut found = mapped.clone();
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
        found.extend(cupti_files(&d, prefer, inp.driver));
    }
    found.extend(
        ["libcupti.so.13", "libcupti.so.12", "libcupti.so"]
            .into_iter()
            .map(PathBuf::from),
    );
    let mut found = dedup(found);
    found.retain(|p| !plan.candidates.contains(p));
    // Stable: the mapped library, then the runtime's major, then search order.
    found.sort_by_key(|p| {
        (
            !mapped.contains(p),
            prefer.is_none() || name_major(p) != prefer,
        )
    });
    for p in found {
        match name_major(&p).and_then(|m| too_new(m, inp.driver)) {
            Some(why) => plan.rejected.push((p, why)),
            None => plan.candidates.push(p),
        }
    }
    plan
}

/// The CUDA version in a `libcupti.so.N[.M[.P]]` file name, as many parts as
/// it has; `None` when it has none, or when it is CUPTI's own release number
/// (`libcupti.so.2025.3.1`, a year, which says nothing of the CUDA major).
fn name_version(p: &Path) -> Option<Vec<u32>> {
    let rest = p.file_name()?.to_str()?.strip_prefix("libcupti.so.")?;
    let v: Vec<u32> = rest
        .split('.')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    v.first()
        .is_some_and(|&m| m < FIRST_RELEASE_YEAR)
        .then_some(v)
}

/// CUPTI's release numbers start at this year; CUDA majors stay far below it.
const FIRST_RELEASE_YEAR: u32 = 2000;

/// The CUDA major in a `libcupti.so.N…` file name; see [`name_version`].
fn name_major(p: &Path) -> Option<u32> {
    name_version(p)?.first().copied()
}

/// Whether a file's `major.minor` is newer than the driver's, when both are
/// known (a bare major is never newer than the driver's own major).
fn newer_minor(v: &[u32], driver: Option<u32>) -> bool {
    match (v, driver) {
        ([major, minor, ..], Some(d)) => (*major, *minor) > (d / 1000, d % 1000 / 10),
        _ => false,
    }
}

/// libcupti files mapped in the process.
fn mapped_cupti(maps: &str) -> Vec<PathBuf> {
    let v: Vec<PathBuf> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| {
            p.starts_with('/')
                && p.rsplit('/')
                    .next()
                    .is_some_and(|n| n.starts_with("libcupti.so"))
        })
        .map(PathBuf::from)
        .collect();
    dedup(v)
}

/// Where the search looked, for the "not found" message.
pub fn describe(inp: &Inputs<'_>) -> Vec<String> {
    let mut v = vec![env::CUPTI_PATH.to_owned()];
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

/// `libcupti.so*` files in `dir`, best first: the runtime's major, then the
/// newest whole version the driver reaches, then the newest beyond it; among
/// equals the shortest name (the soname link).
fn cupti_files(dir: &Path, prefer: Option<u32>, driver: Option<u32>) -> Vec<PathBuf> {
    // (the runtime's major, within the driver's reach, whole version)
    type Rank = (bool, bool, Vec<u32>);
    let mut found: Vec<(Rank, PathBuf)> = read_dir(dir)
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            name.starts_with("libcupti.so").then_some(())?;
            let mut v = name_version(&p).unwrap_or_default();
            let preferred = prefer.is_some() && v.first().copied() == prefer;
            let reach = !newer_minor(&v, driver);
            if v.len() == 1 {
                // A soname link points at the newest file of its major.
                v.push(u32::MAX);
            }
            let rank = (preferred, reach, v);
            p.is_file().then_some((rank, p))
        })
        .collect();
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
        plan_with(vars, maps, self_dir, roots, None).candidates
    }

    fn plan_with(
        vars: &[(&str, &Path)],
        maps: &str,
        self_dir: Option<&Path>,
        roots: &[&Path],
        driver: Option<u32>,
    ) -> Plan {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect();
        let var = |k: &str| m.get(k).cloned();
        plan(&Inputs {
            var: &var,
            maps,
            self_dir: self_dir.map(Path::to_path_buf),
            system_roots: roots.iter().map(|p| p.to_path_buf()).collect(),
            driver,
        })
    }

    #[test]
    fn majors_newer_than_the_driver_are_rejected_before_loading() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("cuda-13.0/lib64");
        for n in ["libcupti.so.13", "libcupti.so.12", "libcupti.so"] {
            touch(&d.join(n));
        }
        let root = t.path().join("cuda-13.0");
        let p = plan_with(&[], "", None, &[&root], Some(12080));
        let want: Vec<PathBuf> = vec![
            d.join("libcupti.so.12"),
            d.join("libcupti.so"),
            "libcupti.so.12".into(),
            "libcupti.so".into(),
        ];
        assert_eq!(p.candidates, want);
        let why = "CUDA 13 is newer than the driver (CUDA 12.8)".to_owned();
        assert_eq!(
            p.rejected,
            [
                (d.join("libcupti.so.13"), why.clone()),
                ("libcupti.so.13".into(), why)
            ]
        );
        // A CUDA 13 driver runs both; an unknown driver rejects nothing.
        for driver in [Some(13000), None] {
            let p = plan_with(&[], "", None, &[&root], driver);
            assert!(p.rejected.is_empty(), "{p:?}");
            assert_eq!(p.candidates[0], d.join("libcupti.so.13"));
        }
        // The user's explicit choice is tried as given.
        let explicit = d.join("libcupti.so.13");
        let p = plan_with(
            &[("GPUPERF_CUPTI_PATH", &explicit)],
            "",
            None,
            &[],
            Some(12080),
        );
        assert_eq!(p.candidates[0], explicit);
    }

    #[test]
    fn a_libcupti_already_mapped_comes_first() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path().join("cuda-13.0/lib64/libcupti.so.13");
        touch(&sys);
        let torch = "/venv/lib/python3.12/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12";
        let maps = format!(
            "7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libcudart.so.13.0.96\n\
             7f10-7f20 r-xp 00000000 08:01 2 {torch}\n\
             7f20-7f30 r--p 00010000 08:01 2 {torch}\n"
        );
        let got = run(&[], &maps, None, &[&t.path().join("cuda-13.0")]);
        assert_eq!(got[0], PathBuf::from(torch));
        assert_eq!(got[1], sys);
        assert_eq!(got.iter().filter(|p| **p == Path::new(torch)).count(), 1);
    }

    #[test]
    fn the_runtime_major_wins_across_directories() {
        let t = tempfile::tempdir().unwrap();
        let sp = t.path().join("venv/lib/python3.12/site-packages");
        let cu13 = sp.join("nvidia/cu13/lib/libcupti.so.13");
        let cu12 = sp.join("nvidia/cuda_cupti/lib/libcupti.so.12");
        touch(&cu13);
        touch(&cu12);
        let cudart = |major: u32| {
            format!(
                "7f00-7f10 r-xp 00000000 08:01 1 {}/nvidia/cuda_runtime/lib/libcudart.so.{major}\n",
                sp.display()
            )
        };
        let got = run(&[], &cudart(12), None, &[]);
        assert_eq!(
            &got[..3],
            &[cu12.clone(), "libcupti.so.12".into(), cu13.clone()]
        );
        let got = run(&[], &cudart(13), None, &[]);
        assert_eq!(&got[..3], &[cu13, "libcupti.so.13".into(), cu12]);
    }

    #[test]
    fn versions_name_their_cuda_release() {
        assert_eq!(driver_name(12080), "CUDA 12.8");
        assert_eq!(driver_name(13000), "CUDA 13.0");
        assert_eq!(cupti_major(28), Some(12));
        assert_eq!(cupti_major(130001), Some(13));
        assert_eq!(cupti_major(7), None);
        assert_eq!(
            too_new(13, Some(12090)).as_deref(),
            Some("CUDA 13 is newer than the driver (CUDA 12.9)")
        );
        assert_eq!(too_new(12, Some(13000)), None);
        assert_eq!(too_new(13, None), None);
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
        // The loaded runtime's major first, file before soname.
        assert_eq!(
            &got[..3],
            &[cu12.clone(), "libcupti.so.12".into(), cu13.clone()]
        );
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
        assert_eq!(got[2], PathBuf::from("libcupti.so.12"));
        assert_eq!(got[3], d.join("libcupti.so.13"));
        assert_eq!(got[4], d.join("libcupti.so"));
        let got = run(&[], "", Some(&d), &[]);
        assert_eq!(got[0], d.join("libcupti.so.13"));
    }

    #[test]
    fn whole_versions_rank_files_and_release_numbers_are_no_majors() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("lib64");
        for n in [
            "libcupti.so.13.0.85",
            "libcupti.so.13.1.115",
            "libcupti.so.12.9.79",
        ] {
            touch(&d.join(n));
        }
        // The newest whole version first, not the shortest name of one major.
        let got = run(&[], "", Some(&d), &[]);
        assert_eq!(
            got[..3],
            [
                d.join("libcupti.so.13.1.115"),
                d.join("libcupti.so.13.0.85"),
                d.join("libcupti.so.12.9.79")
            ]
        );
        // A CUDA 13.0 driver: the 13.1 library is tried after those it runs.
        let p = plan_with(&[], "", Some(&d), &[], Some(13000));
        assert_eq!(
            p.candidates[..3],
            [
                d.join("libcupti.so.13.0.85"),
                d.join("libcupti.so.12.9.79"),
                d.join("libcupti.so.13.1.115")
            ]
        );
        assert!(p.rejected.is_empty(), "{p:?}");
        // The toolkit's real file is named by CUPTI's release (a year): it is
        // judged once loaded, not rejected as "CUDA 2025".
        let k = t.path().join("cuda-12.8/extras/CUPTI/lib64");
        for n in ["libcupti.so.12", "libcupti.so.2025.1.0"] {
            touch(&k.join(n));
        }
        let p = plan_with(&[], "", None, &[&t.path().join("cuda-12.8")], Some(12080));
        assert!(
            p.rejected
                .iter()
                .all(|(p, _)| !p.ends_with("libcupti.so.2025.1.0")),
            "{p:?}"
        );
        assert_eq!(
            p.candidates[..2],
            [k.join("libcupti.so.12"), k.join("libcupti.so.2025.1.0")]
        );
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
