# The manager's environment (it was started with RLM_ATTACK_SECRET set):
# nothing of it reaches the sandbox, in os.environ or in libc's environ.
import os, ctypes
libc_env = ctypes.c_void_p.in_dll(ctypes.CDLL(None), "environ").value
print(sorted(os.environ.items()), libc_env in (None, 0) or
      ctypes.cast(libc_env, ctypes.POINTER(ctypes.c_char_p))[0] is None)
