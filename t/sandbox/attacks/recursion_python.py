# Unbounded Python recursion: RecursionError.
def f(n):
    return f(n + 1)
f(0)
