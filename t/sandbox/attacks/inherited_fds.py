# Look for inherited fds: only /dev/null on 0-2 and the channel sockets.
import os, stat
kinds = {}
for fd in range(4096):
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    if stat.S_ISSOCK(st.st_mode):
        kinds[fd] = "sock"
    elif (stat.S_ISCHR(st.st_mode)
          and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)):
        kinds[fd] = "null"
    else:
        kinds[fd] = "other:%o" % st.st_mode
print(sorted(kinds.items()))
