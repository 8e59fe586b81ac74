# io_uring_setup (425): killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(425, 1, 0)
