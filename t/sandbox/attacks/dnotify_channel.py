# Another covert channel: directory notifications (F_NOTIFY, DN_ACCESS)
# on the shared stdlib directory would reveal other sessions' reads.
import fcntl, os
fd = os.open("/usr/lib/python3.11", os.O_RDONLY)
fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)
print("watching")
