# The page cache of the files every jail shares is a covert channel:
# session A evicts pages of a shared stdlib file, session B tells which
# pages are resident.  Every eviction hint and residency probe must fail.
import ctypes
import mmap
import os

libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/usr/lib/python3.11/os.py", os.O_RDONLY)


def attempt(name, fn):
    try:
        r = fn()
        print(name, "allowed", r)
    except OSError as e:
        print(name, type(e).__name__, e.errno)


# A's eviction: drop the file's pages
attempt("fadvise", lambda: os.posix_fadvise(fd, 0, 0,
                                            os.POSIX_FADV_DONTNEED))

# B's probe: a read that fails with EAGAIN unless the page is cached
attempt("preadv2", lambda: os.preadv(fd, [bytearray(4096)], 0,
                                     os.RWF_NOWAIT))

# readahead and mincore through libc
libc.readahead.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_size_t]
r = libc.readahead(fd, 0, 4096)
print("readahead", r, ctypes.get_errno() if r else 0)

libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
p = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
vec = ctypes.create_string_buffer(1)
r = libc.mincore(ctypes.c_void_p(p), 4096, vec)
print("mincore", r, ctypes.get_errno() if r else 0)

# plain positional reads still work
print("preadv", os.preadv(fd, [bytearray(16)], 0))
