# process_vm_readv (310) on pid 1: killed by seccomp.
import ctypes
ctypes.CDLL(None).syscall(310, 1, 0, 0, 0, 0, 0)
