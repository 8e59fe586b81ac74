# A covert channel between sessions through futexes: the key of a shared
# (non-private) futex on a file page is the file and offset, so a wait in
# one sandbox on a word of a shared stdlib page is ended by another
# sandbox's wake on the same word.  Shared futex operations must fail;
# private ones (every lock of glibc and CPython) keep working.
import ctypes
import mmap
import os

SYS_futex = 202
FUTEX_WAIT, FUTEX_WAKE, FUTEX_PRIVATE_FLAG = 0, 1, 128

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]

fd = os.open("/usr/lib/python3.11/os.py", os.O_RDONLY)
page = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
word = ctypes.c_void_p(page)
value = ctypes.c_uint.from_address(page).value


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def futex(op, val, timeout=None):
    ctypes.set_errno(0)
    r = libc.syscall(SYS_futex, word, op, ctypes.c_uint(val),
                     ctypes.byref(timeout) if timeout else None, None, 0)
    return r, ctypes.get_errno() if r < 0 else 0


print("shared wake", *futex(FUTEX_WAKE, 1))
print("shared wait", *futex(FUTEX_WAIT, value, Timespec(0, 1000000)))
print("private wake", *futex(FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1))
