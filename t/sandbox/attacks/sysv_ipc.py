# SysV shared memory (shmget, 29) as a channel between sessions: killed.
import ctypes
ctypes.CDLL(None).shmget(0, 4096, 0o1000 | 0o666)
