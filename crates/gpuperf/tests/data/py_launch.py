"""Launches through nested Python functions and ctypes into liblauncher.so
(launcher.c), on the main thread and on a threading.Thread.

usage: python3 py_launch.py LIBLAUNCHER.so
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


outer()  # call:module
t = threading.Thread(target=outer)
t.start()  # the thread's stack starts in threading.py
t.join()
print("launched 2")
