/*
 * rlm-sandbox-bench: measures rlm-sandboxd over its own protocol and runs
 * the baselines side by side (gVisor sandbox per session, fresh python per
 * cell, in-process exec).  Started by bench/sandbox_bench.sh; prints a
 * Markdown table for docs/benchmarks.md.
 *
 *   rlm-sandbox-bench [--sandboxd PATH] [--iterations N] [--live N]
 *                     [--context-mb N] [--no-baselines]
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <jansson.h>

#include "rlm_frame.h"


typedef struct {
    pid_t  pid;
    char   dir[128];
    char   control[192];
} bench_manager_t;


static const char  *bench_sandboxd = "rlm-sandboxd";


static double
bench_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static int
bench_cmp(const void *a, const void *b)
{
    double  x, y;

    x = *(const double *) a;
    y = *(const double *) b;

    return x < y ? -1 : x > y;
}


static double
bench_pct(double *v, int n, int pct)
{
    int  i;

    qsort(v, n, sizeof(double), bench_cmp);
    i = (int) ((double) n * pct / 100.0);

    if (i >= n) {
        i = n - 1;
    }

    return v[i];
}


static void
bench_die(const char *what)
{
    fprintf(stderr, "rlm-sandbox-bench: %s: %s\n", what, strerror(errno));
    exit(1);
}


static int
bench_connect(const char *path)
{
    struct sockaddr_un  sa;
    int                 fd, sndbuf;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        bench_die("socket");
    }

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);

    if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
        bench_die(path);
    }

    /* bulk blobs: a large send buffer means fewer wake-ups per MiB */
    sndbuf = 4 * 1024 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));

    return fd;
}


/* one request/reply; the text is sent as is */
static json_t *
bench_rpc(int fd, const char *json, const void *blob, size_t blob_len)
{
    char          *rj, *rb;
    uint32_t       jl, bl;
    json_t        *rep;
    json_error_t   err;

    if (rlm_frame_send(fd, json, strlen(json), blob, blob_len) != 0
        || rlm_frame_recv(fd, &rj, &jl, &rb, &bl, 0) != 1)
    {
        bench_die("rpc");
    }

    rep = json_loadb(rj, jl, 0, &err);
    free(rj);
    free(rb);

    return rep;
}


static void
bench_start(bench_manager_t *m, const char **extra)
{
    const char  *argv[32];
    char        *envp[] = { NULL };
    int          p[2], n;
    char         c;

    snprintf(m->dir, sizeof(m->dir), "/tmp/rlmbench.XXXXXX");
    if (mkdtemp(m->dir) == NULL) {
        bench_die("mkdtemp");
    }

    snprintf(m->control, sizeof(m->control), "%s/control.sock", m->dir);

    if (pipe(p) != 0) {
        bench_die("pipe");
    }

    n = 0;
    argv[n++] = bench_sandboxd;
    argv[n++] = "--runtime-dir";
    argv[n++] = m->dir;
    argv[n++] = "--ready-fd";
    argv[n++] = "3";

    while (*extra && n < 30) {
        argv[n++] = *extra++;
    }

    argv[n] = NULL;

    m->pid = fork();

    if (m->pid == 0) {
        close(p[0]);
        dup2(p[1], 3);
        execve(bench_sandboxd, (char **) argv, envp);
        _exit(127);
    }

    close(p[1]);

    if (read(p[0], &c, 1) != 1) {
        fprintf(stderr, "rlm-sandbox-bench: %s did not start\n",
                bench_sandboxd);
        exit(1);
    }

    close(p[0]);
}


static void
bench_stop(bench_manager_t *m)
{
    char  cmd[1024];
    int   status;

    kill(m->pid, SIGTERM);
    waitpid(m->pid, &status, 0);

    /* only what a manager leaves; never recursive into mounts */
    snprintf(cmd, sizeof(cmd), "rm -f %s/s/* %s/control.sock "
             "%s/manager.lock; rmdir %s/s %s/jail-root %s 2>/dev/null",
             m->dir, m->dir, m->dir, m->dir, m->dir, m->dir);

    if (system(cmd) < 0) {
        /* best effort */
    }
}


static int
bench_idle(int cfd)
{
    json_t  *r;
    int      idle;

    r = bench_rpc(cfd, "{\"op\":\"stats\"}", NULL, 0);
    idle = (int) json_integer_value(json_object_get(r, "idle"));
    json_decref(r);

    return idle;
}


static void
bench_wait_idle(int cfd, int want)
{
    int  i;

    for (i = 0; i < 20000 && bench_idle(cfd) < want; i++) {
        usleep(500);
    }
}


/* kB values of one /proc/PID/smaps_rollup field */
static long
bench_smaps(pid_t pid, const char *field)
{
    char   path[64], line[256];
    FILE  *f;
    long   v, total;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int) pid);
    f = fopen(path, "r");

    if (f == NULL) {
        return -1;
    }

    n = strlen(field);
    total = 0;

    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = atol(line + n + 1);
            total += v;
        }
    }

    fclose(f);

    return total;
}


static long
bench_private_kb(pid_t pid)
{
    return bench_smaps(pid, "Private_Clean")
           + bench_smaps(pid, "Private_Dirty");
}


typedef struct {
    char   sandbox[64];
    char   path[256];
    pid_t  pid;
    int    warm;
} bench_sb_t;


static void
bench_acquire(int cfd, bench_sb_t *sb, const char *limits)
{
    char     req[512];
    json_t  *r;

    snprintf(req, sizeof(req), "{\"op\":\"acquire\",\"session\":\"bench\"%s%s}",
             limits ? ",\"limits\":" : "", limits ? limits : "");

    r = bench_rpc(cfd, req, NULL, 0);

    if (!json_is_true(json_object_get(r, "ok"))) {
        fprintf(stderr, "rlm-sandbox-bench: acquire failed: %s\n",
                json_string_value(json_object_get(json_object_get(r, "error"),
                                                  "message")));
        exit(1);
    }

    snprintf(sb->sandbox, sizeof(sb->sandbox), "%s",
             json_string_value(json_object_get(r, "sandbox")));
    snprintf(sb->path, sizeof(sb->path), "%s",
             json_string_value(json_object_get(r, "path")));
    sb->pid = (pid_t) json_integer_value(json_object_get(r, "pid"));
    sb->warm = json_is_true(json_object_get(r, "warm"));
    json_decref(r);
}


static void
bench_release(int cfd, bench_sb_t *sb)
{
    char  req[256];

    snprintf(req, sizeof(req), "{\"op\":\"release\",\"sandbox\":\"%s\"}",
             sb->sandbox);
    json_decref(bench_rpc(cfd, req, NULL, 0));
}


static double
bench_exec(int fd, const char *code)
{
    json_t  *req, *r;
    char    *s;
    double   t0, t1;

    req = json_pack("{s:s,s:s}", "op", "exec", "code", code);
    s = json_dumps(req, JSON_COMPACT);
    json_decref(req);

    t0 = bench_now();
    r = bench_rpc(fd, s, NULL, 0);
    t1 = bench_now();

    if (strcmp(json_string_value(json_object_get(r, "status")), "ok") != 0) {
        fprintf(stderr, "rlm-sandbox-bench: cell failed: %s\n", code);
        exit(1);
    }

    json_decref(r);
    free(s);

    return t1 - t0;
}


/* wall time of one command, run N times; returns the median in seconds */
static double
bench_command(char *const argv[], int n)
{
    double  *v, t0, med;
    pid_t    pid;
    int      i, status, fd;

    v = calloc(n, sizeof(double));

    for (i = 0; i < n; i++) {
        t0 = bench_now();
        pid = fork();

        if (pid == 0) {
            fd = open("/dev/null", O_WRONLY);
            dup2(fd, 1);
            dup2(fd, 2);
            execv(argv[0], argv);
            _exit(127);
        }

        waitpid(pid, &status, 0);
        v[i] = bench_now() - t0;

        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            free(v);
            return -1;
        }
    }

    med = bench_pct(v, n, 50);
    free(v);

    return med;
}


/* in-process exec of "x = 1" in CPython, per call, via timeit */
static double
bench_inprocess(void)
{
    FILE    *f;
    double   us;

    f = popen("/usr/bin/python3.11 -I -c \"import timeit; "
              "ns = {}; n = 100000; "
              "t = timeit.timeit(lambda: exec(compile('x = 1', '<c>', "
              "'exec'), ns), number=n); print(t / n * 1e6)\"", "r");

    if (f == NULL || fscanf(f, "%lf", &us) != 1) {
        us = -1;
    }

    if (f != NULL) {
        pclose(f);
    }

    return us / 1e6;
}


int
main(int argc, char **argv)
{
    static const struct option  opts[] = {
        { "sandboxd", required_argument, NULL, 's' },
        { "iterations", required_argument, NULL, 'n' },
        { "live", required_argument, NULL, 'l' },
        { "context-mb", required_argument, NULL, 'c' },
        { "no-baselines", no_argument, NULL, 'B' },
        { NULL, 0, NULL, 0 }
    };

    const char      *pool_args[] = { "--pool", "4", NULL };
    const char      *cold_args[] = { "--pool", "0", NULL };
    char             live_max[32];
    const char      *live_args[] = { "--pool", "0", "--max-sandboxes",
                                     live_max, "--memory-mb", "64",
                                     NULL };
    bench_manager_t  m;
    bench_sb_t       sb, idle_sb, *many;
    double          *v, *v2, t0, t1, warm50, warm99, cold50, cold99;
    double           usable50, ping50, eval50, eval99, ctx_text, ctx_json;
    double           runsc, pyc, inproc;
    long             idle_priv, idle_pss, snip_priv, snip_pss, sum_priv;
    long             mem_before, mem_after;
    char            *blob, req[256];
    json_t          *r;
    size_t           blob_len, off;
    int              iters, live, ctx_mb, baselines, c, i, cfd, fd, ok;
    int              nlive;
    FILE            *mf;
    char             line[256];

    iters = 1000;
    live = 1000;
    ctx_mb = 100;
    baselines = 1;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': bench_sandboxd = optarg; break;
        case 'n': iters = atoi(optarg); break;
        case 'l': live = atoi(optarg); break;
        case 'c': ctx_mb = atoi(optarg); break;
        case 'B': baselines = 0; break;
        default:
            fprintf(stderr, "usage: rlm-sandbox-bench [--sandboxd PATH] "
                    "[--iterations N] [--live N] [--context-mb N] "
                    "[--no-baselines]\n");
            return 2;
        }
    }

    signal(SIGPIPE, SIG_IGN);
    v = calloc(iters, sizeof(double));
    v2 = calloc(iters, sizeof(double));

    /* 1. warm acquire, eval round trip, memory */

    bench_start(&m, pool_args);
    cfd = bench_connect(m.control);

    for (i = 0; i < iters; i++) {
        /*
         * steady state: the pool is full and its sandboxes are done
         * jailing; a ping under the same conditions gives the IPC floor
         */
        bench_wait_idle(cfd, 4);
        usleep(10000);
        t0 = bench_now();
        json_decref(bench_rpc(cfd, "{\"op\":\"ping\"}", NULL, 0));
        v2[i] = bench_now() - t0;

        bench_wait_idle(cfd, 4);
        usleep(10000);
        t0 = bench_now();
        bench_acquire(cfd, &sb, NULL);
        v[i] = bench_now() - t0;

        if (!sb.warm) {
            fprintf(stderr, "rlm-sandbox-bench: expected a warm sandbox\n");
            return 1;
        }

        bench_release(cfd, &sb);
    }

    warm50 = bench_pct(v, iters, 50);
    warm99 = bench_pct(v, iters, 99);
    ping50 = bench_pct(v2, iters, 50);

    bench_wait_idle(cfd, 4);
    bench_acquire(cfd, &sb, NULL);
    fd = bench_connect(sb.path);
    bench_exec(fd, "pass");

    for (i = 0; i < iters; i++) {
        v[i] = bench_exec(fd, "x = 1");
    }

    eval50 = bench_pct(v, iters, 50);
    eval99 = bench_pct(v, iters, 99);

    /* memory of an idle pool sandbox, then after a json/regex snippet */

    /* a pool sandbox that has only jailed itself and waits in accept() */

    bench_wait_idle(cfd, 4);
    usleep(200000);
    bench_acquire(cfd, &idle_sb, NULL);
    idle_priv = bench_private_kb(idle_sb.pid);
    idle_pss = bench_smaps(idle_sb.pid, "Pss");
    bench_release(cfd, &idle_sb);

    bench_exec(fd, "import json, re\n"
                   "doc = json.dumps({'items': [{'id': i, 'name': 'n%d' % i}"
                   " for i in range(2000)]})\n"
                   "data = json.loads(doc)\n"
                   "ids = [int(m.group(1)) for m in "
                   "re.finditer(r'\"id\": (\\d+)', doc)]\n"
                   "print(len(data['items']), sum(ids))");
    snip_priv = bench_private_kb(sb.pid);
    snip_pss = bench_smaps(sb.pid, "Pss");

    /* context load throughput */

    blob_len = (size_t) ctx_mb * 1024 * 1024;
    blob = malloc(blob_len + 64);

    for (off = 0; off < blob_len; off++) {
        blob[off] = "abcdefghijklmnopqrstuvwxyz0123456789 \n"[off % 38];
    }

    t0 = bench_now();
    r = bench_rpc(fd, "{\"op\":\"load_context\",\"name\":\"context\","
                  "\"format\":\"text\"}", blob, blob_len);
    t1 = bench_now();
    ok = json_integer_value(json_object_get(r, "bytes")) == (long) blob_len;
    json_decref(r);
    ctx_text = ok ? blob_len / (t1 - t0) / 1e9 : -1;

    /* JSON: a list of 1 KiB documents (strings) of the same total size */
    blob[0] = '[';
    off = 1;

    while (off + 1026 < blob_len) {
        blob[off] = '"';
        memset(blob + off + 1, 'd', 1022);
        blob[off + 1023] = '"';
        blob[off + 1024] = ',';
        off += 1025;
    }

    blob[off - 1] = ']';
    blob_len = off;

    close(fd);
    bench_release(cfd, &sb);
    bench_acquire(cfd, &sb, "{\"memory_mb\":4096}");
    fd = bench_connect(sb.path);

    t0 = bench_now();
    r = bench_rpc(fd, "{\"op\":\"load_context\",\"name\":\"context\","
                  "\"format\":\"json\"}", blob, blob_len);
    t1 = bench_now();
    ok = strcmp(json_string_value(json_object_get(r, "kind")) ?: "", "list")
         == 0;
    json_decref(r);
    ctx_json = ok ? blob_len / (t1 - t0) / 1e9 : -1;
    free(blob);

    close(fd);
    bench_release(cfd, &sb);
    close(cfd);
    bench_stop(&m);

    /* 2. cold create: acquire with an empty pool, then first round trip */

    bench_start(&m, cold_args);
    cfd = bench_connect(m.control);

    for (i = 0; i < iters; i++) {
        t0 = bench_now();
        bench_acquire(cfd, &sb, NULL);
        t1 = bench_now();
        fd = bench_connect(sb.path);
        json_decref(bench_rpc(fd, "{\"op\":\"ping\"}", NULL, 0));
        v[i] = t1 - t0;
        v2[i] = bench_now() - t0;
        close(fd);
        bench_release(cfd, &sb);
    }

    cold50 = bench_pct(v, iters, 50);
    cold99 = bench_pct(v, iters, 99);
    usable50 = bench_pct(v2, iters, 50);
    close(cfd);
    bench_stop(&m);

    /* 3. many live idle sandboxes */

    nlive = 0;
    sum_priv = 0;
    mem_before = mem_after = 0;

    if (live > 0) {
        mf = fopen("/proc/meminfo", "r");
        while (mf && fgets(line, sizeof(line), mf)) {
            if (strncmp(line, "MemAvailable:", 13) == 0) {
                mem_before = atol(line + 13);
            }
        }
        if (mf) {
            fclose(mf);
        }

        snprintf(live_max, sizeof(live_max), "%d", live + 8);
        bench_start(&m, live_args);
        cfd = bench_connect(m.control);
        many = calloc(live, sizeof(bench_sb_t));

        t0 = bench_now();
        for (i = 0; i < live; i++) {
            bench_acquire(cfd, &many[i], NULL);
        }
        t1 = bench_now();

        for (i = 0; i < live; i++) {
            fd = bench_connect(many[i].path);
            r = bench_rpc(fd, "{\"op\":\"exec\",\"code\":\"x = 1\"}", NULL, 0);

            if (strcmp(json_string_value(json_object_get(r, "status")) ?: "",
                       "ok") == 0)
            {
                nlive++;
            }

            json_decref(r);
            close(fd);
            sum_priv += bench_private_kb(many[i].pid);
        }

        mf = fopen("/proc/meminfo", "r");
        while (mf && fgets(line, sizeof(line), mf)) {
            if (strncmp(line, "MemAvailable:", 13) == 0) {
                mem_after = atol(line + 13);
            }
        }
        if (mf) {
            fclose(mf);
        }

        printf("live: %d sandboxes created in %.2f s, %d answered x = 1\n",
               live, t1 - t0, nlive);

        for (i = 0; i < live; i++) {
            snprintf(req, sizeof(req), "{\"op\":\"release\",\"sandbox\":"
                     "\"%s\"}", many[i].sandbox);
            json_decref(bench_rpc(cfd, req, NULL, 0));
        }

        free(many);
        close(cfd);
        bench_stop(&m);
    }

    /* 4. baselines */

    runsc = pyc = inproc = -1;

    if (baselines) {
        char *runsc_argv[] = { "/usr/bin/runsc", "--rootless",
                               "--network=none", "do", "/usr/bin/python3.11",
                               "-c", "x=1", NULL };
        char *py_argv[] = { "/usr/bin/python3.11", "-c", "x=1", NULL };

        runsc = bench_command(runsc_argv, 5);
        pyc = bench_command(py_argv, 20);
        inproc = bench_inprocess();
    }

    /* report */

    printf("\n| measure | rlm-sandboxd | goal |\n|---|---|---|\n");
    printf("| warm acquire p50 / p99 | %.0f us / %.0f us | <= 100 us / "
           "<= 1 ms |\n", warm50 * 1e6, warm99 * 1e6);
    printf("| control `ping` round trip p50 (IPC floor) | %.0f us | |\n",
           ping50 * 1e6);
    printf("| cold create (acquire reply) p50 / p99 | %.2f ms / %.2f ms | "
           "<= 2 ms |\n", cold50 * 1e3, cold99 * 1e3);
    printf("| cold create until first reply (acquire + connect + ping) p50 "
           "| %.2f ms | |\n", usable50 * 1e3);
    printf("| eval `x = 1` round trip p50 / p99 | %.0f us / %.0f us | "
           "<= 200 us |\n", eval50 * 1e6, eval99 * 1e6);
    printf("| idle sandbox private / Pss | %.2f MiB / %.2f MiB | <= 1 MiB "
           "|\n", idle_priv / 1024.0, idle_pss / 1024.0);
    printf("| after json+regex snippet private / Pss | %.2f MiB / %.2f MiB "
           "| <= 4 MiB |\n", snip_priv / 1024.0, snip_pss / 1024.0);

    if (live > 0) {
        printf("| %d live idle sandboxes | %d answered; private sum %.0f "
               "MiB; MemAvailable drop %.0f MiB | 1000 |\n", live, nlive,
               sum_priv / 1024.0, (mem_before - mem_after) / 1024.0);
    }

    printf("| context load, %d MiB text | %.2f GB/s | >= 1 GB/s |\n",
           ctx_mb, ctx_text);
    printf("| context load, %d MiB JSON (list of 1 KiB strings) | %.2f GB/s "
           "| |\n", ctx_mb, ctx_json);

    if (baselines) {
        printf("\n| baseline (same run) | time | rlm-sandboxd | ratio |\n"
               "|---|---|---|---|\n");
        printf("| new session: `runsc --rootless --network=none do "
               "python3.11 -c x=1` | %.1f ms | warm acquire %.0f us | "
               "%.0fx |\n", runsc * 1e3, warm50 * 1e6, runsc / warm50);
        printf("| new session: runsc vs cold create until first reply | "
               "%.1f ms | %.2f ms | %.0fx |\n", runsc * 1e3,
               usable50 * 1e3, runsc / usable50);
        printf("| per cell: fresh `python3.11 -c x=1` | %.1f ms | eval "
               "%.0f us | %.0fx |\n", pyc * 1e3, eval50 * 1e6,
               pyc / eval50);
        printf("| per cell: in-process `exec` (no isolation) | %.1f us | "
               "eval %.0f us | %.1fx slower |\n", inproc * 1e6,
               eval50 * 1e6, eval50 / inproc);
    }

    free(v);
    free(v2);

    return 0;
}
