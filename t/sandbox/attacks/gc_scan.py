# Look for another session's secret in every object the GC knows.
import gc
found = [o for o in gc.get_objects()
         if isinstance(o, dict) and "SECRET_OTHER" in o]
strs = [o for o in gc.get_objects()
        if isinstance(o, str) and "s3cr3t-" in o and o != "s3cr3t-"]
print("found", len(found), len(strs))
