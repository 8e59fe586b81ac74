# Name resolution (no resolv.conf, no hosts, no sockets): fails.
import socket
print(socket.getaddrinfo("example.com", 80))
