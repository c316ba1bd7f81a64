"""Launches through nested Python functions and ctypes into liblauncher.so
(launcher.c), on the main thread and on a threading.Thread.

usage: python3 py_launch.py LIBLAUNCHER.so [corrupt]
corrupt: the launch is made while this frame's link to its caller points at
unmapped memory (restored afterwards), then once more.
The call lines are marked `# call:NAME` so that the test finds their numbers."""
import ctypes
import sys
import threading

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
    """Points this frame's link to its caller at unmapped memory, launches, then
    restores the link (the layouts of CPython 3.10 to 3.13)."""
    frame = sys._getframe()
    minor = sys.version_info[1]
    if minor == 10:
        link = id(frame) + 24  # PyFrameObject.f_back
    else:
        iframe = ctypes.c_void_p.from_address(id(frame) + 24).value  # f_frame
        link = iframe + (48 if minor == 11 else 8)  # _PyInterpreterFrame.previous
    slot = ctypes.c_void_p.from_address(link)
    saved = slot.value
    slot.value = 0x10
    try:
        lib.launcher_launch()
    finally:
        slot.value = saved
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
