"""Takes stacks through ctypes from nested functions, with the test probe.

usage: python3 py_stacks.py PROBE.so CASE
CASE: main | main_gil_held | thread | native_thread | idle_thread | deep | corrupt | stale | seccomp
      | generator | probes | subinterpreter | reuse_lines | reuse_slot | reuse_generator
      | kept | kept_code
Each stack is printed as the probe's lines under a `== name` header. The call
lines are marked `# call:NAME` so that the test finds the expected line numbers.
"""
import ctypes
import os
import sys
import threading
import time

# The shared helper of gpuperf's Python test scripts.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../test-support/data"))
from broken_frame_link import with_broken_link, with_stale_link  # noqa: E402

probe = ctypes.CDLL(sys.argv[1])
probe.gpuperf_probe_init()
BUF = ctypes.create_string_buffer(1 << 20)


# The probe as the cases call it: through CDLL, which releases the GIL during
# the call, as PyTorch does around much of its native code.
capture = probe.gpuperf_probe_capture


def show(name, fn=None):
    fn = fn or capture
    print("== " + name, flush=True)
    n = fn(BUF, len(BUF))  # call:show
    if n < 0:
        raise SystemExit("buffer too small")
    sys.stdout.write(BUF.value.decode())
    sys.stdout.flush()


def inner(name):
    show(name)  # call:inner


def middle(name):
    inner(name)  # call:middle


def outer(name):
    middle(name)  # call:outer


def rec(n):
    if n == 0:
        show("deep")  # call:rec0
    else:
        rec(n - 1)  # call:rec


def corrupt():
    """Takes a stack while this frame's link to its caller points at unmapped
    memory."""
    with_broken_link(lambda: show("corrupt"))  # call:corrupt
    show("after corrupt")
    print("stats " + stats())


def stale():
    """Takes a stack while this frame links to a copy of its caller's frame in a
    page that is mapped, then another after that page was unmapped."""
    with_stale_link(lambda: show("mapped"), lambda: show("unmapped"))  # call:stale
    show("after stale")


def deny_process_vm_readv():
    """A seccomp filter on this thread that refuses process_vm_readv with EPERM,
    as container runtimes' default profiles do."""
    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]

    insns = (Insn * 4)(
        Insn(0x20, 0, 0, 0),            # ld [nr]
        Insn(0x15, 0, 1, 310),          # jeq process_vm_readv (x86-64)
        Insn(0x06, 0, 0, 0x00050001),   # ret ERRNO(EPERM)
        Insn(0x06, 0, 0, 0x7fff0000),   # ret ALLOW
    )
    prog = Prog(4, insns)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")


def gen():
    """A generator's frame lives in the generator object, not in the thread's
    data stack; the frames it calls do."""
    inner("generator")  # call:gen
    yield 1


class Init:
    def __init__(self):
        """3.13 runs `__init__` above a shim frame in the data stack."""
        for _ in gen():  # call:init
            pass


def leaf(name):
    """Takes the stack with the thread's trail, as the injection library does."""
    show(name, probe.gpuperf_probe_capture_reusing)  # call:leaf


def mid(name):
    leaf(name)  # call:mid


def reuse_lines():
    """The same frames twice over, then only a frame deep in the stack at
    another line: the same function called from another line of the same
    frame."""
    for name in ("line a", "line a again"):
        mid(name)  # call:line_a
    mid("line b")  # call:line_b
    print("stats " + stats())


def via_a(name):
    mid(name)  # call:via_a


def via_b(name):
    mid(name)  # call:via_b


def reuse_slot():
    """A function returns and another, of the same frame size, is called into
    its slot deep in the stack: every frame above lies where it lay before."""
    for f, name in ((via_a, "slot a"), (via_a, "slot a again"), (via_b, "slot b")):
        f(name)  # call:slot
    print("stats " + stats())


def gen_body():
    name = yield
    while True:
        mid(name)  # call:gen_body
        name = yield


def resume_a(g, name):
    g.send(name)  # call:resume_a


def resume_b(g, name):
    g.send(name)  # call:resume_b


def reuse_generator():
    """A generator resumed from one frame, then from another one in the same
    slot: the generator's frame, outside the data stack, links to another
    caller."""
    g = gen_body()
    next(g)
    for f, name in ((resume_a, "gen a"), (resume_a, "gen a again"), (resume_b, "gen b")):
        f(g, name)  # call:resume
    print("stats " + stats())


def kept_rec(n, name, expect, keep):
    if n == 0:
        print("== " + name, flush=True)
        probe.gpuperf_probe_capture_kept(BUF, len(BUF), expect, keep)  # call:kept_leaf
        sys.stdout.write(BUF.value.decode())
        sys.stdout.flush()
    else:
        kept_rec(n - 1, name, expect, keep)  # call:kept_rec


def kept():
    """Captures at two Python depths from one call site, kept under tags 1
    and 2, then each expecting the other's: from 3.11 on, calls between Python
    functions add no native frame, so the native walk is the same at both
    depths and only the Python frame chain tells them apart. After warming
    up: 3.13's first calls through ctypes take another native path than
    later ones, once the interpreter specialized the call."""
    for _ in range(10):
        for depth in (2, 4):
            kept_rec(depth, "warm", 0, 0)  # call:kept_warm
    for depth, expect, keep in ((2, 0, 1), (4, 0, 2), (2, 1, 0), (4, 1, 0), (4, 2, 0), (2, 2, 0)):
        kept_rec(depth, "depth %d expecting %d" % (depth, expect), expect, keep)  # call:kept


# One function's source twice: the same bytecode, at other lines of another file.
VIA_A = "def via(n, name, expect, keep):\n    kept_rec(n, name, expect, keep)  # via\n"
VIA_B = "\n\n\n" + VIA_A


def via_from(source, file):
    ns = {"kept_rec": kept_rec}
    exec(compile(source, file, "exec"), ns)
    # Out of its globals: no cycle keeps it (and its code object) alive.
    return ns.pop("via")


def remade(old):
    """The function of VIA_B, made until its code object lands at `old`, the
    address of one just destroyed (freed blocks are reused first), the others
    kept alive meanwhile so that each try takes another block. Prints whether
    one did."""
    tries = []
    for _ in range(50):
        new = via_from(VIA_B, "via_b.py")
        if id(new.__code__) == old:
            break
        tries.append(new)
    print("same_address %d" % (id(new.__code__) == old), flush=True)
    return new


def kept_code():
    """A capture kept, then expected again through the same frames (from one
    call site), then once more after the code object of one of them was
    destroyed and another made from other lines, which may take its address:
    the same frame address, code pointer and instruction offset, other lines.
    Prints whether destroyed code objects were counted (3.11+)."""
    # The pending call that registers the watcher runs between bytecodes.
    for _ in range(1000):
        pass
    print("watching %d" % probe.gpuperf_probe_watching_codes())
    via = via_from(VIA_A, "via_a.py")
    for name, expect, keep in [("warm", 0, 0)] * 10 + [("a", 0, 1), ("a again", 1, 0), ("b", 1, 0)]:
        if name == "b":
            old = id(via.__code__)
            del via  # the last reference: the code object is destroyed
            via = remade(old)
        via(2, name, expect, keep)  # call:kept_code


def stats():
    buf = ctypes.create_string_buffer(1 << 16)
    probe.gpuperf_probe_stats(buf, len(buf))
    return buf.value.decode().strip()


def repeat(n):
    """Takes `n` stacks under the same frames, with the unwinder's counters
    before and after."""
    print("stats " + stats())
    for _ in range(n):
        show("repeat")  # call:repeat
    print("stats " + stats())


case = sys.argv[2]
if case == "kept_code":
    kept_code()
elif case == "main":
    outer("main")  # call:module
elif case == "main_gil_held":
    # Through PyDLL, which keeps the GIL during the call: the thread state is
    # then also the one attached to the thread (3.12+: `_Py_tss_tstate`).
    capture = ctypes.PyDLL(sys.argv[1]).gpuperf_probe_capture
    outer("main gil held")  # call:module_gil_held
elif case == "thread":
    t = threading.Thread(target=outer, args=("thread",))
    t.start()
    t.join()
elif case == "native_thread":
    show("native thread", probe.gpuperf_probe_capture_in_native_thread)
elif case == "idle_thread":
    # A thread the interpreter knows that runs no Python frame: the probe's
    # capture is the thread's function, called from C (the thread's bootstrap).
    import _thread
    print("stats " + stats())
    print("== idle thread", flush=True)
    _thread.start_new_thread(probe.gpuperf_probe_capture, (BUF, len(BUF)))
    # Written, and the thread gone (counted from its start to its end).
    while not BUF.value or _thread._count() > 0:
        time.sleep(0.01)
    sys.stdout.write(BUF.value.decode())
    print("stats " + stats())
elif case == "deep":
    sys.setrecursionlimit(2000)
    rec(300)
elif case == "corrupt":
    corrupt()
elif case == "seccomp":
    deny_process_vm_readv()
    outer("seccomp")  # call:seccomp_module
elif case == "stale":
    stale()  # call:stale_module
elif case == "generator":
    Init()  # call:generator_module
elif case == "probes":
    outer("warm")
    middle_then = lambda: repeat(10)  # noqa: E731
    middle_then()
elif case == "subinterpreter":
    try:
        import _interpreters as interpreters  # 3.13
    except ImportError:
        import _xxsubinterpreters as interpreters  # 3.10-3.12
    if sys.version_info >= (3, 13):
        sub = interpreters.create("legacy")
    elif sys.version_info >= (3, 12):
        sub = interpreters.create(isolated=False)
    else:
        sub = interpreters.create()
    run = "import ctypes, sys\n" \
        "probe = ctypes.CDLL(%r)\n" \
        "probe.gpuperf_probe_refresh()\n" \
        "buf = ctypes.create_string_buffer(1 << 20)\n" \
        "def in_sub():\n" \
        "    probe.gpuperf_probe_capture(buf, len(buf))\n" \
        "    sys.stdout.write('== subinterpreter\\n' + buf.value.decode())\n" \
        "    sys.stdout.flush()\n" \
        "in_sub()\n" % sys.argv[1]
    interpreters.run_string(sub, run)  # call:subinterpreter
elif case == "reuse_lines":
    reuse_lines()  # call:reuse_lines_module
elif case == "reuse_slot":
    reuse_slot()  # call:reuse_slot_module
elif case == "kept":
    kept()  # call:kept_module
elif case == "reuse_generator":
    reuse_generator()  # call:reuse_generator_module
elif case == "bench":
    # 30 distinct Python functions below the probe (30 code objects, as in a real
    # stack: f29 calls f28 ... f0 captures); medians of 9 rounds of 20000 captures,
    # wall and thread CPU time.
    def f0():
        probe.gpuperf_probe_capture(BUF, len(BUF))
        lines = BUF.value.decode().splitlines()
        native = sum(1 for l in lines if l.startswith("N "))
        python = sum(1 for l in lines if l.startswith("P "))
        rounds = []
        for _ in range(9):
            cpu = time.thread_time_ns()
            wall = probe.gpuperf_probe_bench(20000)
            rounds.append((wall, (time.thread_time_ns() - cpu) / 20000))
        return native, python, rounds
    names = {"f0": f0}
    for i in range(1, 30):
        exec("def f%d():\n    return f%d()\n" % (i, i - 1), names)
    probe.gpuperf_probe_bench.restype = ctypes.c_double
    def probes():
        line = stats()
        if "python_probes: " not in line:  # a probe built before the counter
            return float("nan")
        return int(line.split("python_probes: ")[1].split(" ")[0].rstrip(","))
    before = probes()
    native, python, rounds = names["f29"]()
    wall = sorted(r[0] for r in rounds)[len(rounds) // 2]
    cpu = sorted(r[1] for r in rounds)[len(rounds) // 2]
    per = (probes() - before) / (1 + 9 * 20000)
    # The CPU time is the thread's own: unlike the wall time it does not count
    # waiting for a CPU on a busy machine.
    print("native %d python %d ns_per_capture %.0f cpu_ns_per_capture %.0f probes_per_capture %.1f"
          % (native, python, wall, cpu, per))
