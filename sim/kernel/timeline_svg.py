#!/usr/bin/env python3
"""Draws a gpuperf Chrome-trace timeline as an SVG picture, one row per track
(CPU threads, GPU streams, the GPU driver's tracks), for documentation.

usage: timeline_svg.py TIMELINE.json OUT.svg [TITLE [PROCESS]]

With PROCESS, the time axis spans that process's CUDA API calls only.

Slices are boxes coloured by category (CUDA API calls, GPU work, driver),
instant events are ticks. Standard library only."""
import html
import json
import sys

COLOURS = {
    "cuda_api": "#4e79a7",
    "driver": "#f28e2b",
    "job": "#b07aa1",
    "fence": "#76b7b2",
    "gpu": "#59a14f",
    "idle": "#dddddd",
}
ROW, LABEL, WIDTH, TOP = 22, 300, 1400, 56


def colour(e):
    cat = e.get("cat", "")
    if cat == "driver" and e.get("name") in ("queued", "job", "dependency wait"):
        return COLOURS["job"]
    if cat == "driver" and e.get("name", "").startswith("fence"):
        return COLOURS["fence"]
    if cat == "driver" and e.get("name", "").startswith("ioctl"):
        return COLOURS["driver"]
    if cat in COLOURS:
        return COLOURS[cat]
    return COLOURS["gpu"]


def flatten_async(events):
    """The async events of the driver's tracks as complete (X) and instant (i)
    events on one row per track name (its lanes, one id each, drawn together),
    named by their own name (args.event)."""
    out, started, rows = [], {}, {}
    for e in events:
        ph = e.get("ph")
        if ph not in ("b", "e", "n"):
            out.append(e)
            continue
        key = (e["pid"], e["name"])
        if key not in rows:
            # Negative tids: no thread has one.
            rows[key] = -1 - len(rows)
            out.append({"ph": "M", "name": "thread_name", "pid": e["pid"], "tid": rows[key],
                        "args": {"name": e["name"]}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": e["pid"],
                        "tid": rows[key], "args": {"sort_index": len(rows)}})
        lane = (e["pid"], str(e.get("id2", e.get("id"))))
        if ph == "e":
            b = started[lane].pop()
            b["dur"] = e["ts"] - b["ts"]
            continue
        flat = dict(e, tid=rows[key], name=e.get("args", {}).get("event", e["name"]))
        flat["ph"] = "X" if ph == "b" else "i"
        if ph == "b":
            started.setdefault(lane, []).append(flat)
        out.append(flat)
    return out


def main():
    src, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "gpuperf timeline"
    events = flatten_async(json.load(open(src))["traceEvents"])
    names, sort = {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        key = (e["pid"], e["tid"])
        if e["name"] == "process_name":
            # A program's name without its directory.
            name = e["args"]["name"]
            names[(e["pid"], None)] = name.rsplit("/", 1)[-1] if name.startswith("/") else name
        elif e["name"] == "thread_name":
            names[key] = e["args"]["name"]
        elif e["name"] == "thread_sort_index":
            sort[key] = e["args"]["sort_index"]
    drawn = [e for e in events if e.get("ph") in ("X", "i") and e.get("cat") != "idle"]
    if not drawn:
        sys.exit(f"{src}: nothing to draw")
    rows = sorted({(e["pid"], e["tid"]) for e in drawn},
                  key=lambda k: (k[0] >= 1 << 30, k[0], sort.get(k, k[1])))
    span = drawn
    if len(sys.argv) > 4:
        span = [e for e in drawn if e.get("cat") == "cuda_api"
                and sys.argv[4] in names.get((e["pid"], None), "")]
        if not span:
            sys.exit(f"{src}: no CUDA API call of a process named {sys.argv[4]}")
    t0 = min(e["ts"] for e in span)
    t1 = max(e["ts"] + e.get("dur", 0) for e in span)
    pad = (t1 - t0) * 0.02
    t0, t1 = t0 - pad, t1 + pad
    drawn = [e for e in drawn if e["ts"] + e.get("dur", 0) >= t0 and e["ts"] <= t1]
    rows = [k for k in rows if any((e["pid"], e["tid"]) == k for e in drawn)]
    scale = (WIDTH - LABEL - 20) / max(t1 - t0, 1e-3)
    x = lambda ts: LABEL + (ts - t0) * scale
    height = TOP + ROW * len(rows) + 40
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
         f'<text x="10" y="22" font-size="15" font-weight="bold">{html.escape(title)}</text>',
         f'<text x="10" y="42" fill="#555">{(t1 - t0) / 1000:.2f} ms; '
         'blue: CUDA API calls, orange: NVIDIA driver ioctls (inside the call that made them), '
         'purple: DRM scheduler jobs (queued, dependency wait, run), teal: dma_fences, '
         'green: GPU work, '
         'ticks: interrupts, Xid</text>']
    for i, key in enumerate(rows):
        y = TOP + i * ROW
        proc = names.get((key[0], None), f"pid {key[0]}")
        thread = names.get(key, f"thread {key[1]}")
        if proc.startswith("GPU driver"):
            label = f"driver: {thread}"
        elif proc.startswith("GPU "):
            label = f"{' '.join(proc.split()[:2])}: {thread}"
        else:
            label = f"{proc}: {thread}"
        if i % 2:
            o.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{ROW}" fill="#f6f6f6"/>')
        o.append(f'<text x="6" y="{y + 15}">{html.escape(label[:46])}</text>')
        for e in drawn:
            if (e["pid"], e["tid"]) != key:
                continue
            if e["ph"] == "X":
                start, end = max(e["ts"], t0), min(e["ts"] + e.get("dur", 0), t1)
                w = max((end - start) * scale, 1.0)
                o.append(f'<rect x="{x(start):.1f}" y="{y + 3}" width="{w:.1f}" height="{ROW - 6}" '
                         f'fill="{colour(e)}" stroke="white" stroke-width="0.3">'
                         f'<title>{html.escape(e["name"])}</title></rect>')
            else:
                o.append(f'<rect x="{x(e["ts"]) - 1:.1f}" y="{y + 2}" width="2" height="{ROW - 4}" '
                         f'fill="#e15759"><title>{html.escape(e["name"])}</title></rect>')
    o.append("</svg>")
    open(out, "w").write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
