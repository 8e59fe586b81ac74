# Recursion in C (repr of a deeply nested list) with the Python limit
# lifted past the runtime's cap (the cap is a gentle step, reachable
# through the wrapper's globals) overflows the C stack: SIGSEGV, this
# sandbox only.
import sys
sys.setrecursionlimit.__globals__["_set_recursion_limit"](10 ** 8)
x = []
for _ in range(2 * 10 ** 5):
    x = [x]
repr(x)
