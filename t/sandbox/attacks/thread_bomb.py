# Thread bomb: stops at the pids cgroup / RLIMIT_NPROC limit.
import threading, time
n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        n += 1
except RuntimeError as e:
    print("threads", n, type(e).__name__)
