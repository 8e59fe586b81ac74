# Session A leaves a file in /tmp and in /dev/shm (absent).
open("/tmp/leak.txt", "w").write("from A")
try:
    open("/dev/shm/leak", "w").write("from A")
    print("shm written")
except OSError as e:
    print("shm", type(e).__name__)
SECRET_OTHER = "s3cr3t-" + "A" * 8
