# Exhaust file descriptors: stops at RLIMIT_NOFILE with EMFILE.
import errno, os
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print("fds", len(fds), errno.errorcode[e.errno])
for fd in fds:
    os.close(fd)
