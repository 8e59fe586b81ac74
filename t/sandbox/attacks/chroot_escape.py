# The classic chroot escape needs chroot() (and CAP_SYS_CHROOT).
import os
os.chroot("/tmp")
