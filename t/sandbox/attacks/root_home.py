# The host's /root is not in the jail.
import os
os.listdir("/root")
