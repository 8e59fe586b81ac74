# setns into another namespace: killed by seccomp.
import ctypes
ctypes.CDLL(None).setns(0, 0)
