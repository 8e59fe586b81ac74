# Set the system clock (clock_settime, 227): killed by seccomp.
import ctypes
ts = (ctypes.c_long * 2)(0, 0)
ctypes.CDLL(None).syscall(227, 0, ts)
