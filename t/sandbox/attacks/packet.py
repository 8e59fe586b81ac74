# Raw packet socket (sniffing, spoofing).
import socket
socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0x0300)
