"""Test helper shared by the Python test scripts of gpuperf's crates: runs an
action while the calling function's frame links to its caller through unmapped
memory, so that a reader of the interpreter's frame chain meets a corrupted link
(CPython 3.10 to 3.13 layouts), then restores the link."""
import ctypes
import sys


def with_broken_link(action):
    frame = sys._getframe(1)  # the caller's
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
        return action()
    finally:
        slot.value = saved
