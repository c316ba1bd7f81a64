//! The flamegraph's JavaScript in a real browser: search and click-to-zoom, driven through
//! the URL parameters that inferno's script reads on load (`?s=TERM`, `?x=FG_X&y=Y`), in
//! headless Chromium with `--dump-dom`.
//!
//! Without a `chromium` (or `chromium-browser`) on `PATH` the tests print
//! "skipped: chromium not found" and pass, unless `GPUPERF_REQUIRE_CHROMIUM=1`.

#![cfg(all(feature = "render", target_os = "linux"))]
// Test names are `<input>__<what is checked>`.
#![allow(non_snake_case)]

use gpuperf_merge::write::svg;
use gpuperf_test_support::require::Need;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium is killed after this long.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(60);
// kill(2), to signal the process group; std signals only the child itself. Not the `kill`
// program: procps-ng 4.0.2 reads `kill -KILL -1234` as `kill(-1, SIGKILL)`.
unsafe extern "C" {
    safe fn kill(pid: i32, sig: i32) -> i32;
}
const SIGKILL: i32 = 9;
/// inferno's default search colour.
const SEARCH_COLOR: &str = "rgb(230,0,230)";

fn fixture() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/svg/small.folded");
    fs::read_to_string(path).unwrap()
}

/// The Chromium binary, or `None` (after printing why) when the test should be skipped.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        Need::Chromium.missing("chromium not found on PATH (Debian: apt-get install chromium)");
    }
    found
}

/// Renders the fixture with JavaScript into `dir` and returns the SVG path and text.
fn render_with_js(dir: &Path) -> (PathBuf, String) {
    let mut opts = svg::Options::default();
    opts.deterministic = true;
    opts.no_javascript = false;
    let mut out = Vec::new();
    svg::render(&opts, fixture().lines(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("function zoom("), "the SVG has no JavaScript");
    let path = dir.join("flame.svg");
    fs::write(&path, &text).unwrap();
    (path, text)
}

/// Loads `file://<svg>?<query>` in headless Chromium and returns the DOM after the page's
/// scripts ran.
fn dump_dom(chromium: &Path, dir: &Path, svg: &Path, query: &str) -> String {
    let url = format!("file://{}?{query}", percent_encode_path(svg));
    let stdout_path = dir.join("dom.txt");
    let stderr_path = dir.join("chromium-stderr.txt");
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ])
    .arg(format!("--user-data-dir={}", dir.join("profile").display()))
    .args(["--virtual-time-budget=2000", "--dump-dom"])
    .arg(&url)
    .stdin(Stdio::null())
    // Files, not pipes: Chromium's helper processes may hold them open after it exits.
    .stdout(File::create(&stdout_path).unwrap())
    .stderr(File::create(&stderr_path).unwrap());
    // Own process group, so that a timeout kills the helpers too.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().expect("failed to start chromium");

    let deadline = Instant::now() + CHROMIUM_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            // The group leader is not reaped yet, so the group id is still ours.
            let pgid = i32::try_from(child.id()).unwrap();
            assert!(pgid > 1);
            kill(-pgid, SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish in {CHROMIUM_TIMEOUT:?} loading {url}\nstderr:\n{}",
                tail(&stderr_path)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = fs::read_to_string(&stdout_path).unwrap();
    assert!(
        status.success() && dom.contains("id=\"frames\""),
        "chromium failed ({status}) loading {url}\nstdout:\n{dom}\nstderr:\n{}",
        tail(&stderr_path)
    );
    dom
}

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn percent_encode_path(path: &Path) -> String {
    let mut out = String::new();
    for b in path.to_str().expect("UTF-8 temp path").bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One `<g>` of the `frames` container, as serialized in the SVG or the dumped DOM.
#[derive(Debug)]
struct Frame {
    /// `<title>` text: name, weight and percentage.
    title: String,
    /// The `class` of the `<g>`: "", "hide" or "parent".
    class: String,
    /// `fill` of the `<rect>`.
    fill: String,
    /// `fg:orig_fill` of the `<rect>`, which search sets when it recolours it.
    orig_fill: Option<String>,
    x: f64,
    width: f64,
    y: u64,
    fg_x: u64,
    fg_w: u64,
}

impl Frame {
    fn is(&self, name: &str) -> bool {
        self.title.starts_with(&format!("{name} ("))
    }
}

fn frames(doc: &str) -> Vec<Frame> {
    let start = doc.find("id=\"frames\"").expect("frames container");
    let mut rest = &doc[start..];
    let mut frames = Vec::new();
    while let Some(i) = rest.find("<g") {
        rest = &rest[i..];
        let end = rest.find("</g>").expect("</g>");
        let g = &rest[..end];
        rest = &rest[end..];
        if !matches!(g.as_bytes()[2], b' ' | b'>') {
            continue;
        }
        let g_tag = &g[..g.find('>').unwrap()];
        let rect = &g[g.find("<rect").expect("rect")..];
        let rect = &rect[..rect.find('>').unwrap()];
        let attr =
            |name: &str| attr_of(rect, name).unwrap_or_else(|| panic!("no {name} in {rect}"));
        let pct = |v: &str| v.trim_end_matches('%').parse::<f64>().unwrap();
        frames.push(Frame {
            title: between(g, "<title>", "</title>").unwrap().to_owned(),
            class: attr_of(g_tag, "class").unwrap_or_default().to_owned(),
            fill: attr("fill").to_owned(),
            orig_fill: attr_of(rect, "fg:orig_fill").map(str::to_owned),
            x: pct(attr("x")),
            width: pct(attr("width")),
            y: attr("y").parse().unwrap(),
            fg_x: attr("fg:x").parse().unwrap(),
            fg_w: attr("fg:w").parse().unwrap(),
        });
    }
    assert!(!frames.is_empty(), "no frames in {doc}");
    frames
}

/// Value of attribute `name` in a start tag (space before the name, so `x` is not `fg:x`).
fn attr_of<'s>(tag: &'s str, name: &str) -> Option<&'s str> {
    between(tag, &format!(" {name}=\""), "\"")
}

fn between<'s>(s: &'s str, open: &str, close: &str) -> Option<&'s str> {
    let start = s.find(open)? + open.len();
    let len = s[start..].find(close)?;
    Some(&s[start..start + len])
}

/// The start tag of the element with `id`.
fn element<'s>(doc: &'s str, id: &str) -> &'s str {
    let i = doc
        .find(&format!(" id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let start = doc[..i].rfind('<').unwrap();
    &doc[start..i + doc[i..].find('>').unwrap()]
}

/// Text of the element with `id`.
fn element_text<'s>(doc: &'s str, id: &str) -> &'s str {
    let tag = element(doc, id);
    let start = doc.find(tag).unwrap() + tag.len() + 1;
    &doc[start..start + doc[start..].find('<').unwrap()]
}

#[test]
fn svg_browser_small_folded__search_gpu_kernel() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (svg_path, _) = render_with_js(dir.path());
    let dom = dump_dom(&chromium, dir.path(), &svg_path, "s=GPU_Kernel");

    // The share of GPU time in kernels, from the input, formatted like the script does.
    let (mut kernel, mut total) = (0u64, 0u64);
    for line in fixture()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (stack, weight) = line.rsplit_once(' ').unwrap();
        let weight: u64 = weight.parse().unwrap();
        total += weight;
        if stack.contains("[GPU_Kernel]") {
            kernel += weight;
        }
    }
    let want = format!("Matched: {:.1}%", 100.0 * kernel as f64 / total as f64);
    assert_eq!(element_text(&dom, "matched"), want, "search did not run");
    assert_eq!(element_text(&dom, "search"), "Reset Search");

    let frames = frames(&dom);
    let kernels = frames
        .iter()
        .filter(|f| f.title.starts_with("[GPU_Kernel]"))
        .count();
    assert_eq!(kernels, 5, "{frames:#?}");
    for f in &frames {
        if f.title.starts_with("[GPU_Kernel]") {
            assert_eq!(f.fill, SEARCH_COLOR, "kernel not highlighted: {f:?}");
            assert!(f.orig_fill.is_some(), "{f:?}");
        } else {
            assert_ne!(
                f.fill, SEARCH_COLOR,
                "non-matching frame highlighted: {f:?}"
            );
            assert_eq!(f.orig_fill, None, "{f:?}");
        }
    }
}

#[test]
fn svg_browser_small_folded__zoom_into_forward() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (svg_path, svg_text) = render_with_js(dir.path());
    let before = frames(&svg_text);
    let target = before.iter().find(|f| f.is("forward")).unwrap();
    assert!(target.fg_x > 0 && target.width < 100.0, "{target:?}");
    let query = format!("x={}&y={}", target.fg_x, target.y);
    let dom = dump_dom(&chromium, dir.path(), &svg_path, &query);

    assert!(
        !element(&dom, "unzoom").contains("hide"),
        "the Reset Zoom button is still hidden: {}",
        element(&dom, "unzoom")
    );
    let after = frames(&dom);
    assert_eq!(after.len(), before.len());
    let (mut parents, mut hidden, mut shown) = (0, 0, 0);
    for f in &after {
        let (x0, x1) = (target.fg_x, target.fg_x + target.fg_w);
        // Frames below the target (larger y) are its ancestors or hidden; frames at its
        // level or above are its descendants, stretched, or hidden.
        if f.y > target.y {
            if f.fg_x <= x0 && f.fg_x + f.fg_w >= x1 {
                assert_eq!(
                    (f.class.as_str(), f.x, f.width),
                    ("parent", 0.0, 100.0),
                    "{f:?}"
                );
                parents += 1;
            } else {
                assert_eq!(f.class, "hide", "{f:?}");
                hidden += 1;
            }
        } else if f.fg_x < x0 || f.fg_x >= x1 {
            assert_eq!(f.class, "hide", "{f:?}");
            hidden += 1;
        } else {
            assert_eq!(f.class, "", "{f:?}");
            let want_x = 100.0 * (f.fg_x - x0) as f64 / target.fg_w as f64;
            let want_width = 100.0 * f.fg_w as f64 / target.fg_w as f64;
            assert!(
                (f.x - want_x).abs() < 1e-3 && (f.width - want_width).abs() < 1e-3,
                "not rescaled to the zoomed frame: {f:?}, want x {want_x} width {want_width}"
            );
            shown += 1;
        }
    }
    let zoomed = after.iter().find(|f| f.is("forward")).unwrap();
    assert_eq!((zoomed.x, zoomed.width), (0.0, 100.0), "{zoomed:?}");
    // `all`, `main`, `run_model`; the other branches; `forward` and its 11 descendants.
    assert_eq!((parents, hidden, shown), (3, 12, 12), "{after:#?}");
}
