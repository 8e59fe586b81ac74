# /proc/1/environ of the host (or of the manager): no /proc at all.
open("/proc/1/environ", "rb").read()
