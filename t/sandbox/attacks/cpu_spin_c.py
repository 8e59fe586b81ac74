# CPU spin inside C code that never returns to the eval loop (sum over a
# huge range): the soft timer's TimeoutError cannot be raised until it
# returns, so the hard limit must stop it.
sum(range(10 ** 15))
