# Python-to-Python recursion with the limit lifted: 3.11 keeps frames on
# the heap, so this would balloon memory; the runtime caps the limit code
# may set, and RecursionError ends it.
import sys
sys.setrecursionlimit(10 ** 8)
def f(n):
    return f(n + 1) + 1
f(0)
