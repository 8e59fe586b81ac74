# Random streams must differ between sessions forked from one zygote.
import random, os, uuid
print(random.getrandbits(64), os.urandom(8).hex(), uuid.uuid4().hex)
