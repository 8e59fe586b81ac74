# userfaultfd (323): killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(323, 0)
