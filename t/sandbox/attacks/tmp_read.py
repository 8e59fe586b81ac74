# Session B looks for session A's files.
import os
print("tmp", os.listdir("/tmp"), os.path.exists("/tmp/leak.txt"),
      os.path.exists("/dev/shm"))
