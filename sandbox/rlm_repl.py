"""REPL runtime of rlm-sandboxd.

Imported once in the zygote (before any fork), so every sandbox starts with
this module, its namespace and the preloaded stdlib already in memory.  The
C side (rlm_child.c) reads frames from the channel and calls dispatch() with
the raw JSON of each request; dispatch() returns the encoded JSON result.
Code runs through _rlm.run(), which arms the per-cell wall and CPU timers
around the evaluation itself, and calls back to the host through
_rlm.call(), which sends one "call" frame and blocks for the "reply".
"""

import ast
import builtins
import json
import linecache
import random
import reprlib
import signal
import sys
import time
import types

import _rlm


LIMITS = {"wall_ms": 30000, "cpu_s": 10, "output_bytes": 1 << 20}

# names the runtime owns in the user namespace; restored after every cell
RESERVED_FUNCS = (
    "llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched",
    "SHOW_VARS", "FINAL", "FINAL_VAR", "call_tool", "__rlm_echo__",
)
RESERVED = frozenset(RESERVED_FUNCS + ("answer", "state", "__builtins__",
                                        "__name__"))

_preview = reprlib.Repr()
_preview.maxstring = 80
_preview.maxother = 80
_preview.maxlist = 8
_preview.maxdict = 8
_preview.maxlevel = 2


class ProtocolError(Exception):
    """A request the runtime cannot understand."""


def _on_timer(signum, frame):
    # delivered through PyErr_SetInterruptEx() by the C handler, only while
    # a cell is armed; a late delivery after the cell ended is ignored
    if _rlm.armed():
        if signum == signal.SIGXCPU:
            raise TimeoutError("cell exceeded its CPU time limit")
        raise TimeoutError("cell exceeded its wall time limit")


def _on_interrupt(signum, frame):
    # the host gave up on the cell (op "interrupt" of the manager)
    if _rlm.armed():
        raise KeyboardInterrupt("the host interrupted the cell")


signal.signal(signal.SIGALRM, _on_timer)
signal.signal(signal.SIGXCPU, _on_timer)
signal.signal(signal.SIGUSR1, _on_interrupt)


# --- output capture -------------------------------------------------------

class _Box:
    __slots__ = ("room", "truncated")

    def __init__(self, cap):
        self.room = cap
        self.truncated = False


class _Out:
    """A text stream that keeps at most the cell's output cap."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, box):
        self.box = box
        self.parts = []

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not "
                            + type(s).__name__)
        box = self.box
        n = len(s)
        if n <= box.room:
            self.parts.append(s)
            box.room -= n
        else:
            if box.room > 0:
                self.parts.append(s[:box.room])
                box.room = 0
            box.truncated = True
        return n

    def writelines(self, lines):
        for s in lines:
            self.write(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def writable(self):
        return True

    def readable(self):
        return False

    def fileno(self):
        raise OSError("captured stream has no file descriptor")

    def text(self):
        return "".join(self.parts)


class _Null(_Out):
    def __init__(self):
        super().__init__(_Box(0))

    def write(self, s):
        return len(s)


_NULL = _Null()
sys.stdout = sys.stderr = _NULL
sys.stdin = None


# Recursion deeper than this is refused with RecursionError whatever
# limit code asks for: CPython 3.11 keeps Python frames off the C stack,
# so a lifted limit lets a runaway recursion fill the memory frame by
# frame (the soft memory limit then ends it with a SystemError after a
# long, quadratic garbage collection) or, through C calls, overflow the
# C stack.  A gentle first step only: the soft memory limit, the cell's
# time limits and the cgroup stay behind it.
RECURSION_MAX = 10000
_set_recursion_limit = sys.setrecursionlimit


def _setrecursionlimit(n):
    _set_recursion_limit(min(n, RECURSION_MAX))


sys.setrecursionlimit = _setrecursionlimit


def _cut(out, err, cap):
    """Apply the byte cap to stdout + stderr; True if anything was cut."""
    if (len(out) + len(err)) * 4 <= cap:
        return out, err, False      # cannot exceed the cap even in UTF-8
    ob = out.encode("utf-8", "replace")
    eb = err.encode("utf-8", "replace")
    if len(ob) + len(eb) <= cap:
        return out, err, False
    ob = ob[:cap]
    eb = eb[:cap - len(ob)]
    return (ob.decode("utf-8", "ignore"), eb.decode("utf-8", "ignore"),
            True)


# --- answer, state, reserved functions -------------------------------------

_captured = None
_cell_captured = False


class _Answer(dict):
    """The `answer` dict: setting answer["ready"] = True captures it."""

    def __setitem__(self, key, value):
        dict.__setitem__(self, key, value)
        if key == "ready" and value:
            _capture(self)


def _capture(d):
    global _captured, _cell_captured
    content = d.get("content")
    if content is not None and not isinstance(content, str):
        content = str(content)
    _captured = {"content": content, "ready": True}
    _cell_captured = True


_ANSWER = _Answer(content="", ready=False)
_STATE = {}
_call_seq = 0
_tools = []

NS = {}


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError, RecursionError):
        return repr(v)


def _state_key(k):
    return k if isinstance(k, str) else str(k)


def _state_fingerprint(v):
    try:
        return json.dumps(v, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(v)


def _state_snapshot():
    if not _STATE:
        return {}
    return {_state_key(k): _state_fingerprint(v) for k, v in _STATE.items()}


def _state_delta(before):
    delta = {}
    now = {}
    for k, v in _STATE.items():
        key = _state_key(k)
        fp = _state_fingerprint(v)
        now[key] = fp
        if before.get(key) != fp:
            delta[key] = _jsonable(v)
    deleted = [k for k in before if k not in now]
    if deleted:
        delta["__deleted__"] = deleted
    return delta


def _text(p):
    if isinstance(p, (str, list, dict)):
        return p
    return str(p)


def _call(fn, args):
    global _call_seq
    _call_seq += 1
    seq = _call_seq
    raw = _rlm.call(json.dumps({"type": "call", "id": seq, "fn": fn,
                                "args": args}))
    try:
        rep = json.loads(raw)
    except ValueError:
        raise RuntimeError("host sent an unreadable reply") from None
    if not isinstance(rep, dict) or rep.get("id") != seq:
        raise RuntimeError("host reply does not match call %d" % seq)
    return rep


def _single(fn, args):
    rep = _call(fn, args)
    if not rep.get("ok"):
        raise RuntimeError(str(rep.get("error") or fn + " failed"))
    return rep.get("result")


def _batched(fn, args, n):
    rep = _call(fn, args)
    _take_state(rep)
    if not rep.get("ok"):
        raise RuntimeError(str(rep.get("error") or fn + " failed"))
    items = rep.get("result")
    if not isinstance(items, list) or len(items) != n:
        raise RuntimeError("%s: host returned %s items for %d prompts"
                           % (fn, len(items) if isinstance(items, list)
                              else "no", n))
    out = []
    for it in items:
        if isinstance(it, dict):
            if it.get("ok", True) and "error" not in it:
                out.append(it.get("result"))
            else:
                out.append("Error: " + str(it.get("error")))
        else:
            out.append(it)
    return out


def llm_query(prompt, model=None):
    """Ask a sub-model; returns its text."""
    return _single("llm_query", {"prompt": _text(prompt), "model": model})


def llm_query_batched(prompts, model=None):
    """Ask a sub-model many prompts concurrently; order kept, a failed
    item comes back as a string starting with "Error: "."""
    prompts = [_text(p) for p in prompts]
    return _batched("llm_query_batched", {"prompts": prompts,
                                          "model": model}, len(prompts))


def _shared_state():
    # the children start from the state as it is now, in the middle of
    # the cell, not as the host saw it at the end of the last one
    return {_state_key(k): _jsonable(v) for k, v in _STATE.items()}


def _take_state(rep):
    # what the children wrote to (or removed from) the shared dict is
    # visible on return
    st = rep.get("state")
    if isinstance(st, dict):
        _STATE.update(st)
    gone = rep.get("deleted")
    if isinstance(gone, list):
        for k in gone:
            if isinstance(k, str):
                _STATE.pop(k, None)


def rlm_query(prompt, model=None, context=None):
    """Run a child RLM on prompt; returns its answer.  Its context is
    `context` when given (a str, list or dict), else the prompt."""
    args = {"prompt": _text(prompt), "model": model,
            "state": _shared_state()}
    if context is not None:
        args["context"] = _text(context)
    rep = _call("rlm_query", args)
    _take_state(rep)
    if not rep.get("ok"):
        raise RuntimeError(str(rep.get("error") or "rlm_query failed"))
    return rep.get("result")


def rlm_query_batched(prompts, model=None):
    """Several child RLMs; order kept, per-item "Error: " strings."""
    prompts = [_text(p) for p in prompts]
    return _batched("rlm_query_batched", {"prompts": prompts,
                                          "model": model,
                                          "state": _shared_state()},
                    len(prompts))


def call_tool(name, *args, **kwargs):
    """Call the host tool `name` with JSON-encodable arguments."""
    return _single("tool", {"name": str(name), "args": _jsonable(list(args)),
                            "kwargs": _jsonable(kwargs)})


def _user_vars():
    for name, v in NS.items():
        if name.startswith("_") or name in RESERVED or name in _tools:
            continue
        if isinstance(v, types.ModuleType):
            continue
        yield name, v


def SHOW_VARS():
    """Print the variables defined in the REPL with their types."""
    items = ["%s: %s" % (n, type(v).__name__) for n, v in _user_vars()]
    if items:
        print("Variables: " + ", ".join(items))
    else:
        print("No variables defined yet.")


def FINAL(value):
    """Set the final answer to value (as text) and mark it ready."""
    _ANSWER["content"] = value if isinstance(value, str) else str(value)
    _ANSWER["ready"] = True


def FINAL_VAR(name):
    """Set the final answer to the variable called name (or to the value
    itself when given a non-string)."""
    if not isinstance(name, str):
        FINAL(name)
        return None
    key = name.strip().strip("'\"")
    if key in NS and key not in RESERVED:
        FINAL(NS[key])
        return None
    msg = ("Error: variable %r not found; define it first, then call "
           "FINAL_VAR(%r)" % (key, key))
    print(msg)
    return msg


def __rlm_echo__(value):
    if value is not None:
        print(repr(value))


_FUNCS = {n: globals()[n] for n in RESERVED_FUNCS}


def _tool_func(name):
    def tool(*args, **kwargs):
        return call_tool(name, *args, **kwargs)
    tool.__name__ = name
    tool.__doc__ = "Host tool %r." % name
    return tool


def _restore_reserved():
    for n, f in _FUNCS.items():
        if NS.get(n) is not f:
            NS[n] = f
    for n in _tools:
        f = _FUNCS.get("tool:" + n)
        if f is not None and NS.get(n) is not f:
            NS[n] = f
    a = NS.get("answer")
    if a is not _ANSWER:
        # rebinding detected: adopt a new dict, restore the tracked one
        if isinstance(a, dict):
            dict.clear(_ANSWER)
            dict.update(_ANSWER, a)
        NS["answer"] = _ANSWER
    s = NS.get("state")
    if s is not _STATE:
        if isinstance(s, dict):
            _STATE.clear()
            _STATE.update(s)
        NS["state"] = _STATE
    NS["__builtins__"] = builtins
    NS["__name__"] = "__main__"


def _reset_namespace():
    NS.clear()
    _restore_reserved()


_reset_namespace()


# --- requests ----------------------------------------------------------------

_cell_no = 0


def _compile(code, echo, filename):
    if echo:
        tree = ast.parse(code, filename, "exec")
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = tree.body[-1]
            call = ast.Call(func=ast.Name("__rlm_echo__", ast.Load()),
                            args=[last.value], keywords=[])
            tree.body[-1] = ast.Expr(call)
            ast.copy_location(tree.body[-1], last)
            ast.fix_missing_locations(tree)
        return compile(tree, filename, "exec")
    return compile(code, filename, "exec")


_sources = {}


def _register_sources(tb):
    # give linecache the source of every cell in the traceback, only now
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        src = _sources.get(name)
        if src is not None and name not in linecache.cache:
            linecache.cache[name] = (len(src), None, src.splitlines(True),
                                     name)
        tb = tb.tb_next


def _error_info(e, tb_skip=1):
    """{ename, evalue, traceback} without the runtime's own frames."""
    import traceback
    _register_sources(e.__traceback__)
    tb = e.__traceback__
    for _ in range(tb_skip):
        if tb is not None:
            tb = tb.tb_next
    te = traceback.TracebackException(type(e), e, tb, compact=True)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if f.filename != "<rlm_repl>"])
    return {"ename": type(e).__name__, "evalue": str(e),
            "traceback": "".join(te.format())}


def _num(req, key, default, lo, hi):
    v = req.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError("%s must be a number" % key)
    return max(lo, min(hi, v))


def op_exec(req, blob):
    global _cell_no, _cell_captured
    code = req.get("code")
    if not isinstance(code, str):
        raise ProtocolError("exec needs a string 'code'")
    wall_ms = _num(req, "timeout_ms", LIMITS["wall_ms"], 1, 86400000)
    cpu_s = _num(req, "cpu_s", LIMITS["cpu_s"], 1, 86400)
    cap = int(_num(req, "output_bytes", LIMITS["output_bytes"], 0, 1 << 30))
    echo = bool(req.get("echo"))

    _cell_no += 1
    filename = "<cell-%d>" % _cell_no
    box = _Box(cap)
    out = _Out(box)
    err = _Out(box)
    before = _state_snapshot()
    _cell_captured = False
    was_ready = bool(_ANSWER.get("ready"))
    exc = None
    status = "ok"

    t0 = time.perf_counter()
    sys.stdout, sys.stderr = out, err
    try:
        _sources[filename] = code
        c = _compile(code, echo, filename)
        _rlm.run(c, NS, int(wall_ms), int(cpu_s))
    except BaseException as e:   # noqa: B902 -- the cell's errors are data
        exc = e
    finally:
        sys.stdout = sys.stderr = _NULL
    duration = (time.perf_counter() - t0) * 1000.0

    if len(_sources) > 256:
        # keep the latest cells' sources for tracebacks of their functions
        for k in list(_sources)[:128]:
            del _sources[k]

    error = None
    if exc is not None:
        skip = 1000 if isinstance(exc, SyntaxError) else 1
        if isinstance(exc, MemoryError):
            status = "oom"
            error = {"ename": "MemoryError", "evalue": str(exc),
                     "traceback": ""}
        else:
            try:
                error = _error_info(exc, skip)
            except MemoryError:
                error = {"ename": type(exc).__name__, "evalue": "",
                         "traceback": ""}
            if isinstance(exc, TimeoutError) and _rlm.fired():
                status = "timeout"
            else:
                status = "error"
    exc = None

    _restore_reserved()
    if not _cell_captured and not was_ready and _ANSWER.get("ready"):
        _capture(_ANSWER)

    stdout, stderr, cut = _cut(out.text(), err.text(), cap)
    cut = cut or box.truncated
    if cut and status == "ok":
        status = "output_truncated"

    return {"type": "result", "status": status, "stdout": stdout,
            "stderr": stderr, "error": error,
            "duration_ms": round(duration, 3),
            "output_truncated": cut,
            "answer": _captured if _cell_captured else None,
            "state_delta": _state_delta(before)}


def op_load_context(req, blob):
    name = req.get("name", "context")
    fmt = req.get("format", "text")
    if not isinstance(name, str) or not name.isidentifier() \
            or name in RESERVED or name.startswith("_"):
        raise ProtocolError("bad context name %r" % (name,))
    if blob is None:
        data = req.get("data")
        if data is None:
            raise ProtocolError("load_context needs a blob or 'data'")
        nbytes = len(json.dumps(data)) if fmt == "json" else len(data)
        value = data
    else:
        nbytes = _rlm.blob_len()
        if fmt == "text":
            value = blob
        elif fmt == "json":
            value = json.loads(blob)
        else:
            raise ProtocolError("format must be text or json")
    blob = None
    NS.pop(name, None)
    NS[name] = value
    return {"type": "result", "status": "ok", "name": name, "bytes": nbytes,
            "kind": type(value).__name__}


def op_vars(req, blob):
    out = []
    for name, v in _user_vars():
        try:
            pv = _preview.repr(v)
        except Exception:   # noqa: B902 -- user __repr__ may raise anything
            pv = "<unprintable>"
        try:
            size = len(v)
        except Exception:   # noqa: B902
            size = None
        out.append({"name": name, "type": type(v).__name__,
                    "preview": pv[:120], "len": size})
    return {"type": "result", "status": "ok", "vars": out}


def op_get_var(req, blob):
    name = req.get("name")
    if not isinstance(name, str):
        raise ProtocolError("get_var needs a string 'name'")
    if name not in NS or name.startswith("__"):
        return {"type": "result", "status": "error",
                "error": {"ename": "NameError",
                          "evalue": "name %r is not defined" % name,
                          "traceback": ""}}
    v = NS[name]
    if name == "answer":
        v = dict(v)
    limit = _num(req, "max_bytes", 8 * 1024 * 1024, 0, 15 * 1024 * 1024)
    try:
        s = v if isinstance(v, str) else str(v)
    except BaseException as e:   # noqa: B902
        return {"type": "result", "status": "error",
                "error": _error_info(e, 0)}
    cut = False
    if len(s) > limit // 4:
        b = s.encode("utf-8", "replace")
        if len(b) > limit:
            s = b[:int(limit)].decode("utf-8", "ignore")
            cut = True
    return {"type": "result", "status": "ok", "type_name": type(v).__name__,
            "value": s, "truncated": cut}


def op_state_update(req, blob):
    st = req.get("state") or {}
    deleted = req.get("deleted") or []
    if not isinstance(st, dict) or not isinstance(deleted, list):
        raise ProtocolError("state_update needs an object 'state' and a "
                            "list 'deleted'")
    for k, v in st.items():
        _STATE[k] = v
    for k in deleted:
        _STATE.pop(k, None)
    return {"type": "result", "status": "ok", "keys": len(_STATE)}


def op_define_tools(req, blob):
    names = req.get("names")
    if not isinstance(names, list) or not all(
            isinstance(n, str) and n.isidentifier() and n not in RESERVED
            for n in names):
        raise ProtocolError("define_tools needs a list of identifiers")
    for n in names:
        f = _tool_func(n)
        _FUNCS["tool:" + n] = f
        if n not in _tools:
            _tools.append(n)
        NS[n] = f
    return {"type": "result", "status": "ok", "tools": list(_tools)}


def op_ping(req, blob):
    import os
    return {"type": "result", "status": "ok", "pid": os.getpid(),
            "cells": _cell_no}


_OPS = {"exec": op_exec, "load_context": op_load_context, "vars": op_vars,
        "get_var": op_get_var, "state_update": op_state_update,
        "define_tools": op_define_tools, "ping": op_ping}


def _proto_error(msg):
    return {"type": "result", "status": "error",
            "error": {"ename": "ProtocolError", "evalue": msg,
                      "traceback": ""}}


FRAME_JSON_MAX = 16 * 1024 * 1024


def _encode(res):
    try:
        s = json.dumps(res, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError) as e:
        s = json.dumps(_proto_error("result not encodable: %s" % e))
    b = s.encode("utf-8", "replace")
    if len(b) > FRAME_JSON_MAX:
        # a frame cannot carry it: say so instead of breaking the channel
        b = json.dumps({"type": "result", "status": "error", "error": {
            "ename": "ResultTooLarge",
            "evalue": "result of %d bytes exceeds the 16 MiB frame limit; "
                      "lower output_bytes or use get_var with max_bytes"
                      % len(b), "traceback": ""}}).encode()
    return b


def dispatch(raw, blob):
    """Serve one request frame; returns the encoded result frame JSON."""
    req = None
    try:
        req = json.loads(raw)
        if not isinstance(req, dict):
            raise ProtocolError("a request must be a JSON object")
        fn = _OPS.get(req.get("op"))
        if fn is None:
            raise ProtocolError("unknown op %r" % (req.get("op"),))
        res = fn(req, blob)
    except ProtocolError as e:
        res = _proto_error(str(e))
    except ValueError as e:
        res = _proto_error("bad request: %s" % e)
    except MemoryError:
        res = {"type": "result", "status": "oom",
               "error": {"ename": "MemoryError", "evalue": "",
                         "traceback": ""}}
    except BaseException as e:   # noqa: B902 -- never let the loop die
        res = {"type": "result", "status": "error",
               "error": _error_info(e, 0)}
    blob = None
    if isinstance(req, dict) and "seq" in req:
        res["seq"] = req["seq"]
    return _encode(res)


# Cells the zygote runs before it forks, through the whole request path:
# CPython 3.11 rewrites a function's bytecode in place after its first
# calls (quickening, then specialisation), and fills caches on first use.
# Done once here, those writes land in pages every sandbox shares; done
# in each sandbox, they would copy a few hundred KiB of zygote pages on
# the first cell of every session.
_WARM_CELLS = (
    b'{"op":"exec","code":"x = 1"}',
    b'{"op":"exec","code":"print(x, 2)\\nx += 1","seq":1}',
    b'{"op":"exec","code":"x","echo":true,"timeout_ms":5000,"cpu_s":5}',
    b'{"op":"exec","code":"state[\\"k\\"] = [1]; del state[\\"k\\"]"}',
    b'{"op":"exec","code":"1 / 0"}',
    b'{"op":"exec","code":"def"}',
    b'{"op":"ping"}',
)


def warm_up(rounds=32, cells=_WARM_CELLS):
    """Run the warm-up cells, then forget them: the state stays exactly
    what a fresh sandbox must see."""
    global _cell_no, _captured, _cell_captured, _call_seq
    for _ in range(rounds):
        for raw in cells:
            dispatch(raw, None)
    for name in list(_sources):
        linecache.cache.pop(name, None)
    _sources.clear()
    _cell_no = 0
    _call_seq = 0
    _captured = None
    _cell_captured = False
    _STATE.clear()
    dict.clear(_ANSWER)
    dict.update(_ANSWER, content="", ready=False)
    _reset_namespace()


def prime():
    """In a pool sandbox, jailed, before it serves: one plain cell, so the
    pages any cell writes are copied from the zygote now, while the
    sandbox waits in the pool, and not on its session's first cell."""
    global _cell_no
    dispatch(_WARM_CELLS[0], None)
    NS.pop("x", None)
    _sources.clear()
    _cell_no = 0


def configure(wall_ms, cpu_s, output_bytes):
    """Per-sandbox defaults, set by the C side right after the fork."""
    LIMITS["wall_ms"] = wall_ms
    LIMITS["cpu_s"] = cpu_s
    LIMITS["output_bytes"] = output_bytes


def after_fork():
    """In the child, before the jail: fresh random streams."""
    random.seed()
