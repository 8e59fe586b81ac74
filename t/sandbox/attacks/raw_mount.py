# Raw mount syscall (165) through syscall(): killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(165, b"none", b"/tmp", b"tmpfs", 0, 0)
