# Output flood: 16 MiB of stdout against the per-cell cap.
import sys
chunk = "A" * 65536
for _ in range(256):
    sys.stdout.write(chunk)
