"""Readers of Nsight Compute's CSV output, for the `pc_vs_ncu` item.

Both pages begin with lines that are not the table: the profiled program's
output and `==PROF==` lines (details page), or `"File Path"`/`"File Name"` and
`"Function Name"`/`"Kernel Name"` rows before the header (source page, whose
columns also vary by version: `Line No` or `#` for the line, `Warp Stall
Sampling (All Samples)` or `(All Cycles)` for the samples). So the header is
found by the columns it must have, not by its place.
"""
import csv
import os

STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
SAMPLES_PREFIX = "Warp Stall Sampling (All"
LINE_COLUMNS = ("Line No", "#", "Line")
FILE_ROWS = ("File Path", "File Name")


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
    from `ncu --page source --csv --print-source cuda`: ({line: samples},
    {reason: samples} from the page's per-reason columns where it has them
    under CUPTI's names). Rows of other files (headers inlined into the
    kernel) are left out; a page that names no file is taken as that file's."""
    lines, stalls = {}, {}
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
            reason_cols = [(i, stall_name(c)) for i, c in enumerate(row)
                           if c.startswith(STALL_PREFIX) and not c.endswith("_not_issued")]
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
    return lines, stalls
