# memfd_create: a writable file that could be mapped executable.
import os
os.memfd_create("x")
