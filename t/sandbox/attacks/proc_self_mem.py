# /proc/self/mem ignores page protections (a classic W^X bypass).
open("/proc/self/mem", "r+b")
