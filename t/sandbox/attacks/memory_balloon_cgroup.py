# Many small touched allocations under RLIMIT_AS: the cgroup limit
# (memory + swap) kills the sandbox.
chunks = []
while True:
    chunks.append(b"y" * (8 << 20))
