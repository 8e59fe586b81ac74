# A sparse file far beyond RLIMIT_FSIZE: EFBIG, not a kill.
with open("/tmp/sparse", "wb") as f:
    f.seek(1 << 40)
    f.write(b"x")
