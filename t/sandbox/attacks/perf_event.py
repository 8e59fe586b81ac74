# perf_event_open (298): killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(298, 0, 0, -1, -1, 0)
