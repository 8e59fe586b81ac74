# kill(-1): every process we may signal; the pid namespace holds only us.
import os, signal
os.kill(-1, signal.SIGKILL)
print("survived")
