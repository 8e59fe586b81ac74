# subprocess: the fork/vfork is refused.
import subprocess
subprocess.run(["/bin/sh", "-c", "id"])
