# TCP to a host service on 127.0.0.1 (sshd, nginx, the test manager...).
import socket
socket.create_connection(("127.0.0.1", 22), timeout=2)
