# Sleep far beyond the wall limit: interrupted by the wall timer.
import time
time.sleep(3600)
