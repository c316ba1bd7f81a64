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


def _link_slot(frame):
    """The address of the slot holding `frame`'s link to its caller, and the
    link's target: the caller's frame object (3.10) or interpreter frame."""
    minor = sys.version_info[1]
    if minor == 10:
        link = id(frame) + 24  # PyFrameObject.f_back
    else:
        iframe = ctypes.c_void_p.from_address(id(frame) + 24).value  # f_frame
        link = iframe + (48 if minor == 11 else 8)  # _PyInterpreterFrame.previous
    return ctypes.c_void_p.from_address(link)


def with_stale_link(first, then):
    """Runs `first` while the caller's link to its own caller points at a copy
    of that frame in a freshly mapped page (readable, and a valid frame), then
    unmaps the page and runs `then` with the link still pointing into it: a
    reader that trusts memory it once found readable faults. Restores the link."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = 1 << 16
    page = libc.mmap(None, size, 3, 0x22, -1, 0)  # PROT_READ|WRITE, PRIVATE|ANONYMOUS
    if page in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    slot = _link_slot(sys._getframe(1))
    saved = slot.value
    # The frame's fields, and for 3.11+ its locals after them, fit in 512 bytes.
    ctypes.memmove(page + 64, saved, 512)
    slot.value = page + 64
    try:
        first()
        libc.munmap(page, size)
        then()
    finally:
        slot.value = saved
