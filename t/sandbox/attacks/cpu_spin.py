# CPU spin in pure Python: the per-cell CPU budget raises TimeoutError.
while True:
    pass
