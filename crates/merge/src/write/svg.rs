//! SVG flamegraph of merged folded stacks, drawn by inferno.
//!
//! Input lines are the merged folded format,
//! `main;run;cudaLaunchKernel;[GPU_Kernel]matmul(float*, int) 1234`, where the weight is GPU
//! time in integer µs. Frame widths are GPU time, and tooltips say "µs" instead of "samples".
//!
//! GPU frames (names starting with `[GPU_`) and the `[no CPU stack]` root get colours from a
//! cold blue/green/aqua family, one hue range per kind of GPU work, with the shade picked by a
//! hash of the frame name; CPU frames keep inferno's "hot" palette. The two families never
//! overlap: GPU colours have a red channel of at most 170, "hot" colours at least 205.
//!
//! | frame | family |
//! |---|---|
//! | `[GPU_Kernel]name` | aqua |
//! | `[GPU_Memcpy …]` | blue |
//! | `[GPU_Memset]` | green |
//! | `[GPU_Launch_Pending]` | pale steel blue |
//! | any other `[GPU_…]` | periwinkle |
//! | `[no CPU stack]` | slate grey-blue |
//!
//! ```
//! use gpuperf_merge::write::svg;
//!
//! let lines = ["main;cudaLaunchKernel;[GPU_Kernel]matmul(float*, int) 1234"];
//! let mut out = Vec::new();
//! svg::render(&svg::Options::default(), lines, &mut out)?;
//! assert!(String::from_utf8(out).unwrap().contains("µs"));
//! # Ok::<(), gpuperf_merge::Error>(())
//! ```

use crate::{Error, Result};
use inferno::flamegraph::{
    self,
    color::{Color, PaletteMap},
};
use rustc_hash::{FxHashMap, FxHashSet};
use std::io::{self, Write};

/// Title used by [`Options::default`].
const DEFAULT_TITLE: &str = "gpuperf: GPU time by CPU stack";
/// Unit of the weights, shown in tooltips.
const COUNT_NAME: &str = "µs";
/// Prefix of every GPU frame name.
const GPU_PREFIX: &str = "[GPU_";
/// Root frame of GPU work that no CPU stack could be joined to.
const NO_CPU_STACK: &str = "[no CPU stack]";
/// What [`Error::Write`] names.
const WHAT: &str = "SVG flamegraph";

/// Options for [`render`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Title. Default is "gpuperf: GPU time by CPU stack".
    pub title: String,
    /// Subtitle, e.g. the command line. Default is `None`.
    pub subtitle: Option<String>,
    /// Deterministic output for tests: colours from name hashes instead of random ones, and
    /// indented XML (inferno's `hash`, `deterministic` and `pretty_xml`). Default is `false`.
    pub deterministic: bool,
    /// Omit JavaScript, which makes the SVG static (no search, zoom or tooltips line);
    /// for golden files. Default is `false`.
    pub no_javascript: bool,
    /// What the weights count, shown in tooltips. Default is "µs" (of GPU time).
    pub count_name: String,
    /// (frame label, full name) pairs: labels that a [`crate::view::View`]
    /// shortened get their full name in the tooltip, before the frame's weight.
    /// Default is empty.
    pub titles: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            title: DEFAULT_TITLE.to_owned(),
            subtitle: None,
            deterministic: false,
            no_javascript: false,
            count_name: COUNT_NAME.to_owned(),
            titles: Vec::new(),
        }
    }
}

/// Renders merged folded lines to an SVG flamegraph written to `out`.
///
/// Lines are in any order; blank lines, lines starting with `# ` and lines without a weight
/// are skipped. Input with no weight at all (no GPU work, or none that lasted a unit) gives
/// a valid SVG of its own that says so, and returns `Ok`: inferno is not asked to draw
/// nothing.
///
/// # Errors
///
/// [`Error::Write`] when writing to `out` fails, or when the weights add up to more than
/// `u64::MAX` µs.
pub fn render<'a, I, W>(opts: &Options, lines: I, mut out: W) -> Result<()>
where
    I: IntoIterator<Item = &'a str>,
    W: Write,
{
    let lines: Vec<&'a str> = lines.into_iter().collect();
    let mut palette = PaletteMap::default();
    let total = prepare(&lines, &mut palette)?;
    if total == 0 {
        return write_empty(opts, &mut out).map_err(write_error);
    }

    let mut inferno_opts = flamegraph::Options::default();
    inferno_opts.title = opts.title.clone();
    inferno_opts.subtitle = opts.subtitle.clone();
    inferno_opts.count_name = opts.count_name.clone();
    inferno_opts.hash = opts.deterministic;
    inferno_opts.deterministic = opts.deterministic;
    inferno_opts.pretty_xml = opts.deterministic;
    inferno_opts.no_javascript = opts.no_javascript;
    inferno_opts.palette_map = Some(&mut palette);
    // Kernel names are long and their start is what tells them apart.
    inferno_opts.text_truncate_direction = flamegraph::TextTruncateDirection::Right;

    if opts.titles.is_empty() {
        return flamegraph::from_lines(&mut inferno_opts, lines.iter().copied(), &mut out)
            .map_err(write_error);
    }
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut inferno_opts, lines.iter().copied(), &mut svg)
        .map_err(write_error)?;
    let svg = String::from_utf8(svg)
        .map_err(|e| write_error(io::Error::new(io::ErrorKind::InvalidData, e.utf8_error())))?;
    out.write_all(with_full_names(&svg, &opts.titles).as_bytes())
        .and_then(|()| out.flush())
        .map_err(write_error)
}

/// inferno's SVG with the full name of each shortened label in its frames'
/// tooltips, in front of what inferno says of the frame (`(N µs, P%)`, and a
/// diff's change). inferno's own per-frame titles would replace that too.
fn with_full_names(svg: &str, titles: &[(String, String)]) -> String {
    const OPEN: &str = "<title>";
    const CLOSE: &str = "</title>";
    let full: FxHashMap<&str, &str> = titles
        .iter()
        .map(|(label, title)| (label.as_str(), title.as_str()))
        .collect();
    let mut out = String::with_capacity(svg.len() + svg.len() / 8);
    let mut rest = svg;
    while let Some(start) = rest.find(OPEN) {
        let text_at = start + OPEN.len();
        let Some(len) = rest[text_at..].find(CLOSE) else {
            break;
        };
        let text = &rest[text_at..text_at + len];
        out.push_str(&rest[..text_at]);
        // inferno's suffix holds no `(`: the last ` (` starts it.
        let (label, info) = text.rfind(" (").map_or((text, ""), |i| text.split_at(i));
        match full.get(unescape(label).as_str()) {
            Some(name) => {
                out.push_str(&escape(name));
                out.push_str(info);
            }
            None => out.push_str(text),
        }
        rest = &rest[text_at + len..];
    }
    out.push_str(rest);
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// What the SVG of folded stacks without weight says.
pub(crate) const NOTHING_TO_DRAW: &str =
    "No GPU work to draw: the trace holds no kernel, copy or memset with a duration";

/// A small valid SVG with the title, the subtitle and [`NOTHING_TO_DRAW`].
fn write_empty(opts: &Options, out: &mut impl Write) -> io::Result<()> {
    let esc = escape;
    writeln!(
        out,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="110" viewBox="0 0 1200 110" xmlns="http://www.w3.org/2000/svg">
<rect x="0" y="0" width="100%" height="100%" fill="rgb(238,238,238)"/>
<text x="600" y="28" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>
<text x="600" y="52" text-anchor="middle" font-family="Verdana" font-size="12">{}</text>
<text x="600" y="84" text-anchor="middle" font-family="Verdana" font-size="14">{}</text>
</svg>"#,
        esc(&opts.title),
        esc(opts.subtitle.as_deref().unwrap_or("")),
        NOTHING_TO_DRAW
    )?;
    out.flush()
}

fn write_error(source: io::Error) -> Error {
    Error::Write { what: WHAT, source }
}

/// Puts a GPU-family colour into `palette` for every distinct GPU frame in `lines`, and
/// returns the total weight, parsing each line the way inferno does.
fn prepare(lines: &[&str], palette: &mut PaletteMap) -> Result<u64> {
    let mut total = 0u64;
    let mut seen = FxHashSet::default();
    for line in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with("# ") {
            continue;
        }
        let Some((stack, weight)) = split_weight(line) else {
            continue;
        };
        total = total.checked_add(weight).ok_or_else(|| {
            write_error(io::Error::new(
                io::ErrorKind::InvalidData,
                "the total weight of the folded stacks overflows u64",
            ))
        })?;
        for frame in gpu_frames(stack) {
            if seen.insert(frame)
                && let Some(color) = gpu_color(frame)
            {
                palette.insert(frame, color);
            }
        }
    }
    Ok(total)
}

/// Splits a trimmed line into its stack and weight like inferno's `merge::frames`: the last
/// space-separated field is the weight, and a second numeric field before it (the "before"
/// column of a differential flamegraph) is dropped as well.
fn split_weight(line: &str) -> Option<(&str, u64)> {
    let (stack, weight) = strip_weight(line)?;
    let stack = strip_weight(stack).map_or(stack, |(s, _)| s);
    (!stack.is_empty()).then_some((stack, weight))
}

/// Removes a trailing ` 123` or ` 123.45` field; the fraction is truncated, as inferno does.
fn strip_weight(line: &str) -> Option<(&str, u64)> {
    let start = line.rfind(' ')? + 1;
    let field = &line[start..];
    let integer = match field.split_once('.') {
        Some((int, frac)) if frac.bytes().all(|b| b.is_ascii_digit()) => int,
        Some(_) => return None,
        None => field,
    };
    if !integer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let weight = integer.parse().ok()?;
    Some((line[..start].trim_end(), weight))
}

/// The frames of `stack` (split on `;`, as inferno splits) that are drawn in GPU colours.
fn gpu_frames(stack: &str) -> impl Iterator<Item = &str> {
    let bytes = stack.as_bytes();
    memchr::memchr_iter(b'[', bytes)
        .filter(move |&i| i == 0 || bytes[i - 1] == b';')
        .map(move |i| {
            let rest = &stack[i..];
            &rest[..memchr::memchr(b';', rest.as_bytes()).unwrap_or(rest.len())]
        })
        .filter(|frame| is_gpu_frame(frame))
}

fn is_gpu_frame(frame: &str) -> bool {
    frame.starts_with(GPU_PREFIX) || frame == NO_CPU_STACK
}

/// Colour of a GPU frame, or `None` for a CPU frame.
///
/// Each kind of GPU work has its own hue range; the name hash picks the shade within it, so
/// the same kernel has the same colour in every flamegraph. Every colour has `r <= 170` and a
/// larger green or blue channel, which keeps it apart from inferno's "hot" palette
/// (`r >= 205`, `b <= 55`).
fn gpu_color(frame: &str) -> Option<Color> {
    if frame == NO_CPU_STACK {
        return Some(Color {
            r: 140,
            g: 160,
            b: 185,
        });
    }
    let kind = frame.strip_prefix(GPU_PREFIX)?;
    let (v1, v2) = name_hash(frame);
    // Channel = base + span * v, with base + span <= 255.
    let shade = |base: u8, span: u8, v: f32| base + (f32::from(span) * v) as u8;
    let (r, g, b) = if kind.starts_with("Kernel") {
        // aqua, from teal to sky blue: green and blue move in opposite directions
        (
            shade(10, 60, v1),
            shade(145, 65, v2),
            shade(180, 60, 1.0 - v2),
        )
    } else if kind.starts_with("Memcpy") {
        // blue
        (shade(60, 40, v1), shade(100, 50, v1), shade(210, 45, v2))
    } else if kind.starts_with("Memset") {
        // green
        (shade(50, 40, v1), shade(175, 55, v2), shade(90, 40, v1))
    } else if kind.starts_with("Launch_Pending") {
        // pale steel blue
        (shade(150, 20, v1), shade(175, 20, v1), shade(220, 30, v2))
    } else {
        // periwinkle, for GPU frame kinds added later
        (shade(110, 40, v1), shade(110, 40, v1), shade(200, 50, v2))
    };
    Some(Color { r, g, b })
}

/// Two numbers in `[0, 1]` from a stable hash of `name` (FNV-1a plus a splitmix64
/// finaliser, so that names differing only at the end still get different shades).
fn name_hash(name: &str) -> (f32, f32) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    let unit = |bits: u64| (bits & 0xffff) as f32 / f32::from(u16::MAX);
    (unit(h), unit(h >> 16))
}

#[cfg(test)]
// Test names are `<input>__<what is checked>`.
#[allow(non_snake_case)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs;
    use std::path::{Path, PathBuf};

    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/svg")
            .join(name)
    }

    fn golden_opts() -> Options {
        Options {
            deterministic: true,
            no_javascript: true,
            ..Options::default()
        }
    }

    fn render_to_string(opts: &Options, input: &str) -> String {
        let mut out = Vec::new();
        render(opts, input.lines(), &mut out).expect("render");
        String::from_utf8(out).expect("SVG is UTF-8")
    }

    fn assert_golden(actual: &str, expected: &Path) {
        crate::golden::check(expected, actual);
    }

    /// One drawn frame: its name (unescaped, without the weight suffix) and fill colour.
    #[derive(Debug)]
    struct Drawn {
        name: String,
        fill: Color,
    }

    /// Pulls `(title, rect fill)` pairs out of the `<g>` elements of an SVG from inferno.
    fn drawn_frames(svg: &str) -> Vec<Drawn> {
        let frames = &svg[svg.find("id=\"frames\"").expect("frames container")..];
        frames
            .split("<g>")
            .skip(1)
            .map(|g| {
                let title = between(g, "<title>", "</title>").expect("title");
                let name = unescape(&title[..title.rfind(" (").expect("weight suffix")]);
                let fill = between(g, "fill=\"rgb(", ")\"").expect("fill");
                let rgb: Vec<u8> = fill.split(',').map(|c| c.parse().unwrap()).collect();
                Drawn {
                    name,
                    fill: Color {
                        r: rgb[0],
                        g: rgb[1],
                        b: rgb[2],
                    },
                }
            })
            .collect()
    }

    fn between<'s>(s: &'s str, open: &str, close: &str) -> Option<&'s str> {
        let start = s.find(open)? + open.len();
        let len = s[start..].find(close)?;
        Some(&s[start..start + len])
    }

    fn is_gpu_family(c: Color) -> bool {
        c.r <= 170 && c.g.max(c.b) > c.r
    }

    fn is_hot(c: Color) -> bool {
        c.r >= 205 && c.b <= 55
    }

    #[test]
    fn svg_small_folded__golden() {
        let input = fs::read_to_string(data("small.folded")).unwrap();
        let svg = render_to_string(&golden_opts(), &input);
        assert_golden(&svg, &data("small.expected.svg"));
    }

    #[test]
    fn svg_empty_folded__golden() {
        let input = fs::read_to_string(data("empty.folded")).unwrap();
        let svg = render_to_string(&golden_opts(), &input);
        assert_golden(&svg, &data("empty.expected.svg"));
    }

    #[test]
    fn svg_small_folded__gpu_frames_cold_cpu_frames_hot() {
        let input = fs::read_to_string(data("small.folded")).unwrap();
        let drawn = drawn_frames(&render_to_string(&golden_opts(), &input));
        let (gpu, cpu): (Vec<_>, Vec<_>) = drawn.iter().partition(|d| is_gpu_frame(&d.name));
        // `all`, 15 CPU frames (3 `cudaLaunchKernel` at different places) and 11 GPU frames.
        assert_eq!(gpu.len(), 11, "{drawn:#?}");
        assert_eq!(cpu.len(), 16, "{drawn:#?}");
        for d in &gpu {
            assert!(is_gpu_family(d.fill), "GPU frame not in GPU colours: {d:?}");
            assert_eq!(Some(d.fill), gpu_color(&d.name), "{d:?}");
        }
        for d in &cpu {
            assert!(is_hot(d.fill), "CPU frame not in the hot palette: {d:?}");
        }
        let kernel = |name: &str| gpu.iter().find(|d| d.name == name).unwrap().fill;
        assert_ne!(
            kernel("[GPU_Kernel]softmax_kernel(float*, int)"),
            kernel("[GPU_Kernel]bias_add(float*, float const&, int)"),
            "kernels get different shades"
        );
    }

    #[test]
    fn svg_small_folded__title_and_microseconds() {
        let input = fs::read_to_string(data("small.folded")).unwrap();
        let mut opts = golden_opts();
        opts.subtitle = Some("./train --epochs 1".to_owned());
        let svg = render_to_string(&opts, &input);
        assert!(svg.contains(">gpuperf: GPU time by CPU stack</text>"));
        assert!(svg.contains(">./train --epochs 1</text>"));
        assert!(
            svg.contains("<title>all (14,130 µs, 100%)</title>"),
            "{svg}"
        );
        assert!(svg.contains("<title>[GPU_Memcpy HtoD] (2,400 µs, 16.99%)</title>"));
        // Duplicate lines are summed; `&` and `<>` are escaped.
        assert!(
            svg.contains("<title>[GPU_Kernel]bias_add(float*, float const&amp;, int) (1,000 µs")
        );
        assert!(svg.contains("[GPU_Kernel]void gemm&lt;float, 128&gt;"));
        assert!(!svg.contains(" samples"));
    }

    #[test]
    fn svg_with_full_names__their_tooltips_keep_the_weight() {
        let input = fs::read_to_string(data("small.folded")).unwrap();
        let mut opts = golden_opts();
        opts.titles = vec![(
            "[GPU_Memcpy HtoD]".to_owned(),
            "[GPU_Memcpy HtoD] host to device <pageable> (pinned: no)".to_owned(),
        )];
        let js = Options {
            no_javascript: false,
            deterministic: false,
            ..opts.clone()
        };
        for opts in [opts, js] {
            let svg = render_to_string(&opts, &input);
            assert!(
                svg.contains(
                    "<title>[GPU_Memcpy HtoD] host to device &lt;pageable&gt; (pinned: no) \
                     (2,400 µs, 16.99%)</title>"
                ),
                "{svg}"
            );
            // Every frame, named in full or not, says its weight once.
            assert_eq!(drawn_frames(&svg).len(), 27);
            assert_eq!(svg.matches(" µs, ").count(), 27, "{svg}");
        }
    }

    #[test]
    fn svg_with_javascript__has_script_and_is_not_pretty() {
        let input = fs::read_to_string(data("small.folded")).unwrap();
        let svg = render_to_string(&Options::default(), &input);
        assert!(svg.contains("<script"));
        assert!(svg.contains("function search("));
        let drawn = drawn_frames(&svg);
        assert_eq!(drawn.len(), 27);
        for d in drawn {
            assert!(is_gpu_family(d.fill) == is_gpu_frame(&d.name), "{d:?}");
        }
    }

    #[test]
    fn svg_no_weights__says_there_is_no_gpu_work_and_ok() {
        for input in [
            "",
            "\n\n",
            "# only a comment\n",
            "main;f 0\n",
            "main;f\nno weight x\n",
        ] {
            let svg = render_to_string(&golden_opts(), input);
            assert!(svg.starts_with("<?xml"), "{input:?}: {svg}");
            assert!(svg.contains(NOTHING_TO_DRAW), "{input:?}: {svg}");
            assert!(!svg.contains("ERROR"), "{input:?}: {svg}");
            assert!(svg.trim_end().ends_with("</svg>"), "{input:?}: {svg}");
        }
    }

    #[test]
    fn svg_weight_overflow__error() {
        let lines = ["a 18446744073709551615", "b 1"];
        let err = render(&Options::default(), lines, Vec::new()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Write {
                    what: "SVG flamegraph",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn svg_failing_writer__write_error() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        for input in [&["main;f 5"][..], &[]] {
            let err = render(&Options::default(), input.iter().copied(), Broken).unwrap_err();
            assert!(
                matches!(&err, Error::Write { what: "SVG flamegraph", source } if source.to_string() == "disk full"),
                "{err:?}"
            );
            assert_eq!(err.to_string(), "failed to write SVG flamegraph");
        }
    }

    #[test]
    fn split_weight__like_inferno() {
        assert_eq!(split_weight("a;b 12"), Some(("a;b", 12)));
        assert_eq!(
            split_weight("a;[GPU_Memcpy HtoD] 7"),
            Some(("a;[GPU_Memcpy HtoD]", 7))
        );
        assert_eq!(split_weight("a;b 12.9"), Some(("a;b", 12)));
        assert_eq!(split_weight("a;b 3 12"), Some(("a;b", 12)));
        assert_eq!(split_weight("a;b"), None);
        assert_eq!(split_weight("a;b 1.2.3"), None);
        assert_eq!(split_weight(" 5"), None);
    }

    #[test]
    fn gpu_frames__only_frames_that_start_with_gpu_prefix() {
        let stack = "[no CPU stack];f[GPU_x];operator[];[GPU_Launch_Pending];[GPU_Kernel]k(int[4])";
        let found: Vec<_> = gpu_frames(stack).collect();
        assert_eq!(
            found,
            [
                "[no CPU stack]",
                "[GPU_Launch_Pending]",
                "[GPU_Kernel]k(int[4])"
            ]
        );
    }

    #[test]
    fn gpu_color__kinds_in_separate_ranges() {
        let c = |name: &str| gpu_color(name).unwrap();
        for i in 0..200 {
            let kernel = c(&format!("[GPU_Kernel]k{i}"));
            let memcpy = c(&format!("[GPU_Memcpy HtoD{i}]"));
            let memset = c(&format!("[GPU_Memset{i}]"));
            let pending = c(&format!("[GPU_Launch_Pending{i}]"));
            assert!(
                kernel.g >= 145 && kernel.b >= 180 && kernel.r <= 70,
                "{kernel:?}"
            );
            assert!(memcpy.b >= 210 && memcpy.g <= 150, "{memcpy:?}");
            assert!(memset.g >= 175 && memset.b <= 130, "{memset:?}");
            assert!(pending.r >= 150 && pending.b >= 220, "{pending:?}");
        }
        assert_eq!(gpu_color("main"), None);
        assert_eq!(gpu_color("[GPU_Kernel]a"), gpu_color("[GPU_Kernel]a"));
        assert_ne!(gpu_color("[GPU_Kernel]a"), gpu_color("[GPU_Kernel]b"));
    }

    #[test]
    fn options_default() {
        let opts = Options::default();
        assert_eq!(opts.title, "gpuperf: GPU time by CPU stack");
        assert_eq!(opts.subtitle, None);
        assert!(!opts.deterministic && !opts.no_javascript);
    }

    proptest! {
        #[test]
        fn gpu_color__any_gpu_name_is_cold(suffix in ".*") {
            let color = gpu_color(&format!("{GPU_PREFIX}{suffix}")).unwrap();
            prop_assert!(is_gpu_family(color) && !is_hot(color), "{:?}", color);
        }

        #[test]
        fn render__any_input_gives_svg(
            lines in prop::collection::vec(
                prop_oneof![
                    "[a-c;\\[\\] ]{0,12}",
                    ("(main|\\[GPU_Kernel\\]k|\\[no CPU stack\\]|\\[GPU_Memset\\])(;(f|g|\\[GPU_Memcpy HtoD\\])){0,4}", 0u64..1000)
                        .prop_map(|(s, n)| format!("{s} {n}")),
                ],
                0..20,
            ),
        ) {
            let mut out = Vec::new();
            render(&golden_opts(), lines.iter().map(String::as_str), &mut out).unwrap();
            let svg = String::from_utf8(out).unwrap();
            prop_assert!(svg.trim_end().ends_with("</svg>"));
            let drawn = if svg.contains(NOTHING_TO_DRAW) { Vec::new() } else { drawn_frames(&svg) };
            for d in drawn {
                prop_assert!(is_gpu_family(d.fill) == is_gpu_frame(&d.name), "{:?}", d);
            }
        }
    }
}
