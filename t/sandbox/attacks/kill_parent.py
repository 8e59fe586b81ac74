# Kill the parent (the manager): its pid is not even visible, and
# kill(0) reaches only our own process group.
import os, signal
print("ppid", os.getppid())
os.kill(os.getppid(), signal.SIGKILL)
print("survived")
