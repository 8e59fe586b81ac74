# A user namespace to regain capabilities: killed by seccomp.
import ctypes
ctypes.CDLL(None, use_errno=True).unshare(0x10000000)
