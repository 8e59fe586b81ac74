# An RWX mapping for shellcode: refused (EPERM).
import mmap
mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
