# A covert channel between sessions: a lock on a file every jail shares
# (the read-only stdlib).  flock and fcntl locks are refused (ENOLCK).
import fcntl
f = open("/usr/lib/python3.11/os.py", "rb")
fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked a shared file")
