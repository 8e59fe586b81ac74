# Tamper with builtins for whoever comes next: only this process changes.
import builtins
builtins.print = None
builtins.open = None
builtins.__import__ = None
