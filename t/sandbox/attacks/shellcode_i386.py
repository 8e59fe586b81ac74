# Jump to shellcode (int 0x80, the i386 ABI) in a non-executable buffer:
# NX faults (SIGSEGV) before a single instruction runs.
import ctypes
code = ctypes.create_string_buffer(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")
ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(code))()
