# Read address 0 through ctypes: SIGSEGV kills only this sandbox.
import ctypes
print(ctypes.c_long.from_address(0).value)
