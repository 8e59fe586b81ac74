# Classic fork bomb: fork() is refused by the seccomp filter.
import os
while True:
    os.fork()
