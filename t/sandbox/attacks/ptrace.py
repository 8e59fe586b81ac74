# ptrace via ctypes: the seccomp filter kills the sandbox (SIGSYS).
import ctypes
ctypes.CDLL(None).ptrace(0, 0, 0, 0)
