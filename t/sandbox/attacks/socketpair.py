# Even a private socketpair is refused: no new sockets at all.
import socket
socket.socketpair()
