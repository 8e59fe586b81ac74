# One huge allocation: refused by RLIMIT_AS, MemoryError in Python.
x = b"x" * (8 << 30)
