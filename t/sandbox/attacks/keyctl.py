# The kernel keyring (keyctl, 250): killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(250, 0, 0, 0, 0, 0)
