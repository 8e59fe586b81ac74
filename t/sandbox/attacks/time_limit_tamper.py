# Switch off the time limits from inside: replace the handlers of the
# wall timer (SIGALRM), the CPU timer (SIGXCPU) and the host's interrupt
# (SIGUSR1), raise the soft RLIMIT_CPU to the hard one, then spin.  Every
# change must be refused, and the CPU limit must still end the cell.
import ctypes
import resource
import signal


def attempt(name, fn):
    try:
        fn()
        print(name, "allowed")
    except (OSError, ValueError) as e:
        print(name, type(e).__name__, getattr(e, "errno", None))


for sig in (signal.SIGALRM, signal.SIGXCPU, signal.SIGUSR1):
    attempt(sig.name, lambda: signal.signal(sig, signal.SIG_IGN))
attempt("siginterrupt", lambda: signal.siginterrupt(signal.SIGALRM, False))

soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
# CPython turns EPERM from setrlimit into ValueError("not allowed ...")
attempt("setrlimit", lambda: resource.setrlimit(resource.RLIMIT_CPU,
                                                (hard, hard)))
attempt("prlimit", lambda: resource.prlimit(0, resource.RLIMIT_CPU,
                                            (hard, hard)))

libc = ctypes.CDLL(None, use_errno=True)
lim = (ctypes.c_ulong * 2)(hard, hard)
r = libc.syscall(160, 0, ctypes.byref(lim))     # raw setrlimit(RLIMIT_CPU)
print("raw setrlimit", r, ctypes.get_errno() if r else 0)

handler = signal.getsignal(signal.SIGXCPU)
print("handler kept", getattr(handler, "__name__", handler))
while True:
    pass
