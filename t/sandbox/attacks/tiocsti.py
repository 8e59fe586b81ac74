# Push characters into a terminal's input queue (TIOCSTI).
import fcntl, termios
fcntl.ioctl(0, termios.TIOCSTI, b"x")
