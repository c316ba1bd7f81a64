"""Readers of Nsight Compute's CSV output, for the `pc_vs_ncu` item.

Both pages begin with lines that are not the table: the profiled program's
output and `==PROF==` lines (details page), or `"File Path"`/`"File Name"` and
`"Function Name"`/`"Kernel Name"` rows before the header (source page, whose
columns also vary by version: `Line No` or `#` for the line, `Warp Stall
Sampling (All Samples)` or `(All Cycles)` for the samples). So the header is
found by the columns it must have, not by its place.

The source page has metric columns only in its SASS views: `--print-source
cuda` prints the file's text alone, `cuda,sass` each line with code (its
sums, `-` for its address) followed by its instructions (no line number).
Its per-reason columns use short names (`stall_long_sb`), mapped here to
CUPTI's (`long_scoreboard`), and `stall_X (Not Issued)` for the not-issued
parts, which are left out.
"""
import csv
import os

STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
SAMPLES_PREFIX = "Warp Stall Sampling (All"
LINE_COLUMNS = ("Line No", "#", "Line")
FILE_ROWS = ("File Path", "File Name")
# The source page's short reason names that differ from CUPTI's.
PAGE_REASONS = {"dispatch": "dispatch_stall", "imc": "imc_miss", "lg": "lg_throttle",
                "long_sb": "long_scoreboard", "math": "math_pipe_throttle", "mio": "mio_throttle",
                "no_inst": "no_instructions", "short_sb": "short_scoreboard", "sleep": "sleeping",
                "tex": "tex_throttle"}


def _rows(text):
    """The CSV rows of `text`'s lines that begin with a quote (ncu quotes every field)."""
    return csv.reader(ln for ln in (text or "").splitlines() if ln.startswith('"'))


def _number(cell):
    try:
        return float((cell or "0").replace(",", "") or 0)
    except ValueError:
        return None


def stall_name(metric):
    return metric.removeprefix(STALL_PREFIX)


def page_reason(column):
    """CUPTI's name for a source page's per-reason column (`stall_long_sb`, or
    the metric's own name), or None for any other column and for not-issued parts."""
    if column.startswith(STALL_PREFIX):
        return None if column.endswith("_not_issued") else stall_name(column)
    if column.startswith("stall_") and not column.endswith("(Not Issued)"):
        short = column.removeprefix("stall_")
        return PAGE_REASONS.get(short, short)
    return None


def metric_stalls(text):
    """Samples per stall reason (CUPTI's names without their prefix, the
    `_not_issued` parts left out) from `ncu --csv --metrics regex:^smsp__pcsamp_warps_issue_stalled_`:
    {reason: samples}, summed over the kernels profiled."""
    out, name_i, value_i = {}, None, None
    for row in _rows(text):
        if "Metric Name" in row and "Metric Value" in row:
            name_i, value_i = row.index("Metric Name"), row.index("Metric Value")
            continue
        if name_i is None or len(row) <= max(name_i, value_i):
            continue
        name = row[name_i]
        if not name.startswith(STALL_PREFIX) or name.endswith("_not_issued"):
            continue
        n = _number(row[value_i])
        if n is not None:
            out[stall_name(name)] = out.get(stall_name(name), 0) + n
    return out


def source_lines(text, file_name):
    """Samples per CUDA source line of the file whose base name is `file_name`,
    from `ncu --page source --csv --print-source cuda,sass`: ({line: samples},
    {reason: samples}, {line: {reason: samples}}), the reasons from the page's
    per-reason columns where it has them, under CUPTI's names. Instruction rows
    (no line number) are left out: their line's row holds their sum. Rows of
    other files (headers inlined into the kernel) are left out; a page that
    names no file is taken as that file's."""
    lines, stalls, line_stalls = {}, {}, {}
    header = samples_i = line_i = None
    reason_cols = []
    this_file = True
    for row in _rows(text):
        if len(row) >= 2 and row[0] in FILE_ROWS:
            this_file = os.path.basename(row[1]) == file_name
            continue
        samples = next((i for i, c in enumerate(row) if c.startswith(SAMPLES_PREFIX)), None)
        line = next((row.index(c) for c in LINE_COLUMNS if c in row), None)
        if samples is not None and line is not None:
            header, samples_i, line_i = row, samples, line
            reason_cols = [(i, page_reason(c)) for i, c in enumerate(row) if page_reason(c)]
            continue
        if header is None or not this_file or len(row) <= max(samples_i, line_i):
            continue
        if not row[line_i].strip().isdigit():
            continue
        n = _number(row[samples_i])
        if n is None:
            continue
        ln = int(row[line_i])
        lines[ln] = lines.get(ln, 0) + n
        for i, reason in reason_cols:
            v = _number(row[i]) if i < len(row) else None
            if v:
                stalls[reason] = stalls.get(reason, 0) + v
                per = line_stalls.setdefault(ln, {})
                per[reason] = per.get(reason, 0) + v
    return lines, stalls, line_stalls


def line_agreement(ours, ncu_lines, ncu_line_stalls, file_name, tolerance=0.05):
    """gpuperf's lines against ncu's, for each line holding at least 5 % of
    ncu's samples: its share of the kernel's samples (within `tolerance`: the
    two profile different launches) and its commonest stall reason.
    `ours` is a kernel of `gpuperf report --format json`'s pc_samples.
    Returns (what disagrees, what was compared, the figure)."""
    total_ours, total_ncu = ours.get("samples") or 0, sum(ncu_lines.values())
    mine = {}
    for entry in ours.get("lines", []):
        path, _, ln = entry["line"].rpartition(":")
        if os.path.basename(path) == file_name and ln.isdigit():
            mine[int(ln)] = entry
    bad, seen, fig = [], [], {}
    if not total_ours or not total_ncu:
        return ["no samples to compare"], seen, fig
    for ln in sorted(ncu_lines, key=ncu_lines.get, reverse=True):
        if ncu_lines[ln] < 0.05 * total_ncu:
            break
        theirs = ncu_lines[ln] / total_ncu
        entry = mine.get(ln)
        share = entry["samples"] / total_ours if entry else 0.0
        reasons = ncu_line_stalls.get(ln, {})
        their_stall = max(reasons, key=reasons.get) if reasons else None
        my_stall = entry["stalls"][0]["reason"] if entry and entry.get("stalls") else None
        fig[ln] = {"gpuperf_share": round(share, 4), "ncu_share": round(theirs, 4),
                   "gpuperf_stall": my_stall, "ncu_stall": their_stall}
        if abs(share - theirs) > tolerance:
            bad.append(f"line {ln}: {share:.1%} of gpuperf's samples, {theirs:.1%} of ncu's")
        if their_stall and my_stall != their_stall:
            bad.append(f"line {ln}: top stall gpuperf {my_stall}, ncu {their_stall}")
        seen.append(f"line {ln} {share:.1%} / {theirs:.1%} ({my_stall} / {their_stall})")
    return bad, seen, fig
