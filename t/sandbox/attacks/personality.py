# personality(READ_IMPLIES_EXEC) to make data executable: killed.
import ctypes
ctypes.CDLL(None).personality(0x0400000)
