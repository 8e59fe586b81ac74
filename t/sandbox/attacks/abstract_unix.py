# Abstract unix socket of a host service (e.g. @/tmp/.X11-unix/X0).
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0/tmp/.X11-unix/X0")
