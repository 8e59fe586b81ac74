# Make a writable buffer executable with mprotect: refused (EPERM).
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
buf = mmap.mmap(-1, 4096)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
rc = libc.mprotect(ctypes.c_void_p(addr), 4096, 7)
print("mprotect", rc, ctypes.get_errno())
