# os.system: posix_spawn is refused, glibc reports "shell failed" (127).
import os
print("system", os.system("touch /tmp/pwned"), os.path.exists("/tmp/pwned"))
