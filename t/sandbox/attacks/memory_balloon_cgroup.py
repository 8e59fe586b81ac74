# Many small touched allocations in shared anonymous memory: mmap(-1)
# is MAP_SHARED, which RLIMIT_DATA (the soft limit) does not count, and
# RLIMIT_AS is above the cgroup's limit, so the cgroup (memory + swap)
# kills the sandbox: the backstop behind the soft limit.
import mmap
chunks = []
while True:
    m = mmap.mmap(-1, 8 << 20)
    m.write(b"y" * (8 << 20))
    chunks.append(m)
