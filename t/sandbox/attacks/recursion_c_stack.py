# Recursion in C (repr of a deeply nested list) with the Python limit
# lifted overflows the C stack: SIGSEGV, this sandbox only.
import sys
sys.setrecursionlimit(10 ** 8)
x = []
for _ in range(2 * 10 ** 5):
    x = [x]
repr(x)
