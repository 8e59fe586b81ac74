/*
 * The sandbox side of a fork: the _rlm built-in module the REPL runtime
 * uses (timers around a cell, callbacks to the host) and the loop that
 * serves the connections of the inherited channel socket, one frame at
 * a time.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "rlm_sandboxd.h"
#include "rlm_frame.h"
#include "rlm_child.h"


#define RLM_WALL_GRACE_MS   2000
#define RLM_CHILD_CONNS     16


/* the runtime's entry points, looked up once in the zygote */
PyObject  *rlm_dispatch_fn;
PyObject  *rlm_configure_fn;
PyObject  *rlm_after_fork_fn;
PyObject  *rlm_prime_fn;

static int                    rlm_conn = -1;
static int                    rlm_conn_broken;
static uint32_t               rlm_blob_len;
static uint32_t               rlm_max_blob = RLM_FRAME_BLOB_MAX;

static timer_t                rlm_cpu_timer;
static int                    rlm_cpu_timer_ok;

static volatile sig_atomic_t  rlm_armed;
static volatile sig_atomic_t  rlm_fired;
static volatile sig_atomic_t  rlm_wall_hits;
static volatile sig_atomic_t  rlm_cpu_hits;


static void
rlm_set_timer(long ms)
{
    struct itimerval  it;

    memset(&it, 0, sizeof(it));
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_usec = (ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
}


/*
 * First expiry: make Python raise TimeoutError at the next bytecode; the
 * second one (code stuck in C or swallowing the error) ends the sandbox.
 */
static void
rlm_on_alarm(int signo)
{
    int  saved;

    (void) signo;
    saved = errno;

    if (rlm_armed) {
        rlm_wall_hits++;

        if (rlm_wall_hits == 1) {
            rlm_fired = 1;
            PyErr_SetInterruptEx(SIGALRM);
            rlm_set_timer(RLM_WALL_GRACE_MS);

        } else {
            _exit(RLM_EXIT_WALL);
        }
    }

    errno = saved;
}


/* the CPU timer repeats SIGXCPU every CPU second past the budget */
static void
rlm_on_xcpu(int signo)
{
    int  saved;

    (void) signo;
    saved = errno;

    if (rlm_armed) {
        rlm_cpu_hits++;

        if (rlm_cpu_hits == 1) {
            rlm_fired = 1;
            PyErr_SetInterruptEx(SIGXCPU);

        } else if (rlm_cpu_hits >= 3) {
            _exit(RLM_EXIT_CPU);
        }
    }

    errno = saved;
}


/*
 * The host gave up on the cell (its client went away, its deadline
 * passed): KeyboardInterrupt at the next bytecode, and the sandbox ends
 * if the code is still running after the grace period.  The host closes
 * the cell's connection before it asks the manager, so a signal that
 * finds the running cell's connection still open is late: it was meant
 * for a cell that has ended, and this one is left alone.
 */
static void
rlm_on_interrupt(int signo)
{
    int            saved;
    struct pollfd  pfd;

    (void) signo;
    saved = errno;

    pfd.fd = rlm_conn;
    pfd.events = POLLRDHUP;
    pfd.revents = 0;

    if (rlm_conn >= 0 && poll(&pfd, 1, 0) == 1
        && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))
        && rlm_armed && rlm_wall_hits == 0)
    {
        rlm_wall_hits = 1;
        PyErr_SetInterruptEx(SIGUSR1);
        rlm_set_timer(RLM_WALL_GRACE_MS);
    }

    errno = saved;
}


void
rlm_child_install_signals(void)
{
    struct sigaction  sa;

    /* after the runtime registered Python handlers for both signals */

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = rlm_on_alarm;
    sigaction(SIGALRM, &sa, NULL);

    sa.sa_handler = rlm_on_xcpu;
    sigaction(SIGXCPU, &sa, NULL);

    sa.sa_handler = rlm_on_interrupt;
    sigaction(SIGUSR1, &sa, NULL);
}


/*
 * The per-cell CPU budget: a timer on the process's CPU clock (all its
 * threads) that sends SIGXCPU when the cell has used cpu_s seconds, then
 * every CPU second, like the soft RLIMIT_CPU did.  It is made in the
 * child before the jail and armed around each cell; the rlimit itself is
 * left alone after the jail, so the seccomp filter can refuse every
 * change of RLIMIT_CPU (a cell that raised its soft limit escaped the
 * budget).  Without the timer the cell runs under the manager's limits
 * only.
 */
static void
rlm_cpu_timer_create(void)
{
    struct sigevent  sev;

    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGXCPU;

    rlm_cpu_timer_ok = (timer_create(CLOCK_PROCESS_CPUTIME_ID, &sev,
                                     &rlm_cpu_timer) == 0);

    if (!rlm_cpu_timer_ok) {
        rlm_log("sandbox %d: no per-cell CPU timer: %s", (int) getpid(),
                strerror(errno));
    }
}


static void
rlm_cpu_timer_set(unsigned cpu_s)
{
    struct itimerspec  its;

    if (!rlm_cpu_timer_ok) {
        return;
    }

    memset(&its, 0, sizeof(its));

    if (cpu_s > 0) {
        its.it_value.tv_sec = cpu_s;
        its.it_interval.tv_sec = 1;
    }

    timer_settime(rlm_cpu_timer, 0, &its, NULL);
}


/* _rlm.run(code, namespace, wall_ms, cpu_s): evaluate one cell */
static PyObject *
rlm_py_run(PyObject *self, PyObject *args)
{
    PyObject  *code, *ns, *res;
    long       wall_ms;
    unsigned   cpu_s;

    (void) self;

    if (!PyArg_ParseTuple(args, "O!O!lI", &PyCode_Type, &code,
                          &PyDict_Type, &ns, &wall_ms, &cpu_s))
    {
        return NULL;
    }

    rlm_fired = 0;
    rlm_wall_hits = 0;
    rlm_cpu_hits = 0;

    rlm_cpu_timer_set(cpu_s);
    rlm_armed = 1;
    rlm_set_timer(wall_ms > 0 ? wall_ms : 1);

    res = PyEval_EvalCode(code, ns, ns);

    rlm_armed = 0;
    rlm_set_timer(0);
    rlm_cpu_timer_set(0);

    /* a trip that raced the end of the cell: the handler now ignores it */

    if (res != NULL && PyErr_CheckSignals() < 0) {
        Py_CLEAR(res);
    }

    return res;
}


static PyObject *
rlm_py_armed(PyObject *self, PyObject *noargs)
{
    (void) self;
    (void) noargs;
    return PyBool_FromLong(rlm_armed);
}


static PyObject *
rlm_py_fired(PyObject *self, PyObject *noargs)
{
    (void) self;
    (void) noargs;
    return PyBool_FromLong(rlm_fired);
}


static PyObject *
rlm_py_blob_len(PyObject *self, PyObject *noargs)
{
    (void) self;
    (void) noargs;
    return PyLong_FromUnsignedLong(rlm_blob_len);
}


/*
 * _rlm.call(json): send a "call" frame, block for the host's reply and
 * return its JSON text.  The wall timer is paused meanwhile: model latency
 * is the host's business.
 */
static PyObject *
rlm_py_call(PyObject *self, PyObject *args)
{
    const char        *json;
    Py_ssize_t         len;
    struct itimerval   saved, zero;
    char              *rjson, *rblob;
    uint32_t           rjl, rbl;
    int                rc;
    PyObject          *res;

    (void) self;

    if (!PyArg_ParseTuple(args, "s#", &json, &len)) {
        return NULL;
    }

    if (rlm_conn < 0 || rlm_conn_broken) {
        PyErr_SetString(PyExc_ConnectionResetError, "host channel closed");
        return NULL;
    }

    memset(&zero, 0, sizeof(zero));
    setitimer(ITIMER_REAL, &zero, &saved);

    rc = -1;
    rjson = NULL;
    rblob = NULL;

    if (rlm_frame_send(rlm_conn, json, len, NULL, 0) == 0) {
        rc = rlm_frame_recv(rlm_conn, &rjson, &rjl, &rblob, &rbl,
                            RLM_FRAME_JSON_MAX);
    }

    if (rlm_armed && (saved.it_value.tv_sec || saved.it_value.tv_usec)) {
        setitimer(ITIMER_REAL, &saved, NULL);
    }

    free(rblob);

    if (rc != 1) {
        free(rjson);
        rlm_conn_broken = 1;
        PyErr_SetString(PyExc_ConnectionResetError,
                        "host channel closed while waiting for a reply");
        return NULL;
    }

    res = PyUnicode_DecodeUTF8(rjson, rjl, "replace");
    free(rjson);

    return res;
}


static PyMethodDef  rlm_methods[] = {
    { "run", rlm_py_run, METH_VARARGS, "run a code object as one cell" },
    { "call", rlm_py_call, METH_VARARGS, "call the host and wait" },
    { "armed", rlm_py_armed, METH_NOARGS, "a cell is running" },
    { "fired", rlm_py_fired, METH_NOARGS, "the last cell hit a timer" },
    { "blob_len", rlm_py_blob_len, METH_NOARGS, "bytes of the blob" },
    { NULL, NULL, 0, NULL }
};


static struct PyModuleDef  rlm_module = {
    PyModuleDef_HEAD_INIT, "_rlm", "rlm-sandboxd runtime hooks", -1,
    rlm_methods, NULL, NULL, NULL, NULL
};


PyObject *
rlm_child_module_init(void)
{
    return PyModule_Create(&rlm_module);
}


/* word-at-a-time test that a buffer is 7-bit */
static int
rlm_is_ascii(const unsigned char *p, size_t n)
{
    uint64_t  acc, w;
    size_t    i;

    acc = 0;
    i = 0;

    for ( /* void */ ; i + 32 <= n; i += 32) {
        memcpy(&w, p + i, 8);
        acc |= w;
        memcpy(&w, p + i + 8, 8);
        acc |= w;
        memcpy(&w, p + i + 16, 8);
        acc |= w;
        memcpy(&w, p + i + 24, 8);
        acc |= w;

        if (acc & 0x8080808080808080ull) {
            return 0;
        }
    }

    for ( /* void */ ; i < n; i++) {
        if (p[i] & 0x80) {
            return 0;
        }
    }

    return (acc & 0x8080808080808080ull) == 0;
}


/*
 * Read a blob straight into a str object: for 7-bit data (the usual
 * context) the socket bytes land in the string's own storage, so a 100 MB
 * context costs 100 MB once.  Other data is decoded from that buffer.
 */
static PyObject *
rlm_read_blob(int fd, uint32_t len, int *io_error)
{
    PyObject  *s, *d;
    char      *data;

    *io_error = 0;

    s = PyUnicode_New(len, 127);
    if (s == NULL) {
        return NULL;
    }

    data = PyUnicode_DATA(s);

    if (rlm_read_full(fd, data, len) != 1) {
        Py_DECREF(s);
        *io_error = 1;
        return NULL;
    }

    if (rlm_is_ascii((unsigned char *) data, len)) {
        return s;
    }

    d = PyUnicode_DecodeUTF8(data, len, "replace");
    Py_DECREF(s);

    return d;
}


static void
rlm_send_error(int fd, const char *status, const char *ename,
    const char *evalue)
{
    char  buf[512];
    int   n;

    n = snprintf(buf, sizeof(buf),
                 "{\"type\":\"result\",\"status\":\"%s\",\"error\":"
                 "{\"ename\":\"%s\",\"evalue\":\"%s\",\"traceback\":\"\"}}",
                 status, ename, evalue);

    rlm_frame_send(fd, buf, n, NULL, 0);
}


static int
rlm_discard(int fd, uint64_t n)
{
    char    buf[65536];
    size_t  chunk;

    while (n > 0) {
        chunk = n < sizeof(buf) ? n : sizeof(buf);

        if (rlm_read_full(fd, buf, chunk) != 1) {
            return -1;
        }

        n -= chunk;
    }

    return 0;
}


/*
 * Serves one request frame of a connection; 0 keeps the connection,
 * -1 closes it (end of file, broken channel, broken framing).
 */

static int
rlm_serve_frame(int fd)
{
    unsigned char  hdr[RLM_FRAME_HDR_LEN];
    uint32_t       jl, bl;
    PyObject      *json, *blob, *res;
    int            io_error;
    char          *out;
    Py_ssize_t     outlen;

    rlm_conn = fd;
    rlm_conn_broken = 0;

    if (rlm_read_full(fd, hdr, sizeof(hdr)) != 1) {
        goto closed;
    }

    rlm_frame_get_hdr(hdr, &jl, &bl);

    if (jl == 0 || jl > RLM_FRAME_JSON_MAX) {
        rlm_send_error(fd, "error", "ProtocolError",
                       "frame lengths out of range");
        goto closed;
    }

    if (bl > rlm_max_blob) {
        /* a well-formed frame we refuse: skip it, keep the session */
        if (rlm_discard(fd, (uint64_t) jl + bl) != 0) {
            goto closed;
        }

        rlm_send_error(fd, "error", "ProtocolError",
                       "blob larger than the manager's max_blob");
        goto kept;
    }

    json = PyBytes_FromStringAndSize(NULL, jl);
    if (json == NULL) {
        PyErr_Clear();
        rlm_send_error(fd, "oom", "MemoryError", "request too large");
        goto closed;
    }

    if (rlm_read_full(fd, PyBytes_AS_STRING(json), jl) != 1) {
        Py_DECREF(json);
        goto closed;
    }

    blob = NULL;

    if (bl > 0) {
        blob = rlm_read_blob(fd, bl, &io_error);

        if (blob == NULL) {
            PyErr_Clear();
            Py_DECREF(json);

            if (!io_error) {
                rlm_send_error(fd, "oom", "MemoryError",
                               "blob does not fit in memory");
            }

            goto closed;
        }
    }

    rlm_blob_len = bl;

    res = PyObject_CallFunctionObjArgs(rlm_dispatch_fn, json,
                                       blob ? blob : Py_None, NULL);
    Py_DECREF(json);
    Py_XDECREF(blob);

    if (rlm_conn_broken) {
        Py_XDECREF(res);
        PyErr_Clear();
        goto closed;
    }

    if (res == NULL || !PyBytes_Check(res)) {
        Py_XDECREF(res);
        PyErr_Clear();
        rlm_send_error(fd, "error", "InternalError",
                       "runtime failed to answer");
        goto kept;
    }

    PyBytes_AsStringAndSize(res, &out, &outlen);

    if (rlm_frame_send(fd, out, outlen, NULL, 0) != 0) {
        Py_DECREF(res);
        goto closed;
    }

    Py_DECREF(res);

kept:

    rlm_conn = -1;

    return 0;

closed:

    rlm_conn = -1;

    return -1;
}


static void rlm_child_serve(int listen_fd) __attribute__((noreturn));


static void
rlm_child_fail(const char *what)
{
    if (PyErr_Occurred()) {
        PyErr_Print();
    }

    rlm_log("sandbox %d: %s", (int) getpid(), what);
    _exit(RLM_EXIT_INTERNAL);
}


void
rlm_child_main(rlm_conf_t *conf, const rlm_jail_limits_t *jl,
    const rlm_limits_t *limits, int listen_fd, int prime)
{
    sigset_t   none;
    PyObject  *r;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_IGN);

    PyOS_AfterFork_Child();

    /* timers are not inherited: each sandbox makes its own */
    rlm_cpu_timer_create();

    rlm_max_blob = conf->max_blob;

    r = PyObject_CallFunction(rlm_configure_fn, "III", limits->wall_ms,
                              limits->cpu_s, limits->output_bytes);
    if (r == NULL) {
        rlm_child_fail("configure failed");
    }

    Py_DECREF(r);

    r = PyObject_CallNoArgs(rlm_after_fork_fn);
    if (r == NULL) {
        rlm_child_fail("reseed failed");
    }

    Py_DECREF(r);

    if (rlm_jail_enter(&conf->jail, jl, listen_fd) != 0) {
        rlm_log("sandbox %d: jail: %s", (int) getpid(), conf->jail.err);
        _exit(RLM_JAIL_EXIT_SETUP);
    }

    if (prime) {
        r = PyObject_CallNoArgs(rlm_prime_fn);
        if (r == NULL) {
            rlm_child_fail("prime failed");
        }

        Py_DECREF(r);
    }

    rlm_child_serve(listen_fd);
}


/*
 * Serves the channel: the listening socket and up to RLM_CHILD_CONNS
 * connections, which nginx workers keep open between cells.  The host
 * never sends on two connections of one sandbox at once, so a frame is
 * served whole before the next poll.  With the table full, a new
 * connection pushes out the one idle the longest.
 */

static void
rlm_child_serve(int listen_fd)
{
    int            fd, i, n, oldest;
    unsigned long  tick;
    unsigned long  used[RLM_CHILD_CONNS];
    struct pollfd  pfd[RLM_CHILD_CONNS + 1];

    for (i = 0; i <= RLM_CHILD_CONNS; i++) {
        pfd[i].fd = -1;
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
    }

    pfd[RLM_CHILD_CONNS].fd = listen_fd;
    tick = 0;

    for ( ;; ) {
        n = poll(pfd, RLM_CHILD_CONNS + 1, -1);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            _exit(RLM_EXIT_INTERNAL);
        }

        for (i = 0; i < RLM_CHILD_CONNS; i++) {
            if (pfd[i].fd < 0 || pfd[i].revents == 0) {
                continue;
            }

            used[i] = ++tick;

            if (rlm_serve_frame(pfd[i].fd) != 0) {
                close(pfd[i].fd);
                pfd[i].fd = -1;
            }
        }

        if (pfd[RLM_CHILD_CONNS].revents == 0) {
            continue;
        }

        fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED
                || errno == EAGAIN)
            {
                continue;
            }

            _exit(RLM_EXIT_INTERNAL);
        }

        oldest = -1;

        for (i = 0; i < RLM_CHILD_CONNS; i++) {
            if (pfd[i].fd < 0) {
                oldest = i;
                break;
            }

            if (oldest < 0 || used[i] < used[oldest]) {
                oldest = i;
            }
        }

        if (pfd[oldest].fd >= 0) {
            close(pfd[oldest].fd);
        }

        pfd[oldest].fd = fd;
        pfd[oldest].revents = 0;
        used[oldest] = ++tick;
    }
}
