# The channel socket was made by the manager in the host's network
# namespace: socket ioctls on it (SIOCGIFCONF) would list the host's
# interfaces and addresses.  Refused (EPERM) by the seccomp filter.
import array, fcntl, os, stat, struct

def is_sock(fd):
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False

fd = next(fd for fd in range(3, 64) if is_sock(fd))
buf = array.array("B", b"\0" * 4096)
req = struct.pack("iL", len(buf), buf.buffer_info()[0])
res = fcntl.ioctl(fd, 0x8912, req)
n = struct.unpack("iL", res)[0]
print("interfaces", [bytes(buf[i:i + 16]).split(b"\0")[0].decode()
                     for i in range(0, n, 40)])
