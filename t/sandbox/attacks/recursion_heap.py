# Python-to-Python recursion with the limit lifted: 3.11 keeps frames on
# the heap, so this balloons memory until the cgroup kills the sandbox.
import sys
sys.setrecursionlimit(10 ** 8)
def f(n):
    return f(n + 1) + 1
f(0)
