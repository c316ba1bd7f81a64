"""Running the check's commands: each in its own process group, killed with
the group at its time limit, so a step that hangs costs only itself."""
import os
import signal
import subprocess
import threading
import time


class Result:
    """One finished command: exit status, output, time, and whether it was cut."""

    def __init__(self, rc, out, err, seconds, timed_out):
        self.rc, self.out, self.err, self.seconds, self.timed_out = rc, out, err, seconds, timed_out

    def tail(self, n=600):
        text = (self.err or "") + (self.out or "")
        return text[-n:].strip()


def run(cmd, timeout, cwd=None, env=None, user=None, peak_of_pid=False):
    """Runs cmd in its own process group, killed with the group at `timeout`.
    With peak_of_pid, also follows the peak RSS (VmHWM) of the process itself."""
    t0 = time.monotonic()
    kw = {}
    if user is not None:
        kw.update(user=user, group=user, extra_groups=[])
    try:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, errors="replace", start_new_session=True, **kw)
    except OSError as e:
        return Result(None, "", f"failed to start `{cmd[0]}`: {e}", 0.0, False)
    peak = [0]
    if peak_of_pid:
        def follow():
            while p.poll() is None:
                try:
                    with open(f"/proc/{p.pid}/status") as f:
                        for line in f:
                            if line.startswith("VmHWM:"):
                                peak[0] = max(peak[0], int(line.split()[1]))
                except OSError:
                    return
                time.sleep(0.02)
        threading.Thread(target=follow, daemon=True).start()
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=3)
                break
            except subprocess.TimeoutExpired:
                pass
        out, err = p.communicate()
    r = Result(p.returncode, out, err, time.monotonic() - t0, timed_out)
    r.peak_kib = peak[0]
    return r
