# The manager's control socket: path given by the test (CONTROL_PATH).
import os, socket
print("visible", os.path.exists(CONTROL_PATH))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(CONTROL_PATH)
