# Many small touched allocations on the heap: the soft limit
# (RLIMIT_DATA, below the cgroup's limit) makes malloc fail first, so
# Python raises MemoryError and the sandbox lives on.
chunks = []
while True:
    chunks.append(b"y" * (8 << 20))
