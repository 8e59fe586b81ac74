/*
 * The sandbox jail: cgroups, namespaces, minimal root, credentials, rlimits
 * and the seccomp filter that every sandbox enters before it accepts work.
 *
 * Build and link (sandbox/jail.mk defines these for sandbox/Makefile):
 *
 *     RLM_JAIL_OBJS = jail.o cgroup.o seccomp.o
 *     RLM_JAIL_LIBS = -lseccomp
 *
 * libseccomp is used only by rlm_jail_init() (the filter is compiled once,
 * in the manager, into a BPF program kept in the conf); a sandbox loads the
 * ready program with one prctl(), so creating a sandbox compiles nothing.
 * jail.mk also builds the C self-test, $(RLM_BUILD)/bin/rlm-jail-selftest
 * (target jail-selftest); t/sandbox/attacks.t runs it when it exists, so
 * please have `make` build it next to rlm-sandboxd.
 *
 * Measured on the 2-core dev VM (rlm-jail-selftest -n 200, a small C
 * parent): cgroup creation + fork ~0.3 ms, rlm_jail_enter ~0.45 ms (of
 * which loading the seccomp filter ~0.2 ms, pivot_root ~0.1 ms), total
 * to "ready" ~1.0 ms p50 with the shared netns, ~1.6 ms with a private
 * netns per sandbox (creating one costs ~0.5 ms; tearing it down more).
 *
 * Calling sequence in the manager (single-threaded, CPython initialised):
 *
 *     rlm_jail_conf_t    conf;
 *     rlm_jail_limits_t  limits;
 *
 *     rlm_jail_conf_default(&conf);
 *     conf.runtime_dir = "/run/rlm-sandboxd";       (must exist, 0755)
 *     conf.cgroup_name = "rlm-sandboxd";            (base cgroup name)
 *     if (rlm_jail_init(&conf, err, sizeof(err)) != 0) { fatal }
 *
 *     rlm_jail_limits_default(&limits);
 *     limits.memory_mb = 256; ...
 *
 *     pid = rlm_jail_fork(&conf, "sbx-42", &limits);
 *     if (pid == 0) {
 *         PyOS_AfterFork_Child();     (any order relative to enter is fine,
 *                                      but enter must run before any
 *                                      untrusted code)
 *         if (rlm_jail_enter(&conf, &limits, channel_fd) != 0) {
 *             write(2, conf.err, strlen(conf.err));  (stderr still open)
 *             _exit(RLM_JAIL_EXIT_SETUP);
 *         }
 *         ... serve channel_fd; never exec, never fork ...
 *     }
 *     ...
 *     oom = rlm_jail_oom_killed(&conf, "sbx-42");   (before release)
 *     rlm_jail_release(&conf, "sbx-42");
 *
 * File descriptors after rlm_jail_enter(): 0, 1 and 2 are /dev/null of the
 * jail (stdin read-only, stdout/stderr write-only), keep_fd (or each fd of
 * rlm_jail_enter_fds()) is kept as is, every other fd is closed.  The REPL
 * runtime must capture output itself (sys.stdout replacement); C-level
 * writes to fd 1/2 are lost.
 *
 * Environment: rlm_jail_enter() empties the C environment (clearenv); a
 * Python os.environ built in the zygote is a copy: clear it in Python
 * (os.environ.clear()) in the child as well, before untrusted code runs.
 * SIGXFSZ is ignored (RLIMIT_FSIZE gives EFBIG, an OSError in Python).
 * umask is 077, cwd is /tmp.
 *
 * What the seccomp filter allows (details: sandbox/seccomp.c and
 * docs/security.md); the runtime must live with these:
 *   - no execve/execveat (EPERM), no fork/vfork/non-thread clone (EPERM);
 *     threads are allowed (clone with CLONE_VM|CLONE_THREAD), capped by the
 *     pids cgroup and RLIMIT_NPROC; clone3 answers ENOSYS (glibc falls back);
 *   - no socket()/socketpair()/bind()/listen()/connect() (EPERM): the
 *     runtime only uses fds it inherited.  Do listen() on the channel socket
 *     before fork (or before rlm_jail_enter).  accept4, recvmsg, sendmsg,
 *     poll, epoll, getsockopt, setsockopt, shutdown are allowed;
 *   - W^X: mmap with PROT_EXEC is allowed only for non-writable file
 *     mappings (dlopen of read-only libraries from the jail root), never
 *     anonymous or writable; mprotect/pkey_mprotect with PROT_EXEC is EPERM;
 *     memfd_create is EPERM.  Lazily imported extension modules therefore
 *     still load (lib-dynload is bound read-only), but importing everything
 *     the runtime needs in the zygote is faster and recommended;
 *   - setitimer, timer_create, alarm, rt_sig*, setrlimit/prlimit64 on self;
 *     but the dispositions of SIGALRM, SIGXCPU and SIGUSR1 cannot be
 *     changed and RLIMIT_CPU cannot be set (EPERM): the runtime installs
 *     its handlers before the jail and times a cell's CPU with a POSIX
 *     CPU-clock timer (timer_create), never with the soft RLIMIT_CPU;
 *   - fadvise64, readahead, mincore, preadv2/pwritev2 with flags, madvise
 *     COLD/PAGEOUT answer EPERM and futexes without FUTEX_PRIVATE_FLAG
 *     ENOSYS: page cache and shared futex keys of the files all jails
 *     share would be covert channels between sessions;
 *   - flock() and fcntl record locks (F_GETLK/SETLK/OFD_*) answer ENOLCK,
 *     F_NOTIFY and leases EPERM: on the read-only files all jails share
 *     they would be covert channels between sessions;
 *   - socket ioctls (0x89xx, 0x8Bxx: SIOCGIFCONF...) answer EPERM: the
 *     channel socket lives in the host's network namespace; FIONBIO,
 *     FIONREAD, FIOCLEX, TCGETS... are allowed; TIOCSTI is EPERM;
 *   - mmap MAP_HUGETLB and madvise MADV_MERGEABLE answer EPERM;
 *   - no /proc and no /sys in the jail (os.listdir("/proc/self/fd") fails).
 *
 * Process model: the sandbox is pid 1 of its own pid namespace, leader of
 * its own session and process group (kill(0) cannot reach the manager's
 * group).  When it exits, the kernel kills every thread left in that
 * namespace.  It gets SIGKILL when the manager (its parent) dies
 * (PR_SET_PDEATHSIG).  Being pid 1, it ignores signals sent from inside
 * its namespace that it has no handler for (kill(getpid(), SIGKILL) from
 * inside is a no-op).
 * Exit status: setup failures before enter exit with RLM_JAIL_EXIT_SETUP;
 * a seccomp violation kills it with SIGSYS (status "crashed", signal 31).
 */

#ifndef _RLM_JAIL_H_INCLUDED_
#define _RLM_JAIL_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


#define RLM_JAIL_EXIT_SETUP      121     /* _exit code on setup failure */

#define RLM_JAIL_MAX_BINDS       16

#define RLM_JAIL_NETNS_NONE      0
#define RLM_JAIL_NETNS_SHARED    1
#define RLM_JAIL_NETNS_PRIVATE   2
#define RLM_JAIL_ERRLEN          256

/*
 * Layers of the jail a manager may be told to run without, where the
 * kernel (or a gVisor sentry) cannot give them: rlm_jail_init() refuses
 * to start when one is missing unless allow_missing names it.
 */
#define RLM_JAIL_LAYER_CGROUPS   0x01    /* memory, pids, cpu cgroups */
#define RLM_JAIL_LAYER_ROOT      0x02    /* the minimal pivot_root root */

/* default credentials: one uid per sandbox from a range, see uid_base */
#define RLM_JAIL_UID_BASE        1500000000u
#define RLM_JAIL_UID_RANGE       65536u


typedef enum {
    RLM_CGROUP_NONE = 0,        /* before init (init fails without one) */
    RLM_CGROUP_V1,              /* separate memory, pids, cpu hierarchies */
    RLM_CGROUP_V2               /* unified hierarchy at cgroup_root */
} rlm_cgroup_version_e;


typedef struct {
    /* set by the caller (rlm_jail_conf_default() fills sane values) */

    const char            *runtime_dir;  /* existing dir; jail root lives
                                            in <runtime_dir>/jail-root */
    const char            *cgroup_root;  /* "/sys/fs/cgroup" */
    const char            *cgroup_name;  /* base name, e.g. "rlm-sandboxd";
                                            unique per manager instance:
                                            rlm_jail_init() kills whatever
                                            runs under a cgroup of that name
                                            (leftovers of a previous run) */
    const char            *hostname;     /* uts name in the jail: "sandbox" */

    /*
     * Credentials.  If uid_range > 0 every sandbox gets its own uid,
     * uid_base + (n % uid_range), n counting forks from a start derived
     * from cgroup_name (gid = uid): sandboxes then do not share
     * RLIMIT_NPROC accounting, signal permissions or keyrings.  If
     * uid_range == 0 every sandbox runs as uid/gid (e.g. 65534 nobody).
     * In the child, between rlm_jail_fork() and rlm_jail_enter(), the
     * chosen ids are in run_uid/run_gid and may be overridden.
     */
    uid_t                  uid_base;
    unsigned               uid_range;
    uid_t                  uid;
    gid_t                  gid;
    uid_t                  run_uid;
    gid_t                  run_gid;

    /* read-only bind mounts into the jail (host path == jail path) */
    const char            *ro_binds[RLM_JAIL_MAX_BINDS];
    unsigned               nro_binds;

    int                    allow_threads;   /* 1 (default) */

    /*
     * Network namespace: RLM_JAIL_NETNS_SHARED (default) puts every
     * sandbox into one empty network namespace (no interface up) made by
     * rlm_jail_init(): joining it costs microseconds where creating one
     * costs 0.5-1 ms.  Sharing is safe only because the seccomp filter
     * refuses socket(): no sandbox can create an endpoint (not even an
     * abstract unix socket) in it.  RLM_JAIL_NETNS_PRIVATE creates one per
     * sandbox; RLM_JAIL_NETNS_NONE keeps the host's (tests only).
     */
    int                    use_netns;

    /*
     * RLM_JAIL_LAYER_* bits that may be missing.  Without cgroups a
     * sandbox keeps its rlimits (AS, NPROC under its own uid, CPU) but
     * has no memory, pids or CPU cgroup.  Without the minimal root it
     * keeps the host's root filesystem, read as its unprivileged uid,
     * and works in a private directory (jail.c, rlm_jail_shared_root()).
     * rlm_jail_init() sets missing.
     */
    unsigned               allow_missing;
    unsigned               missing;

    /* filled by rlm_jail_init() */

    rlm_cgroup_version_e   cgroup_version;
    char                   root_dir[512];   /* <runtime_dir>/jail-root */
    char                   cg_memory[512];  /* parent cgroup dirs; on v2 */
    char                   cg_pids[512];    /* all three are the same   */
    char                   cg_cpu[512];     /* directory                */
    char                   cg_cpuacct[512]; /* v1 cpuacct parent ("" on
                                               v2 or without cpuacct;
                                               cg_cpu if mounted with it) */
    int                    has_memsw;       /* v1 memory.memsw.* exist */
    int                    has_swap_max;    /* v2 memory.swap.max exists */
    unsigned               fork_count;
    void                  *bpf;             /* struct sock_fprog * */
    int                    cap_last;        /* highest capability number */
    int                    pidns_fd;        /* our own pid namespace */
    int                    pidns_clone;     /* no setns() back: clone() */
    int                    netns_fd;        /* the shared empty netns */
    int                    template_ready;  /* jail root template built */

    char                   err[RLM_JAIL_ERRLEN];  /* child-side errors */
    char                   name[64];        /* child: its sandbox name */
} rlm_jail_conf_t;


typedef struct {
    unsigned    memory_mb;      /* cgroup memory limit, swap 0 (0: none) */
    unsigned    as_mb;          /* RLIMIT_AS (0: memory_mb + 512, or none
                                   when memory_mb is 0) */
    unsigned    pids;           /* pids cgroup + RLIMIT_NPROC (threads) */
    unsigned    cpu_s;          /* RLIMIT_CPU soft = hard, whole sandbox
                                   life (0: none); per-cell budgets are
                                   the runtime's job (a CPU-clock timer)
                                   and the manager's */
    unsigned    cpu_pct;        /* cfs quota, 100 = one core (0: none) */
    unsigned    cpu_weight;     /* v2 cpu.weight 1..10000 / v1 shares
                                   = weight * 1024 / 100 (0: default) */
    unsigned    tmpfs_mb;       /* size of /tmp (the cwd) */
    unsigned    nofile;         /* RLIMIT_NOFILE */
    unsigned    fsize_mb;       /* RLIMIT_FSIZE */
    unsigned    stack_mb;       /* RLIMIT_STACK */
} rlm_jail_limits_t;


void rlm_jail_conf_default(rlm_jail_conf_t *conf);
void rlm_jail_limits_default(rlm_jail_limits_t *limits);

/*
 * At manager start, as root: detect the cgroup version, create the parent
 * cgroup(s) <own cgroup>/<cgroup_name> (killing and removing leftovers of a
 * previous run under that name), compile the seccomp filter, and build the
 * read-only template of the jail root at <runtime_dir>/jail-root.
 *
 * NOTE: to build that template without touching the host's mount table,
 * rlm_jail_init() moves the calling process (the manager) into a private
 * mount namespace of its own (unshare(CLONE_NEWNS) + MS_PRIVATE).  The
 * manager sees the same files; mounts it makes are invisible to the host
 * and mounts the host makes later are invisible to it.
 * 0 or -1 with a message in err.
 */
int rlm_jail_init(rlm_jail_conf_t *conf, char *err, size_t errlen);

/*
 * Create cgroup <name> with the limits and fork the child into a new pid
 * namespace; the child becomes a session leader, joins the cgroup, then
 * new mount, ipc, uts and cgroup namespaces and the sandboxes' network
 * namespace (see use_netns).  Returns 0 in the child, the child's pid in
 * the parent,
 * -1 on error (errno set, cgroup removed).  The child is not jailed yet:
 * call rlm_jail_enter() in it.  name: [A-Za-z0-9_.-], at most 64 bytes.
 */
pid_t rlm_jail_fork(rlm_jail_conf_t *conf, const char *name,
    const rlm_jail_limits_t *limits);

/*
 * In the child: build the root, pivot into it, hostname, rlimits,
 * credentials, capabilities, no_new_privs, pdeathsig, fds, environment,
 * seccomp (last).  0 on success, -1 with conf->err set.  On -1 the child
 * must _exit(RLM_JAIL_EXIT_SETUP): it is in an undefined half-jailed state.
 * keep_fd may be -1.
 */
int rlm_jail_enter(rlm_jail_conf_t *conf, const rlm_jail_limits_t *limits,
    int keep_fd);
int rlm_jail_enter_fds(rlm_jail_conf_t *conf,
    const rlm_jail_limits_t *limits, const int *keep_fds, int nkeep);

/* 1 if the cgroup <name> recorded an OOM kill, 0 if not, -1 on error */
int rlm_jail_oom_killed(rlm_jail_conf_t *conf, const char *name);

/* kill everything in cgroup <name> and remove it; 0 or -1 */
int rlm_jail_release(rlm_jail_conf_t *conf, const char *name);

/* number of processes in cgroup <name> (-1 if it does not exist) */
int rlm_jail_count(rlm_jail_conf_t *conf, const char *name);

/*
 * SIGKILL every process of cgroup <name> now, without waiting for them
 * and without removing the cgroup (rlm_jail_release() does that after
 * the reap).  Processes signalled (0 when v2's cgroup.kill did it), or -1.
 */
int rlm_jail_kill(rlm_jail_conf_t *conf, const char *name);

/*
 * CPU time used so far by the whole sandbox <name> (every process and
 * thread that has been in its cgroup), in microseconds: v2 cpu.stat
 * usage_usec, v1 cpuacct.usage.  0, or -1 (errno ENOTSUP: no CPU
 * accounting on this host, the caller may sum /proc instead; others:
 * the cgroup is gone).
 */
int rlm_jail_cpu_usage(rlm_jail_conf_t *conf, const char *name,
    uint64_t *usec);

/*
 * At manager exit: kill and remove every sandbox cgroup and the parent,
 * unmount and remove the jail root template (<runtime_dir>/jail-root).
 */
void rlm_jail_cleanup(rlm_jail_conf_t *conf);


#endif /* _RLM_JAIL_H_INCLUDED_ */
