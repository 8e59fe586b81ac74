# Netlink route socket (interface and route configuration).
import socket
socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
