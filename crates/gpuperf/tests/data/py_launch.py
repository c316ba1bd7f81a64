"""Launches through nested Python functions and ctypes into liblauncher.so
(launcher.c), on the main thread and on a threading.Thread.

usage: python3 py_launch.py LIBLAUNCHER.so [corrupt]
corrupt: the launch is made while this frame's link to its caller points at
unmapped memory (restored afterwards), then once more.
The call lines are marked `# call:NAME` so that the test finds their numbers."""
import ctypes
import os
import sys
import threading

# The shared helper of gpuperf's Python test scripts.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../test-support/data"))
from broken_frame_link import with_broken_link  # noqa: E402

lib = ctypes.CDLL(sys.argv[1])
if lib.launcher_init() != 0:
    raise SystemExit("launcher_init failed")


def inner():
    lib.launcher_launch()  # call:inner


def middle():
    inner()  # call:middle


def outer():
    middle()  # call:outer


def corrupt():
    """Launches while this frame's link to its caller points at unmapped memory."""
    with_broken_link(lib.launcher_launch)
    lib.launcher_launch()


if sys.argv[2:] == ["corrupt"]:
    corrupt()
    print("launched 2")
    raise SystemExit(0)

outer()  # call:module
t = threading.Thread(target=outer)
t.start()  # the thread's stack starts in threading.py
t.join()
print("launched 2")
