# UDP to an external address.
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b"x", ("1.1.1.1", 53))
