/*
 * rlm-sandboxd: the sandbox manager.  Initialises CPython once (the
 * zygote), then serves the control socket with an epoll loop, forks jailed
 * sandboxes from the zygote, keeps a warm pool of them, reaps them and
 * records why each died.  See docs/sandbox.md and docs/protocol.md.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

#include "rlm_manager.h"
#include "rlm_janitor.h"
#include "rlm_frame.h"
#include "rlm_watch.h"


#define RLM_LOCK_WAIT_MS  10000


extern char **environ;

rlm_conf_t  rlm_conf;


#if defined(__SANITIZE_ADDRESS__)

const char *__asan_default_options(void);

/*
 * ASan builds: CPython is never finalized, so its heap would be reported
 * as leaked at exit; and a crash inside a sandbox must stay a real signal
 * (the tests check it), not an ASan report and exit code 1.
 */
const char *
__asan_default_options(void)
{
    return "detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:"
           "handle_abort=0:handle_sigill=0";
}

#endif


void
rlm_log(const char *fmt, ...)
{
    char       buf[1024];
    va_list    ap;
    struct tm  tm;
    time_t     now;
    int        n;

    now = time(NULL);
    gmtime_r(&now, &tm);
    n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ rlm-sandboxd: ", &tm);

    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
    va_end(ap);

    n = strlen(buf);
    buf[n++] = '\n';

    if (write(2, buf, n) < 0) {
        /* nowhere else to say it */
    }
}


/* dst = a + b, refusing to truncate */
static void
rlm_join(char *dst, size_t len, const char *a, const char *b)
{
    size_t  la, lb;

    la = strlen(a);
    lb = strlen(b);

    if (la + lb + 1 > len) {
        rlm_log("path too long: %s%s", a, b);
        exit(1);
    }

    memcpy(dst, a, la);
    memcpy(dst + la, b, lb + 1);
}


/* "cgroups,root" -> RLM_JAIL_LAYER_* bits */

static int
rlm_parse_layers(const char *s, unsigned *out)
{
    size_t  n;

    while (*s != '\0') {
        n = strcspn(s, ",");

        if (n == 7 && strncmp(s, "cgroups", n) == 0) {
            *out |= RLM_JAIL_LAYER_CGROUPS;

        } else if (n == 4 && strncmp(s, "root", n) == 0) {
            *out |= RLM_JAIL_LAYER_ROOT;

        } else {
            return -1;
        }

        s += n;
        if (*s == ',') {
            s++;
        }
    }

    return 0;
}


static void
rlm_usage(FILE *f)
{
    fprintf(f,
"usage: rlm-sandboxd [options]\n"
"  --runtime-dir DIR      sockets, lock and jail root (/run/rlm-sandboxd)\n"
"  --pool N               warm pool size (4)\n"
"  --max-sandboxes N      cap on idle + live sandboxes (256)\n"
"  --max-memory-mb N      cap on the sum of memory limits (0: none)\n"
"  --socket-owner U:G     owner of the sockets (user/group names or ids)\n"
"  --allow-module NAME    preload one more stdlib module (repeatable)\n"
"  --cpu-s N              default per-cell CPU seconds (10)\n"
"  --wall-ms N            default per-cell wall time (30000)\n"
"  --memory-mb N          default sandbox memory (512)\n"
"  --pids N               default processes+threads per sandbox (32)\n"
"  --output-bytes N       default output cap per cell (1048576)\n"
"  --tmpfs-mb N           default size of the private /tmp (64)\n"
"  --session-cpu-s N      CPU seconds over a sandbox's life (3600, 0: none)\n"
"  --max-blob-mb N        largest context blob accepted (1024)\n"
"  --uid-range N          one uid per sandbox from a range of N (65536;\n"
"                         0: all run as 65534)\n"
"  --cgroup-name NAME     parent cgroup name (derived from runtime dir)\n"
"  --allow-missing L,...  run without these jail layers where they cannot\n"
"                         work (gVisor): cgroups, root (refused without)\n"
"  --ready-fd N           write one byte to fd N once serving\n"
"  --keep-on-orphan       keep running when the parent process dies\n"
"  --foreground           stay attached, log to stderr (always the case)\n"
"  --verbose              log every sandbox death\n");
}


static int
rlm_parse_uint(const char *s, unsigned *out)
{
    char           *end;
    unsigned long   v;

    errno = 0;
    v = strtoul(s, &end, 10);

    if (errno || end == s || *end != '\0' || v > UINT_MAX) {
        return -1;
    }

    *out = (unsigned) v;
    return 0;
}


static int
rlm_parse_owner(const char *s, uid_t *uid, gid_t *gid)
{
    char            user[128], *colon;
    const char     *group;
    struct passwd  *pw;
    struct group   *gr;
    unsigned        n;

    snprintf(user, sizeof(user), "%s", s);
    colon = strchr(user, ':');

    if (colon == NULL) {
        return -1;
    }

    *colon = '\0';
    group = colon + 1;

    if (rlm_parse_uint(user, &n) == 0) {
        *uid = n;

    } else {
        pw = getpwnam(user);
        if (pw == NULL) {
            return -1;
        }

        *uid = pw->pw_uid;
    }

    if (rlm_parse_uint(group, &n) == 0) {
        *gid = n;

    } else {
        gr = getgrnam(group);
        if (gr == NULL) {
            return -1;
        }

        *gid = gr->gr_gid;
    }

    return 0;
}


static void
rlm_fatal(const char *what)
{
    rlm_log("%s", what);
    exit(1);
}


enum {
    OPT_RUNTIME = 256, OPT_POOL, OPT_MAX_SB, OPT_MAX_MEM, OPT_OWNER,
    OPT_ALLOW, OPT_CPU, OPT_WALL, OPT_MEM, OPT_PIDS, OPT_OUTPUT, OPT_TMPFS,
    OPT_SCPU, OPT_BLOB, OPT_UIDRANGE, OPT_CGNAME, OPT_READY, OPT_ORPHAN,
    OPT_FG, OPT_VERBOSE, OPT_HELP, OPT_MISSING
};


static void
rlm_parse_args(int argc, char **argv, rlm_conf_t *conf)
{
    static const struct option  opts[] = {
        { "runtime-dir", required_argument, NULL, OPT_RUNTIME },
        { "pool", required_argument, NULL, OPT_POOL },
        { "max-sandboxes", required_argument, NULL, OPT_MAX_SB },
        { "max-memory-mb", required_argument, NULL, OPT_MAX_MEM },
        { "socket-owner", required_argument, NULL, OPT_OWNER },
        { "allow-module", required_argument, NULL, OPT_ALLOW },
        { "cpu-s", required_argument, NULL, OPT_CPU },
        { "wall-ms", required_argument, NULL, OPT_WALL },
        { "memory-mb", required_argument, NULL, OPT_MEM },
        { "pids", required_argument, NULL, OPT_PIDS },
        { "output-bytes", required_argument, NULL, OPT_OUTPUT },
        { "tmpfs-mb", required_argument, NULL, OPT_TMPFS },
        { "session-cpu-s", required_argument, NULL, OPT_SCPU },
        { "max-blob-mb", required_argument, NULL, OPT_BLOB },
        { "uid-range", required_argument, NULL, OPT_UIDRANGE },
        { "cgroup-name", required_argument, NULL, OPT_CGNAME },
        { "allow-missing", required_argument, NULL, OPT_MISSING },
        { "ready-fd", required_argument, NULL, OPT_READY },
        { "keep-on-orphan", no_argument, NULL, OPT_ORPHAN },
        { "foreground", no_argument, NULL, OPT_FG },
        { "verbose", no_argument, NULL, OPT_VERBOSE },
        { "help", no_argument, NULL, OPT_HELP },
        { NULL, 0, NULL, 0 }
    };

    static char  cgname[64];
    unsigned     n, *target;
    int          c;

    for ( ;; ) {
        c = getopt_long(argc, argv, "", opts, NULL);
        if (c == -1) {
            break;
        }

        target = NULL;

        switch (c) {
        case OPT_RUNTIME:
            if (strlen(optarg) >= sizeof(conf->runtime_dir) - 40) {
                rlm_fatal("--runtime-dir is too long");
            }
            snprintf(conf->runtime_dir, sizeof(conf->runtime_dir), "%s",
                     optarg);
            break;
        case OPT_POOL: target = &conf->pool; break;
        case OPT_MAX_SB: target = &conf->max_sandboxes; break;
        case OPT_MAX_MEM: target = &conf->max_memory_mb; break;
        case OPT_CPU: target = &conf->defaults.cpu_s; break;
        case OPT_WALL: target = &conf->defaults.wall_ms; break;
        case OPT_MEM: target = &conf->defaults.memory_mb; break;
        case OPT_PIDS: target = &conf->defaults.pids; break;
        case OPT_OUTPUT: target = &conf->defaults.output_bytes; break;
        case OPT_TMPFS: target = &conf->defaults.tmpfs_mb; break;
        case OPT_SCPU: target = &conf->defaults.session_cpu_s; break;
        case OPT_UIDRANGE: target = &conf->jail.uid_range; break;

        case OPT_BLOB:
            if (rlm_parse_uint(optarg, &n) != 0 || n == 0 || n > 4095) {
                rlm_fatal("--max-blob-mb must be 1..4095");
            }
            conf->max_blob = n * 1024u * 1024u;
            break;

        case OPT_OWNER:
            if (rlm_parse_owner(optarg, &conf->sock_uid, &conf->sock_gid)
                != 0)
            {
                rlm_fatal("--socket-owner needs user:group");
            }
            conf->sock_owner_set = 1;
            break;

        case OPT_ALLOW:
            if (conf->nallow == RLM_MAX_ALLOW) {
                rlm_fatal("too many --allow-module");
            }
            conf->allow[conf->nallow++] = optarg;
            break;

        case OPT_MISSING:
            if (rlm_parse_layers(optarg, &conf->jail.allow_missing) != 0) {
                rlm_fatal("--allow-missing takes cgroups and/or root");
            }
            break;

        case OPT_CGNAME:
            snprintf(cgname, sizeof(cgname), "%s", optarg);
            conf->jail.cgroup_name = cgname;
            break;

        case OPT_READY:
            if (rlm_parse_uint(optarg, &n) != 0) {
                rlm_fatal("--ready-fd needs a number");
            }
            conf->ready_fd = (int) n;
            break;

        case OPT_ORPHAN: conf->keep_on_orphan = 1; break;
        case OPT_FG: break;
        case OPT_VERBOSE: conf->verbose = 1; break;

        case OPT_HELP:
            rlm_usage(stdout);
            exit(0);

        default:
            rlm_usage(stderr);
            exit(2);
        }

        if (target != NULL && rlm_parse_uint(optarg, target) != 0) {
            rlm_log("bad number for --%s: %s", opts[c - OPT_RUNTIME].name,
                    optarg);
            exit(2);
        }
    }

    if (optind < argc) {
        rlm_usage(stderr);
        exit(2);
    }
}


/* drop everything in <runtime_dir>/s left by a previous run */
static void
rlm_clean_sockets(const char *dir)
{
    DIR            *d;
    struct dirent  *de;
    char            path[600];

    d = opendir(dir);
    if (d == NULL) {
        return;
    }

    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') {
            continue;
        }

        if (strlen(dir) + strlen(de->d_name) + 2 > sizeof(path)) {
            continue;
        }

        strcpy(path, dir);
        strcat(path, "/");
        strcat(path, de->d_name);
        unlink(path);
    }

    closedir(d);
}


static uint32_t
rlm_fnv1a(const char *s)
{
    uint32_t  h;

    h = 2166136261u;

    while (*s) {
        h ^= (unsigned char) *s++;
        h *= 16777619u;
    }

    return h;
}


static int
rlm_env_allowed(const char *e)
{
    /* sanitizer settings of test builds; never secrets */
    return strncmp(e, "ASAN_OPTIONS=", 13) == 0
           || strncmp(e, "UBSAN_OPTIONS=", 14) == 0
           || strncmp(e, "LSAN_OPTIONS=", 13) == 0;
}


static void
rlm_scrub_environment(char **argv)
{
    char      *keep[4];
    unsigned   i, n, other;

    /*
     * The manager must hold no secret: if we were started with any
     * environment, start again without it (the strings would otherwise
     * stay in our memory and in every forked sandbox).
     */

    if (environ == NULL) {
        return;
    }

    n = 0;
    other = 0;

    for (i = 0; environ[i] != NULL; i++) {
        if (rlm_env_allowed(environ[i]) && n < 3) {
            keep[n++] = environ[i];

        } else {
            other++;
        }
    }

    if (other == 0) {
        return;
    }

    keep[n] = NULL;
    execve("/proc/self/exe", argv, keep);
    rlm_fatal("cannot re-exec with an empty environment");
}


/*
 * The runtime directory is ours alone.  A manager that was just told to
 * stop (nginx restarted) may take a few seconds to reap its sandboxes and
 * free the lock: wait for it rather than fail at once.
 */
static int
rlm_lock_runtime(int fd, const char *dir)
{
    int  i;

    for (i = 0; i < RLM_LOCK_WAIT_MS / 50; i++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            return 0;
        }

        if (errno != EWOULDBLOCK && errno != EINTR) {
            return -1;
        }

        if (i == 0) {
            rlm_log("waiting for the rlm-sandboxd on %s to exit", dir);
        }

        usleep(50 * 1000);
    }

    return -1;
}


int
main(int argc, char **argv)
{
    static char          cgname[64];
    rlm_conf_t          *conf;
    struct epoll_event   evs[64];
    struct signalfd_siginfo  si;
    sigset_t             mask;
    struct rlimit        rl;
    char                 err[512], path[PATH_MAX];
    pid_t                ppid;
    int                  epfd, sfd, lockfd, n, i, timeout, stop, want;
    uint64_t             refill_due;
    uint32_t             type, idx;

    rlm_scrub_environment(argv);

    ppid = getppid();

    conf = &rlm_conf;
    memset(conf, 0, sizeof(*conf));
    rlm_jail_conf_default(&conf->jail);

    snprintf(conf->runtime_dir, sizeof(conf->runtime_dir),
             "/run/rlm-sandboxd");
    conf->pool = 4;
    conf->max_sandboxes = 256;
    conf->max_blob = RLM_FRAME_BLOB_MAX;
    conf->ready_fd = -1;
    conf->defaults.cpu_s = 10;
    conf->defaults.wall_ms = 30000;
    conf->defaults.memory_mb = 512;
    conf->defaults.pids = 32;
    conf->defaults.output_bytes = 1 << 20;
    conf->defaults.tmpfs_mb = 64;
    conf->defaults.session_cpu_s = 3600;

    rlm_parse_args(argc, argv, conf);

    if (!conf->keep_on_orphan) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);

        if (getppid() != ppid) {
            rlm_fatal("parent died during start");
        }
    }

    /* one fd per control client: take the whole hard limit */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    if (conf->max_sandboxes == 0 || conf->pool > conf->max_sandboxes) {
        rlm_fatal("--pool must not exceed --max-sandboxes (>= 1)");
    }

    /* runtime directory, lock against a second manager, leftovers */

    if (mkdir(conf->runtime_dir, 0755) != 0 && errno != EEXIST) {
        rlm_log("mkdir %s: %s", conf->runtime_dir, strerror(errno));
        return 1;
    }

    if (realpath(conf->runtime_dir, path) != NULL) {
        rlm_join(conf->runtime_dir, sizeof(conf->runtime_dir) - 40, path,
                 "");
    }

    rlm_join(path, sizeof(path), conf->runtime_dir, "/manager.lock");
    lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

    if (lockfd < 0 || rlm_lock_runtime(lockfd, conf->runtime_dir) != 0) {
        rlm_log("another rlm-sandboxd runs on %s", conf->runtime_dir);
        return 1;
    }

    rlm_join(conf->sock_dir, sizeof(conf->sock_dir), conf->runtime_dir,
             "/s");
    rlm_join(conf->control_path, sizeof(conf->control_path),
             conf->runtime_dir, "/control.sock");

    if (mkdir(conf->sock_dir, 0755) != 0 && errno != EEXIST) {
        rlm_log("mkdir %s: %s", conf->sock_dir, strerror(errno));
        return 1;
    }

    rlm_clean_sockets(conf->sock_dir);

    if (conf->jail.cgroup_name == NULL
        || strcmp(conf->jail.cgroup_name, "rlm-sandboxd") == 0)
    {
        /* one parent cgroup per runtime dir: managers do not collide */
        snprintf(cgname, sizeof(cgname), "rlm-sandboxd-%08x",
                 rlm_fnv1a(conf->runtime_dir));
        conf->jail.cgroup_name = cgname;
    }

    conf->jail.runtime_dir = conf->runtime_dir;

    if (rlm_jail_init(&conf->jail, err, sizeof(err)) != 0) {
        rlm_log("jail init: %s", err);
        return 1;
    }

    if (conf->jail.missing) {
        rlm_log("running without the jail's%s%s, as "
                "rlm_sandbox_allow_missing allows",
                (conf->jail.missing & RLM_JAIL_LAYER_CGROUPS)
                    ? " cgroups" : "",
                (conf->jail.missing & RLM_JAIL_LAYER_ROOT)
                    ? " minimal root" : "");
    }

    /* before CPython: the helper stays a small process */
    if (rlm_janitor_start(&conf->jail) != 0) {
        rlm_log("no cgroup janitor (%s): the manager removes cgroups",
                strerror(errno));
    }

    if (rlm_zygote_init(conf, err, sizeof(err)) != 0) {
        rlm_log("zygote: %s", err);
        return 1;
    }

    if (rlm_pool_init(conf) != 0 || rlm_watch_init(conf) != 0) {
        rlm_fatal("out of memory");
    }

    /* signals arrive through a signalfd; the loop never runs handlers */

    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigprocmask(SIG_BLOCK, &mask, NULL);

    sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);

    if (sfd < 0 || epfd < 0) {
        rlm_fatal("signalfd/epoll failed");
    }

    evs[0].events = EPOLLIN;
    evs[0].data.u64 = rlm_ev_pack(RLM_EV_SIGNAL, 0);
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &evs[0]);

    if (rlm_control_init(conf, epfd) != 0) {
        return 1;
    }

    rlm_log("serving %s (pid %d, pool %u, max %u, cgroups v%d)",
            conf->control_path, (int) getpid(), conf->pool,
            conf->max_sandboxes, (int) conf->jail.cgroup_version);

    if (conf->ready_fd >= 0) {
        if (write(conf->ready_fd, "R", 1) < 0) {
            /* the starter went away; the orphan check handles it */
        }

        close(conf->ready_fd);
        conf->ready_fd = -1;
    }

    stop = 0;
    refill_due = 0;

    while (!stop) {
        /*
         * Refill forks only in a quiet moment (no events for 1-5 ms, see
         * rlm_pool_refill_quiet_ms()), so a fork never delays the reply to
         * a request that just arrived; under constant load it still runs
         * every 20 ms.
         */

        want = rlm_pool_wants_refill();
        timeout = want ? rlm_pool_refill_quiet_ms() : 1000;

        /* CPU watches sample every RLM_WATCH_PERIOD_MS, if there are any */
        timeout = rlm_watch_timeout(timeout);

        if (want && refill_due == 0) {
            refill_due = rlm_now_us() + 20000;
        }

        n = epoll_wait(epfd, evs, 64, timeout);

        if (n < 0 && errno != EINTR) {
            rlm_log("epoll_wait: %s", strerror(errno));
            break;
        }

        for (i = 0; i < n; i++) {
            type = (uint32_t) (evs[i].data.u64 >> 32);
            idx = (uint32_t) evs[i].data.u64;

            switch (type) {
            case RLM_EV_LISTEN:
                rlm_control_accept();
                break;

            case RLM_EV_SIGNAL:
                while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
                    if (si.ssi_signo == SIGCHLD) {
                        continue;
                    }

                    rlm_log("signal %u: shutting down", si.ssi_signo);
                    stop = 1;
                }

                rlm_pool_reap();
                break;

            default:
                rlm_control_event(idx, evs[i].events);
                break;
            }
        }

        /* on every turn: a busy loop may never time out */
        rlm_watch_check();

        if (!conf->keep_on_orphan && getppid() != ppid) {
            rlm_log("parent %d is gone: shutting down", (int) ppid);
            break;
        }

        /* at most one fork per turn */

        if (!stop && want && (n == 0 || rlm_now_us() >= refill_due)) {
            refill_due = 0;
            rlm_pool_refill();
        }
    }

    rlm_control_close_all();
    rlm_janitor_stop();
    rlm_pool_shutdown();
    unlink(path);
    close(lockfd);

    return 0;
}
