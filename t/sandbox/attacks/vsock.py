# vsock to the hypervisor host (CID 2), where this VM's agent listens.
import socket
s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
s.connect((2, 5001))
