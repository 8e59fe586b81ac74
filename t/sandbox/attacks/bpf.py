# bpf() (321): killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(321, 0, 0, 0)
