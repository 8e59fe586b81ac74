# Fill the private /tmp: stops with ENOSPC at the tmpfs size.
import errno
n = 0
try:
    with open("/tmp/fill", "wb") as f:
        while True:
            f.write(b"z" * (1 << 20))
            f.flush()
            n += 1
except OSError as e:
    print("filled_mb", n, errno.errorcode[e.errno])
