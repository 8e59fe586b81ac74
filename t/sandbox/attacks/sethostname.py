# Rename the host (sethostname, 170): killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(170, b"pwned", 5)
