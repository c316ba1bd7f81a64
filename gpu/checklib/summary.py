"""The check's outputs: summary.json, summary.md and check.tar.gz."""
import json
import os
import tarfile
import time

from .base import HOLDS, NEEDS_GPU, NOT_RUN, SHORT

TAR_LIMIT = 16 * 1024 * 1024


class Summary:
    def write(self):
        summary = {
            "format": "gpuperf-gpu-check/1",
            "mode": "simulated" if self.sim else "gpu",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - self.t0, 1),
            "facts": self.facts,
            "counts": {s: sum(1 for i in self.items if i["status"] == s) for s in (HOLDS, SHORT, NOT_RUN, NEEDS_GPU)},
            "items": self.items,
        }
        left_out = self.tarball()
        summary["tarball_left_out"] = left_out
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        with open(os.path.join(self.out, "summary.md"), "w") as f:
            f.write(f"# gpuperf GPU check ({summary['mode']}), {summary['date']}\n\n")
            f.write(", ".join(f"{v} {k}" for k, v in summary["counts"].items()) +
                    f"; {summary['seconds']} s\n\n| group | item | status | detail |\n|---|---|---|---|\n")
            for i in self.items:
                detail = i["detail"].replace("|", "\\|").replace("\n", " ")
                f.write(f"| {i['group']} | {i['item']} | {i['status']} | {detail} |\n")
            if left_out:
                f.write(f"\nLeft out of check.tar.gz (16 MiB limit): {', '.join(left_out)}\n")
        return summary

    def tarball(self):
        """The runs' files, smallest kinds first, up to the size limit; what did
        not fit is listed, never dropped silently."""
        files = []
        for root, _, names in os.walk(self.runs):
            for n in names:
                p = os.path.join(root, n)
                rel = os.path.relpath(p, self.runs)
                if "/inductor/" in p or "/triton/" in p or "/home/" in p or os.path.islink(p):
                    continue
                files.append((0 if n.endswith((".txt", ".svg", ".log", ".folded")) else 1, os.path.getsize(p), rel, p))
        files.sort()
        path = os.path.join(self.out, "check.tar.gz")
        left_out, budget = [], TAR_LIMIT - 64 * 1024
        with tarfile.open(path, "w:gz") as tar:
            for _, size, rel, p in files:
                # Compressed sizes are not known in advance: count a file at a
                # third of its size (text and traces compress better than that).
                cost = size // 3 if size > 4096 else size
                if cost > budget:
                    left_out.append(rel)
                    continue
                budget -= cost
                tar.add(p, arcname=os.path.join("runs", rel))
        while os.path.getsize(path) > TAR_LIMIT and files:
            # Estimate was wrong: drop the largest timelines until it fits.
            os.remove(path)
            keep = [f for f in files if f[2] not in left_out]
            biggest = max(keep, key=lambda f: f[1])
            left_out.append(biggest[2])
            with tarfile.open(path, "w:gz") as tar:
                for _, _, rel, p in keep:
                    if rel not in left_out:
                        tar.add(p, arcname=os.path.join("runs", rel))
        return left_out
