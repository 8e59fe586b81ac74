/*
 * The seccomp-bpf filter of a sandbox, built with libseccomp.
 *
 * Policy: an allowlist; anything not listed kills the whole sandbox
 * (SECCOMP_RET_KILL_PROCESS, seen by the manager as SIGSYS).  Calls that
 * Python or glibc make as ordinary probes, or that an honest program may
 * try and should see fail cleanly (exec, fork, socket, ...), get an errno
 * instead.  Only the native x86_64 ABI is accepted: i386 (int 0x80) and
 * x32 system calls kill.
 *
 * Two filters are installed.  The main one holds the policy.  The second
 * one accepts everything except a few argument values (ioctl and fcntl
 * requests, the signals and the rlimit the time limits rely on, page
 * cache and futex variants that reach other sandboxes): libseccomp cannot
 * express "allow ioctl except TIOCSTI" in one filter with a 32-bit safe
 * comparison, and the kernel applies the most restrictive answer of all
 * installed filters.
 *
 * The filters are compiled once in the manager and exported as BPF; the
 * sandbox only hands the ready programs to the kernel.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "seccomp.h"


typedef struct {
    struct sock_fprog  main;
    struct sock_fprog  args;
} rlm_seccomp_progs_t;


/*
 * Argument guards of the second filter: a call is refused with err when
 * argument "arg" compares true (op with datums a and b) and, if set_arg
 * is not -1, argument set_arg is not NULL (the call sets something; a
 * mere query passes NULL there and stays allowed).
 */

typedef struct {
    int                syscall;
    int                err;
    unsigned           arg;
    enum scmp_compare  op;
    scmp_datum_t       a;
    scmp_datum_t       b;
    int                set_arg;
} rlm_seccomp_guard_t;

/* the low 32 bits equal v: how the kernel reads an int argument */
#define RLM_IS(v)          SCMP_CMP_MASKED_EQ, 0xffffffffUL, (v)
/* any bit set, high bits included (refusing more is harmless) */
#define RLM_NONZERO        SCMP_CMP_NE, 0, 0
/* the given bit is clear */
#define RLM_WITHOUT(bit)   SCMP_CMP_MASKED_EQ, (bit), 0


/* allowed without conditions */
static const char *rlm_seccomp_allow[] = {
    /* files and fds (the jail root is read-only, /tmp is the sandbox's) */
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv",
    "pwritev", "preadv2", "pwritev2", "open", "openat", "close",
    "close_range", "dup", "dup2", "dup3", "fcntl", "fsync",
    "fdatasync", "ftruncate", "truncate", "fallocate", "lseek",
    "getdents", "getdents64", "stat", "fstat", "lstat", "newfstatat",
    "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2",
    "readlink", "readlinkat", "getcwd", "chdir", "fchdir", "mkdir",
    "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
    "renameat2", "link", "linkat", "symlink", "symlinkat", "chmod",
    "fchmod", "fchmodat", "chown", "fchown", "fchownat", "lchown", "umask",
    "utime", "utimes", "utimensat", "futimesat", "pipe", "pipe2",
    "copy_file_range", "sendfile", "splice", "tee", "sync_file_range",
    "ioctl",

    /* waiting */
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd",
    "eventfd2", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    "signalfd", "signalfd4",

    /* the inherited channel (no new sockets: see rlm_seccomp_eperm) */
    "accept", "accept4", "recvfrom", "recvmsg", "recvmmsg", "sendto",
    "sendmsg", "sendmmsg", "shutdown", "getsockname", "getpeername",
    "getsockopt", "setsockopt",

    /* time and timers (wall and CPU limits of a cell) */
    "alarm", "setitimer", "getitimer", "timer_create", "timer_settime",
    "timer_gettime", "timer_getoverrun", "timer_delete", "clock_gettime",
    "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",

    /* signals; the pid namespace confines kill() to the sandbox */
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
    "rt_sigtimedwait", "rt_sigsuspend", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "sigaltstack", "kill", "tgkill", "tkill", "pause",
    "restart_syscall",

    /* identity and process state */
    "exit", "exit_group", "getpid", "gettid", "getppid", "getuid",
    "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
    "getpgid", "getpgrp", "getsid", "wait4", "waitid", "uname",
    "getrandom", "getcpu", "getrlimit", "setrlimit", "getrusage", "times",
    "getpriority", "setpriority", "sched_yield", "sched_getaffinity",
    "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
    "sched_get_priority_min", "sched_rr_get_interval", "capget",

    /* memory (mmap and mprotect are conditional, below) */
    "brk", "munmap", "mremap", "madvise", "msync",

    /* threads */
    "futex", "set_robust_list", "set_tid_address", "rseq",

    NULL
};


/* refused with EPERM: they fail cleanly, the sandbox goes on */
static const char *rlm_seccomp_eperm[] = {
    "execve", "execveat", "fork", "vfork",
    "socket", "socketpair", "bind", "listen", "connect",
    "memfd_create", "memfd_secret",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setfsuid", "setfsgid", "setsid", "setpgid", "capset",
    "mknod", "mknodat", "chroot", "sched_setscheduler", "sched_setparam",
    "sched_setaffinity", "mlock", "mlock2", "mlockall", "munlock",
    "munlockall", "inotify_init", "inotify_init1", "inotify_add_watch",
    "inotify_rm_watch",
    NULL
};


/*
 * Page cache hints, refused with EPERM.  The read-only files every jail
 * shares (the stdlib, the libraries) have one page cache on the host, so
 * its state is a covert channel between sessions: A evicts pages of a
 * shared file (fadvise DONTNEED), B tests which are resident (preadv2
 * with RWF_NOWAIT, mincore); measured: 32-bit messages came through
 * exactly.  readahead only loads pages, but nothing needs it either.
 * preadv2/pwritev2 with flags and madvise COLD/PAGEOUT are refused in
 * the second filter.  No Python module of the stdlib calls these.
 */
static const char *rlm_seccomp_pagecache[] = {
    "fadvise64", "readahead", "mincore",
    NULL
};


/* answered ENOSYS: glibc and Python fall back */
static const char *rlm_seccomp_enosys[] = {
    "clone3", "membarrier", "sysinfo", "get_mempolicy", "set_mempolicy",
    "mbind", "statmount", "listmount", "futex_waitv",
    NULL
};


/*
 * answered ENOLCK: a lock on a file every jail shares (the read-only
 * stdlib) would be a covert channel between sessions; fcntl locks are
 * refused in the second filter for the same reason.
 */
static const char *rlm_seccomp_enolck[] = {
    "flock",
    NULL
};


/* answered EOPNOTSUPP: shutil and friends treat it as "no xattrs" */
static const char *rlm_seccomp_enotsup[] = {
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
    "flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
    "lremovexattr", "fremovexattr",
    NULL
};


/* prctl options a sandbox may use; every other one kills */
static const unsigned long  rlm_seccomp_prctl_ok[] = {
    PR_SET_NAME, PR_GET_NAME, PR_GET_DUMPABLE, PR_GET_SECCOMP,
    PR_GET_NO_NEW_PRIVS, PR_CAPBSET_READ, PR_GET_PDEATHSIG,
    PR_GET_TIMERSLACK, 0x53564d41 /* PR_SET_VMA: glibc names mappings */
};


#define RLM_CLONE_NS_FLAGS                                                    \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER               \
     | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP)


static int rlm_seccomp_names(scmp_filter_ctx ctx, const char **names,
    uint32_t action);
static int rlm_seccomp_rules(scmp_filter_ctx ctx, int allow_threads);
static int rlm_seccomp_arg_rules(scmp_filter_ctx ctx);
static int rlm_seccomp_guards(scmp_filter_ctx ctx,
    const rlm_seccomp_guard_t *g, size_t n);
static int rlm_seccomp_export(scmp_filter_ctx ctx, struct sock_fprog *prog);


static int
rlm_seccomp_names(scmp_filter_ctx ctx, const char **names, uint32_t action)
{
    int  nr, rc;

    for ( /* void */ ; *names != NULL; names++) {
        nr = seccomp_syscall_resolve_name(*names);
        if (nr == __NR_SCMP_ERROR) {
            /* unknown to this libseccomp: stays at the default (kill) */
            continue;
        }

        rc = seccomp_rule_add(ctx, action, nr, 0);
        if (rc != 0) {
            errno = -rc;
            return -1;
        }
    }

    return 0;
}


static int
rlm_seccomp_rules(scmp_filter_ctx ctx, int allow_threads)
{
    int       rc;
    size_t    i;
    uint32_t  eperm;

    eperm = SCMP_ACT_ERRNO(EPERM);

    if (rlm_seccomp_names(ctx, rlm_seccomp_allow, SCMP_ACT_ALLOW) != 0
        || rlm_seccomp_names(ctx, rlm_seccomp_eperm, eperm) != 0
        || rlm_seccomp_names(ctx, rlm_seccomp_enosys,
                             SCMP_ACT_ERRNO(ENOSYS)) != 0
        || rlm_seccomp_names(ctx, rlm_seccomp_enotsup,
                             SCMP_ACT_ERRNO(EOPNOTSUPP)) != 0
        || rlm_seccomp_names(ctx, rlm_seccomp_enolck,
                             SCMP_ACT_ERRNO(ENOLCK)) != 0
        || rlm_seccomp_names(ctx, rlm_seccomp_pagecache, eperm) != 0)
    {
        return -1;
    }

    /*
     * W^X.  mmap: anything without PROT_EXEC; PROT_EXEC only for a
     * non-writable file mapping (dlopen of the read-only jail root; every
     * writable mount of the jail is noexec, memfd_create is refused).
     * Anonymous or writable executable mappings: EPERM.
     */

    rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
                          SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 2,
                 SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC | PROT_WRITE,
                         PROT_EXEC),
                 SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS, 0));
    }
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(mmap), 1,
                 SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC | PROT_WRITE,
                         PROT_EXEC | PROT_WRITE));
    }
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(mmap), 2,
                 SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC | PROT_WRITE,
                         PROT_EXEC),
                 SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS, MAP_ANONYMOUS));
    }

    /* mprotect never adds PROT_EXEC */
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
                              SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
    }
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(mprotect), 1,
                              SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC,
                                      PROT_EXEC));
    }
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(pkey_mprotect),
                              1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
    }
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(pkey_mprotect), 1,
                              SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC,
                                      PROT_EXEC));
    }

    /*
     * clone: only threads (CLONE_VM | CLONE_THREAD, no namespace flag).
     * A new process (fork, vfork, posix_spawn) gets EPERM; namespace flags
     * on a thread kill.  The kernel reads only the low 32 bits of the
     * flags, and so do these masks.
     */

    if (rc == 0) {
        rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    }
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, allow_threads ? SCMP_ACT_ALLOW : eperm,
                 SCMP_SYS(clone), 1,
                 SCMP_A0(SCMP_CMP_MASKED_EQ,
                         CLONE_THREAD | CLONE_VM | RLM_CLONE_NS_FLAGS,
                         CLONE_THREAD | CLONE_VM));
    }

    /* resource limits of the sandbox itself only */
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prlimit64), 1,
                              SCMP_A0(SCMP_CMP_EQ, 0));
    }
    if (rc == 0) {
        rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(prlimit64), 1,
                              SCMP_A0(SCMP_CMP_NE, 0));
    }

    for (i = 0; rc == 0 && i < sizeof(rlm_seccomp_prctl_ok)
                                / sizeof(rlm_seccomp_prctl_ok[0]); i++)
    {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
                              SCMP_A0(SCMP_CMP_EQ, rlm_seccomp_prctl_ok[i]));
    }

    if (rc != 0) {
        errno = -rc;
        return -1;
    }

    return 0;
}


/*
 * The second filter: everything is allowed here (the main filter decides)
 * except these argument values, refused with an errno.  Request numbers
 * are compared on their low 32 bits, as the kernel reads them.
 */

static const struct {
    int            syscall;
    int            err;
    unsigned long  mask;
    unsigned long  value;
} rlm_seccomp_arg_refused[] = {
    /* TIOCSTI injects input into a terminal; TIOCLINUX drives consoles;
     * TIOCSETD loads line disciplines */
    { SCMP_SYS(ioctl), EPERM, 0xffffffffUL, TIOCSTI },
    { SCMP_SYS(ioctl), EPERM, 0xffffffffUL, TIOCLINUX },
    { SCMP_SYS(ioctl), EPERM, 0xffffffffUL, TIOCSETD },

    /* socket and network device ioctls (0x89xx) and wireless ones
     * (0x8Bxx): the channel socket belongs to the host's network
     * namespace, SIOCGIFCONF on it would list the host's interfaces */
    { SCMP_SYS(ioctl), EPERM, 0xffffff00UL, 0x8900 },
    { SCMP_SYS(ioctl), EPERM, 0xffffff00UL, 0x8b00 },

    /* record locks, leases and directory notifications work on the
     * files all jails share: covert channels between sessions */
    { SCMP_SYS(fcntl), ENOLCK, 0xffffffffUL, F_GETLK },
    { SCMP_SYS(fcntl), ENOLCK, 0xffffffffUL, F_SETLK },
    { SCMP_SYS(fcntl), ENOLCK, 0xffffffffUL, F_SETLKW },
    { SCMP_SYS(fcntl), ENOLCK, 0xffffffffUL, F_OFD_GETLK },
    { SCMP_SYS(fcntl), ENOLCK, 0xffffffffUL, F_OFD_SETLK },
    { SCMP_SYS(fcntl), ENOLCK, 0xffffffffUL, F_OFD_SETLKW },
    { SCMP_SYS(fcntl), EPERM, 0xffffffffUL, F_SETLEASE },
    { SCMP_SYS(fcntl), EPERM, 0xffffffffUL, F_GETLEASE },
    { SCMP_SYS(fcntl), EPERM, 0xffffffffUL, F_NOTIFY },
};


/* the same for a flag bit of mmap (argument 3) and madvise (argument 2) */
static const struct {
    int            syscall;
    unsigned       arg;
    unsigned long  bit;
} rlm_seccomp_bit_refused[] = {
    /* huge pages are a host-wide pool outside the memory limit */
    { SCMP_SYS(mmap), 3, MAP_HUGETLB },
    /* same-page merging across sandboxes is a timing side channel */
    { SCMP_SYS(madvise), 2, MADV_MERGEABLE },
};


/*
 * What the time limits of a cell rely on inside the sandbox.  The wall
 * timer ends in SIGALRM, the CPU timer in SIGXCPU, the host's interrupt
 * is SIGUSR1, and the CPU budget of the sandbox's whole life is the hard
 * RLIMIT_CPU.  The runtime installs its handlers for the three signals
 * in the zygote (rlm_repl.py at import, then
 * rlm_child_install_signals()), and the per-cell CPU timer is a POSIX
 * CPU-clock timer, not the soft RLIMIT_CPU: once a sandbox has loaded
 * this filter nothing legitimate changes either again.  Code that
 * replaced the handlers (signal.signal(SIGALRM, SIG_IGN)) or raised its
 * soft RLIMIT_CPU to the hard one used to spin on past every step taken
 * inside the sandbox; the manager's kill and watch ops stop it anyway
 * (docs/protocol.md), but refusing these keeps the gentle first step,
 * which ends a cell and keeps the interpreter's state, in place.
 * The soft memory limit (RLIMIT_DATA, with RLIMIT_AS above it) is set
 * soft = hard, so an unprivileged sandbox cannot raise it anyway; the
 * filter refuses to change either all the same, so that MemoryError
 * stays the first step before the cgroup's OOM kill.
 * Queries (signal.getsignal(), resource.getrlimit()) stay allowed.
 * Blocking the signals (sigprocmask) and disarming the timers cannot be
 * told apart from the runtime's own calls by a filter: the manager
 * covers those (docs/security.md).
 */
static const rlm_seccomp_guard_t  rlm_seccomp_limit_guards[] = {
    { SCMP_SYS(rt_sigaction), EPERM, 0, RLM_IS(SIGALRM), 1 },
    { SCMP_SYS(rt_sigaction), EPERM, 0, RLM_IS(SIGXCPU), 1 },
    { SCMP_SYS(rt_sigaction), EPERM, 0, RLM_IS(SIGUSR1), 1 },
    { SCMP_SYS(setrlimit), EPERM, 0, RLM_IS(RLIMIT_CPU), -1 },
    { SCMP_SYS(prlimit64), EPERM, 1, RLM_IS(RLIMIT_CPU), 2 },
    { SCMP_SYS(setrlimit), EPERM, 0, RLM_IS(RLIMIT_DATA), -1 },
    { SCMP_SYS(prlimit64), EPERM, 1, RLM_IS(RLIMIT_DATA), 2 },
    { SCMP_SYS(setrlimit), EPERM, 0, RLM_IS(RLIMIT_AS), -1 },
    { SCMP_SYS(prlimit64), EPERM, 1, RLM_IS(RLIMIT_AS), 2 },
};


/*
 * Variants of allowed calls that reach state other sandboxes share.
 *
 * - preadv2/pwritev2 with flags: RWF_NOWAIT fails with EAGAIN when a
 *   page is not in the page cache, which tells another session's reads
 *   or evictions of a shared file apart.  flags is argument 5 on x86_64
 *   (fd, iov, iovcnt, pos_l, pos_h, flags); with flags 0 they are plain
 *   preadv/pwritev.
 * - madvise COLD and PAGEOUT push pages of a mapping out of memory (the
 *   kernel already limits them to files the caller may write; refused
 *   anyway, nothing here needs them).
 * - futex without FUTEX_PRIVATE_FLAG: the key of a shared futex on a
 *   file page is the file and offset, so a sandbox waiting on a word of
 *   a shared library or stdlib page is woken by another sandbox's wake
 *   on the same word (measured: FUTEX_WAKE in one session returned 1 and
 *   ended a FUTEX_WAIT in another).  glibc and CPython use only private
 *   futexes in a process that cannot fork (pthread_join is the one
 *   shared waiter in glibc, and CPython's threads are detached).  ENOSYS,
 *   as for other futex operations a kernel does not offer.
 */
static const rlm_seccomp_guard_t  rlm_seccomp_channel_guards[] = {
    { SCMP_SYS(preadv2), EPERM, 5, RLM_NONZERO, -1 },
    { SCMP_SYS(pwritev2), EPERM, 5, RLM_NONZERO, -1 },
    { SCMP_SYS(madvise), EPERM, 2, RLM_IS(MADV_COLD), -1 },
    { SCMP_SYS(madvise), EPERM, 2, RLM_IS(MADV_PAGEOUT), -1 },
    { SCMP_SYS(futex), ENOSYS, 1, RLM_WITHOUT(FUTEX_PRIVATE_FLAG), -1 },
};


static int
rlm_seccomp_guards(scmp_filter_ctx ctx, const rlm_seccomp_guard_t *g,
    size_t n)
{
    int                  rc;
    unsigned             ncmp;
    struct scmp_arg_cmp  cmp[2];

    for ( /* void */ ; n > 0; n--, g++) {
        cmp[0].arg = g->arg;
        cmp[0].op = g->op;
        cmp[0].datum_a = g->a;
        cmp[0].datum_b = g->b;
        ncmp = 1;

        if (g->set_arg >= 0) {
            cmp[1].arg = g->set_arg;
            cmp[1].op = SCMP_CMP_NE;
            cmp[1].datum_a = 0;
            cmp[1].datum_b = 0;
            ncmp = 2;
        }

        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(g->err), g->syscall,
                                    ncmp, cmp);
        if (rc != 0) {
            errno = -rc;
            return -1;
        }
    }

    return 0;
}


static int
rlm_seccomp_arg_rules(scmp_filter_ctx ctx)
{
    int     rc;
    size_t  i;

    if (rlm_seccomp_guards(ctx, rlm_seccomp_limit_guards,
                           sizeof(rlm_seccomp_limit_guards)
                           / sizeof(rlm_seccomp_limit_guards[0])) != 0
        || rlm_seccomp_guards(ctx, rlm_seccomp_channel_guards,
                              sizeof(rlm_seccomp_channel_guards)
                              / sizeof(rlm_seccomp_channel_guards[0])) != 0)
    {
        return -1;
    }

    for (i = 0; i < sizeof(rlm_seccomp_arg_refused)
                    / sizeof(rlm_seccomp_arg_refused[0]); i++)
    {
        rc = seccomp_rule_add(ctx,
                 SCMP_ACT_ERRNO(rlm_seccomp_arg_refused[i].err),
                 rlm_seccomp_arg_refused[i].syscall, 1,
                 SCMP_A1(SCMP_CMP_MASKED_EQ, rlm_seccomp_arg_refused[i].mask,
                         rlm_seccomp_arg_refused[i].value));
        if (rc != 0) {
            errno = -rc;
            return -1;
        }
    }

    for (i = 0; i < sizeof(rlm_seccomp_bit_refused)
                    / sizeof(rlm_seccomp_bit_refused[0]); i++)
    {
        struct scmp_arg_cmp  cmp;

        cmp.arg = rlm_seccomp_bit_refused[i].arg;
        cmp.op = SCMP_CMP_MASKED_EQ;
        cmp.datum_a = rlm_seccomp_bit_refused[i].bit;
        cmp.datum_b = rlm_seccomp_bit_refused[i].bit;

        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM),
                                    rlm_seccomp_bit_refused[i].syscall, 1,
                                    &cmp);
        if (rc != 0) {
            errno = -rc;
            return -1;
        }
    }

    return 0;
}


static int
rlm_seccomp_export(scmp_filter_ctx ctx, struct sock_fprog *prog)
{
    int      fd;
    off_t    size;
    ssize_t  n;
    void    *buf;

    fd = memfd_create("rlm-seccomp", MFD_CLOEXEC);
    if (fd == -1) {
        return -1;
    }

    if (seccomp_export_bpf(ctx, fd) != 0) {
        close(fd);
        errno = EINVAL;
        return -1;
    }

    size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % sizeof(struct sock_filter) != 0
        || size / sizeof(struct sock_filter) > BPF_MAXINSNS)
    {
        close(fd);
        errno = EFBIG;
        return -1;
    }

    buf = malloc(size);
    if (buf == NULL) {
        close(fd);
        return -1;
    }

    n = pread(fd, buf, size, 0);
    close(fd);

    if (n != size) {
        free(buf);
        errno = EIO;
        return -1;
    }

    prog->filter = buf;
    prog->len = size / sizeof(struct sock_filter);

    return 0;
}


int
rlm_seccomp_build(rlm_jail_conf_t *conf, char *err, size_t errlen)
{
    int                   rc;
    const char           *what;
    scmp_filter_ctx       ctx;
    rlm_seccomp_progs_t  *progs;

    progs = calloc(1, sizeof(rlm_seccomp_progs_t));
    if (progs == NULL) {
        snprintf(err, errlen, "seccomp: out of memory");
        return -1;
    }

    /*
     * libseccomp refuses SCMP_ACT_KILL_PROCESS below API level 3, which
     * it detects with seccomp(SECCOMP_GET_ACTION_AVAIL).  gVisor does not
     * answer that query (level 2) but runs SECCOMP_RET_KILL_PROCESS
     * filters; we only export the programs and load them ourselves, so
     * the level only gates compiling.  t/image.t checks the kill there.
     */
    if (seccomp_api_get() < 3) {
        (void) seccomp_api_set(3);
    }

    what = "main filter";
    ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
    if (ctx == NULL) {
        goto failed;
    }

    /* native ABI only; we load the program ourselves, after NNP is set */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)
        != 0
        || seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0) != 0
        /* a binary tree: half the load time of a linear list */
        || seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0
        || rlm_seccomp_rules(ctx, conf->allow_threads) != 0
        || rlm_seccomp_export(ctx, &progs->main) != 0)
    {
        goto failed;
    }

    seccomp_release(ctx);

    what = "argument filter";
    ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) {
        goto failed;
    }

    rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
                          SCMP_ACT_KILL_PROCESS);
    if (rc == 0) {
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    }

    if (rc == 0) {
        rc = rlm_seccomp_arg_rules(ctx);
    }

    if (rc != 0 || rlm_seccomp_export(ctx, &progs->args) != 0) {
        goto failed;
    }

    seccomp_release(ctx);

    conf->bpf = progs;

    return 0;

failed:

    snprintf(err, errlen, "seccomp: building the %s failed: %s", what,
             strerror(errno));

    if (ctx != NULL) {
        seccomp_release(ctx);
    }

    free(progs->main.filter);
    free(progs->args.filter);
    free(progs);

    return -1;
}


int
rlm_seccomp_load(rlm_jail_conf_t *conf)
{
    rlm_seccomp_progs_t  *progs;

    progs = conf->bpf;
    if (progs == NULL) {
        errno = EINVAL;
        return -1;
    }

    /* the permissive one first: the main filter would refuse prctl() */
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &progs->args) != 0
        || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &progs->main) != 0)
    {
        return -1;
    }

    return 0;
}
