"""The parts of a `gpuperf record -c` timeline that the check reads."""
import json
import re


class Timeline:
    """The parts of a Chrome-trace timeline written by `gpuperf record -c` that
    the check reads: GPU work with its stack, API calls, and thread names."""

    def __init__(self, path):
        with open(path) as f:
            doc = json.load(f)
        events = doc["traceEvents"]
        # The recorders' notes: how PC samples were taken, what was lost.
        self.notes = [n for n in doc.get("otherData", {}).get("notes", []) if isinstance(n, str)]
        self.gpu = [e for e in events if e.get("cat") in ("kernel", "memcpy", "memset")]
        self.api = {}
        self.threads = {}
        for e in events:
            if e.get("cat") == "cuda_api":
                self.api[e["args"].get("correlation_id")] = e
            elif e.get("ph") == "M" and e.get("name") == "thread_name":
                self.threads[(e["pid"], e["tid"])] = e["args"]["name"]

    def kernels(self):
        return [e for e in self.gpu if e["cat"] == "kernel"]

    def count(self, cat):
        return sum(1 for e in self.gpu if e["cat"] == cat)

    def stack(self, e):
        """A GPU record's CPU stack: its own (a replayed graph node's), else
        the one on its call's API slice (gpuperf writes a launch's stack once)."""
        s = e.get("args", {}).get("stack")
        if s is None:
            call = self.api.get(e.get("args", {}).get("correlation_id"))
            s = call.get("args", {}).get("stack") if call else None
        return s if isinstance(s, str) else None

    def reaches_main(self, e):
        return re.search(r"(^|;)main(;|$)", self.stack(e) or "") is not None
