/*
 * Self-test of the jail, in C, without Python: creates jailed children
 * with rlm_jail_fork()/rlm_jail_enter() and attacks the jail from inside.
 * Prints TAP; exit status 0 only if every check passed.  Root only.
 *
 *     rlm-jail-selftest [-v] [-n N]     (-n: sandboxes for the timing run)
 *
 * Checks done inside a jail report over a socketpair ("ok"/"not ok" lines);
 * checks whose expected outcome is a seccomp kill each get their own jail
 * and the parent asserts death by SIGSYS.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/file.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jail.h"


static int  tests_run;
static int  tests_failed;
static int  verbose;
static int  report_fd = -1;

static rlm_jail_conf_t    conf;
static rlm_jail_limits_t  limits;


/* inside a jail: write one TAP-ish line to the parent */

static void
report(int ok, const char *fmt, ...)
{
    int      n;
    char     line[512];
    va_list  args;

    n = snprintf(line, sizeof(line), "%s - ", ok ? "ok" : "not ok");

    va_start(args, fmt);
    n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, args);
    va_end(args);

    if (n > (int) sizeof(line) - 2) {
        n = sizeof(line) - 2;
    }
    line[n++] = '\n';

    (void) write(report_fd, line, n);
}


static void
result(int ok, const char *fmt, ...)
{
    va_list  args;

    tests_run++;
    if (!ok) {
        tests_failed++;
    }

    printf("%s %d - ", ok ? "ok" : "not ok", tests_run);
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
    printf("\n");
    fflush(stdout);
}


static double
now_us(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}


/* errno expectation helper for the in-jail checks */

static void
expect_errno(long rc, int want, const char *what)
{
    int  err = errno;

    report(rc == -1 && err == want, "%s fails with %s (rc %ld, %s)", what,
           strerrorname_np(want), rc, rc == -1 ? strerrorname_np(err) : "-");
}


static void *
thread_idle(void *arg)
{
    (void) arg;
    pause();
    return NULL;
}


/* ------------------------------------------------------------------ */
/* the main battery, run inside one jail                               */

static void
inside_checks(void)
{
    int              fd, i, open_fds, threads;
    char             buf[256], *p;
    void            *m;
    long             rc;
    pthread_t        t;
    struct stat      st;
    struct rlimit    rl;
    struct utsname   un;
    struct statvfs   vfs;
    struct __user_cap_header_struct  hdr;
    struct __user_cap_data_struct    data[2];

    /* identity */
    report(getuid() == conf.run_uid && geteuid() == conf.run_uid
           && getgid() == conf.run_gid && getuid() != 0,
           "runs as uid %u gid %u (expected %u)", (unsigned) getuid(),
           (unsigned) getgid(), (unsigned) conf.run_uid);

    report(getgroups(0, NULL) == 0, "no supplementary groups");

    memset(&hdr, 0, sizeof(hdr));
    hdr.version = _LINUX_CAPABILITY_VERSION_3;
    memset(data, 0xff, sizeof(data));
    rc = syscall(SYS_capget, &hdr, data);
    report(rc == 0 && data[0].effective == 0 && data[0].permitted == 0
           && data[0].inheritable == 0 && data[1].effective == 0
           && data[1].permitted == 0, "no capabilities (capget)");

    report(prctl(PR_CAPBSET_READ, 21 /* CAP_SYS_ADMIN */, 0, 0, 0) == 0
           && prctl(PR_CAPBSET_READ, 0, 0, 0, 0) == 0,
           "bounding set is empty");

    report(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1, "no_new_privs set");
    report(prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2, "seccomp filter mode");
    report(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0, "not dumpable");

    i = 0;
    rc = prctl(PR_GET_PDEATHSIG, &i, 0, 0, 0);
    report(rc == 0 && i == SIGKILL, "parent death signal is SIGKILL (%d)",
           i);

    report(getpid() == 1, "pid 1 of its own pid namespace (pid %d)",
           (int) getpid());

    report(getsid(0) == 1 && getpgrp() == 1,
           "leads its own session and process group");

    report(uname(&un) == 0 && strcmp(un.nodename, "sandbox") == 0,
           "hostname is 'sandbox' (%s)", un.nodename);

    report(environ == NULL || environ[0] == NULL, "environment is empty");

    /* file descriptors: 0-2 and the report fd only */
    open_fds = 0;
    for (i = 0; i < 1024; i++) {
        if (fcntl(i, F_GETFD) != -1) {
            open_fds++;
            if (i > 2 && i != report_fd) {
                report(0, "unexpected fd %d is open", i);
            }
        }
    }
    report(open_fds == 4, "exactly 4 fds open (0, 1, 2, channel): %d",
           open_fds);

    report(write(1, "x", 1) == 1 && read(0, buf, 1) == 0,
           "stdout and stdin are /dev/null");

    /* the filesystem */
    expect_errno(open("/etc/passwd", O_RDONLY), ENOENT, "open /etc/passwd");
    expect_errno(open("/etc/shadow", O_RDONLY), ENOENT, "open /etc/shadow");
    expect_errno(open("/proc/1/environ", O_RDONLY), ENOENT,
                 "open /proc/1/environ");
    expect_errno(open("/proc/self/mem", O_RDWR), ENOENT,
                 "open /proc/self/mem");
    expect_errno(open("/sys/fs/cgroup/memory/cgroup.procs", O_WRONLY),
                 ENOENT, "open the host cgroup fs");
    expect_errno(stat("/root", &st), ENOENT, "stat /root");
    expect_errno(stat("/bin/sh", &st), ENOENT, "stat /bin/sh");
    expect_errno(stat(conf.runtime_dir, &st), ENOENT,
                 "stat the manager's runtime dir");
    expect_errno(open("/newfile", O_WRONLY | O_CREAT, 0600), EROFS,
                 "create a file in /");
    rc = open("/usr/lib/python3.11/os.py", O_WRONLY);
    report(rc == -1 && (errno == EROFS || errno == EACCES),
           "open the stdlib for writing fails (%s)", strerrorname_np(errno));
    report(statvfs("/usr/lib/python3.11", &vfs) == 0
           && (vfs.f_flag & ST_RDONLY) && (vfs.f_flag & ST_NOSUID)
           && statvfs("/", &vfs) == 0 && (vfs.f_flag & ST_RDONLY)
           && statvfs("/dev", &vfs) == 0 && (vfs.f_flag & ST_RDONLY),
           "/, /dev and the stdlib are read-only mounts");
    report(statvfs("/tmp", &vfs) == 0 && !(vfs.f_flag & ST_RDONLY)
           && (vfs.f_flag & ST_NOEXEC) && (vfs.f_flag & ST_NODEV)
           && (vfs.f_flag & ST_NOSUID)
           && vfs.f_blocks * vfs.f_frsize == (unsigned long)
                                             limits.tmpfs_mb << 20,
           "/tmp is a writable noexec,nodev,nosuid tmpfs of %u MiB",
           limits.tmpfs_mb);
    expect_errno(mkdir("/dev/x", 0700), EROFS, "mkdir in /dev");
    expect_errno(chroot("/tmp"), EPERM, "chroot");

    fd = open("/usr/lib/python3.11/os.py", O_RDONLY);
    report(fd >= 0, "the stdlib is readable");
    if (fd >= 0) {
        close(fd);
    }

    fd = open("/dev/urandom", O_RDONLY);
    report(fd >= 0 && read(fd, buf, 16) == 16, "/dev/urandom readable");
    if (fd >= 0) {
        close(fd);
    }

    p = getcwd(buf, sizeof(buf));
    report(p != NULL && strcmp(buf, "/tmp") == 0, "cwd is /tmp");

    fd = open("/tmp/probe", O_RDWR | O_CREAT | O_TRUNC, 0600);
    report(fd >= 0 && write(fd, "\x90\xc3", 2) == 2, "/tmp is writable");

    /* noexec /tmp: a file there cannot be mapped executable */
    m = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    report(m == MAP_FAILED && errno == EPERM,
           "mmap PROT_EXEC of a /tmp file fails with EPERM (noexec)");
    if (fd >= 0) {
        close(fd);
    }

    /* W^X from seccomp */
    m = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    report(m == MAP_FAILED && errno == EPERM, "mmap RWX anonymous: EPERM");

    m = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
    report(m == MAP_FAILED && errno == EPERM, "mmap R-X anonymous: EPERM");

    m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
    report(m != MAP_FAILED, "mmap RW anonymous works");
    if (m != MAP_FAILED) {
        expect_errno(mprotect(m, 4096, PROT_READ | PROT_EXEC), EPERM,
                     "mprotect RW -> RX");
    }

    fd = open("/usr/lib/x86_64-linux-gnu/libc.so.6", O_RDONLY);
    m = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    report(fd >= 0 && m != MAP_FAILED,
           "mmap R-X of a read-only library works (dlopen)");
    m = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE,
             fd, 0);
    report(m == MAP_FAILED && errno == EPERM,
           "mmap RWX private of a library: EPERM");
    if (fd >= 0) {
        close(fd);
    }

    expect_errno(syscall(SYS_memfd_create, "x", 0), EPERM, "memfd_create");
    m = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    report(m == MAP_FAILED && errno == EPERM, "mmap MAP_HUGETLB: EPERM");
    m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
    expect_errno(madvise(m, 4096, MADV_MERGEABLE), EPERM,
                 "madvise MADV_MERGEABLE");
    report(madvise(m, 4096, MADV_DONTNEED) == 0,
           "madvise MADV_DONTNEED still works");

    /* processes */
    expect_errno(fork(), EPERM, "fork");
    expect_errno(syscall(SYS_vfork), EPERM, "vfork");
    expect_errno(syscall(SYS_execve, "/bin/sh", NULL, NULL), EPERM,
                 "execve");
    expect_errno(syscall(SYS_execveat, AT_FDCWD, "/bin/sh", NULL, NULL, 0),
                 EPERM, "execveat");
    expect_errno(syscall(SYS_clone3, NULL, 0), ENOSYS, "clone3");
    expect_errno(syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL), EPERM,
                 "clone of a process");
    expect_errno(setuid(0), EPERM, "setuid(0)");
    expect_errno(syscall(SYS_prlimit64, 1, RLIMIT_NOFILE, NULL, &rl), EPERM,
                 "prlimit64 of another pid");

    rc = kill(-1, SIGKILL);
    report(1, "kill(-1, SIGKILL) returned %ld and we survived", rc);

    /* sockets, all families */
    expect_errno(socket(AF_INET, SOCK_STREAM, 0), EPERM, "socket(AF_INET)");
    expect_errno(socket(AF_INET6, SOCK_DGRAM, 0), EPERM,
                 "socket(AF_INET6)");
    expect_errno(socket(AF_UNIX, SOCK_STREAM, 0), EPERM, "socket(AF_UNIX)");
    expect_errno(socket(AF_NETLINK, SOCK_RAW, 0), EPERM,
                 "socket(AF_NETLINK)");
    expect_errno(socket(AF_PACKET, SOCK_RAW, 0), EPERM, "socket(AF_PACKET)");
    expect_errno(socket(40 /* AF_VSOCK */, SOCK_STREAM, 0), EPERM,
                 "socket(AF_VSOCK)");
    {
        int  sv[2];

        expect_errno(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), EPERM,
                     "socketpair");
    }

    /* ioctl */
    buf[0] = 'x';
    expect_errno(ioctl(0, TIOCSTI, buf), EPERM, "ioctl TIOCSTI");
    expect_errno(syscall(SYS_ioctl, 0, 0x100000000UL | TIOCSTI, buf), EPERM,
                 "ioctl TIOCSTI with high bits set");
    expect_errno(ioctl(0, TCGETS, buf), ENOTTY,
                 "ioctl TCGETS on /dev/null (allowed, not a tty)");

    /* the channel socket lives in the host's netns: no socket ioctls */
    {
        struct ifconf  ifc;
        char           ifbuf[1024];
        int            one = 1;

        ifc.ifc_len = sizeof(ifbuf);
        ifc.ifc_buf = ifbuf;
        expect_errno(ioctl(report_fd, SIOCGIFCONF, &ifc), EPERM,
                     "SIOCGIFCONF on the host-netns channel socket");
        report(ioctl(report_fd, FIONBIO, &one) == 0,
               "FIONBIO on the channel still works");
        one = 0;
        (void) ioctl(report_fd, FIONBIO, &one);
    }

    /* locks and notifications on shared files: covert channels */
    fd = open("/usr/lib/python3.11/os.py", O_RDONLY);
    expect_errno(flock(fd, LOCK_EX | LOCK_NB), ENOLCK,
                 "flock on a shared file");
    {
        struct flock  fl;

        memset(&fl, 0, sizeof(fl));
        fl.l_type = F_RDLCK;
        expect_errno(fcntl(fd, F_SETLK, &fl), ENOLCK, "fcntl F_SETLK");
        expect_errno(fcntl(fd, F_GETLK, &fl), ENOLCK, "fcntl F_GETLK");
        expect_errno(fcntl(fd, F_OFD_SETLK, &fl), ENOLCK,
                     "fcntl F_OFD_SETLK");
        expect_errno(syscall(SYS_fcntl, fd, 0x100000000UL | F_SETLK, &fl),
                     ENOLCK, "fcntl F_SETLK with high bits set");
    }
    close(fd);
    fd = open("/usr/lib/python3.11", O_RDONLY | O_DIRECTORY);
    expect_errno(fcntl(fd, F_NOTIFY, DN_ACCESS), EPERM,
                 "fcntl F_NOTIFY on a shared directory");
    report(fcntl(fd, F_GETFL) != -1, "fcntl F_GETFL still works");
    close(fd);

    /* the page cache and futex keys of shared files: covert channels */
    fd = open("/usr/lib/python3.11/os.py", O_RDONLY);
    {
        struct iovec   iov;
        unsigned char  vec[1];

        rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        report(rc == EPERM, "fadvise DONTNEED on a shared file fails with "
               "EPERM (%s)", strerrorname_np(rc));
        expect_errno(readahead(fd, 0, 4096), EPERM, "readahead");

        iov.iov_base = buf;
        iov.iov_len = 16;
        expect_errno(preadv2(fd, &iov, 1, 0, RWF_NOWAIT), EPERM,
                     "preadv2 RWF_NOWAIT");
        expect_errno(syscall(SYS_pwritev2, 1, &iov, 1, 0, 0, RWF_NOWAIT),
                     EPERM, "pwritev2 RWF_NOWAIT");
        report(preadv2(fd, &iov, 1, 0, 0) == 16,
               "preadv2 without flags still works");

        m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
        report(m != MAP_FAILED, "shared read-only mapping of a shared file");
        expect_errno(mincore(m, 4096, vec), EPERM, "mincore");
        expect_errno(madvise(m, 4096, MADV_PAGEOUT), EPERM,
                     "madvise MADV_PAGEOUT");
        expect_errno(madvise(m, 4096, MADV_COLD), EPERM, "madvise MADV_COLD");
        report(madvise(m, 4096, MADV_WILLNEED) == 0,
               "madvise MADV_WILLNEED still works");

        expect_errno(syscall(SYS_futex, m, FUTEX_WAKE, 1, NULL, NULL, 0),
                     ENOSYS, "shared FUTEX_WAKE on a shared file page");
        expect_errno(syscall(SYS_futex, m, FUTEX_WAIT, *(unsigned *) m,
                             NULL, NULL, 0), ENOSYS,
                     "shared FUTEX_WAIT on a shared file page");
        expect_errno(syscall(SYS_futex, m, 0x100000000UL | FUTEX_WAKE, 1,
                             NULL, NULL, 0), ENOSYS,
                     "shared FUTEX_WAKE with high bits set");
        report(syscall(SYS_futex, m, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0)
               == 0, "private FUTEX_WAKE still works");
        munmap(m, 4096);
    }
    close(fd);

    /* rlimits */
    report(getrlimit(RLIMIT_CORE, &rl) == 0 && rl.rlim_max == 0,
           "RLIMIT_CORE 0");
    report(getrlimit(RLIMIT_NOFILE, &rl) == 0
           && rl.rlim_max == limits.nofile, "RLIMIT_NOFILE %u",
           limits.nofile);
    report(getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_max == limits.pids,
           "RLIMIT_NPROC %u", limits.pids);
    rl.rlim_cur = rl.rlim_max = 1 << 20;
    expect_errno(setrlimit(RLIMIT_NOFILE, &rl), EPERM,
                 "raising RLIMIT_NOFILE");

    /*
     * What the time limits rely on: the dispositions of SIGALRM, SIGXCPU
     * and SIGUSR1 and RLIMIT_CPU cannot be changed; queries still work
     */
    {
        struct sigaction  sa, old;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_IGN;
        expect_errno(sigaction(SIGALRM, &sa, NULL), EPERM,
                     "ignoring SIGALRM");
        expect_errno(sigaction(SIGXCPU, &sa, NULL), EPERM,
                     "ignoring SIGXCPU");
        expect_errno(sigaction(SIGUSR1, &sa, NULL), EPERM,
                     "ignoring SIGUSR1");
        expect_errno(syscall(SYS_rt_sigaction, 0x100000000UL | SIGALRM, &sa,
                             NULL, 8), EPERM,
                     "rt_sigaction of SIGALRM with high bits set");
        report(sigaction(SIGALRM, NULL, &old) == 0,
               "sigaction query of SIGALRM still works");
        report(sigaction(SIGHUP, &sa, NULL) == 0,
               "sigaction of another signal still works");

        report(getrlimit(RLIMIT_CPU, &rl) == 0
               && rl.rlim_cur == rl.rlim_max, "RLIMIT_CPU soft = hard");
        rl.rlim_cur = 1;
        expect_errno(setrlimit(RLIMIT_CPU, &rl), EPERM,
                     "lowering the soft RLIMIT_CPU");
        expect_errno(syscall(SYS_setrlimit, RLIMIT_CPU, &rl), EPERM,
                     "raw setrlimit(RLIMIT_CPU)");
        expect_errno(syscall(SYS_prlimit64, 0, 0x100000000UL | RLIMIT_CPU,
                             &rl, NULL), EPERM,
                     "prlimit64 of RLIMIT_CPU with high bits set");
        report(syscall(SYS_prlimit64, 0, RLIMIT_CPU, NULL, &rl) == 0,
               "prlimit64 query of RLIMIT_CPU still works");
    }

    /* files beyond RLIMIT_FSIZE: EFBIG, not death */
    fd = open("/tmp/big", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    rc = pwrite(fd, "x", 1, ((off_t) limits.fsize_mb << 20) + 4096);
    expect_errno(rc, EFBIG, "sparse write beyond RLIMIT_FSIZE");
    close(fd);
    unlink("/tmp/big");

    /* filling /tmp stops at its size */
    fd = open("/tmp/fill", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    memset(buf, 'a', sizeof(buf));
    for (i = 0; i < 1 << 20; i++) {
        rc = write(fd, buf, sizeof(buf));
        if (rc != (long) sizeof(buf)) {
            break;
        }
    }
    report(rc == -1 && (errno == ENOSPC || errno == EFBIG)
           && (long) i * 256 <= ((long) limits.tmpfs_mb << 20),
           "filling /tmp stops after %ld bytes (%s)", (long) i * 256,
           strerrorname_np(errno));
    close(fd);
    unlink("/tmp/fill");

    /* threads work, and stop at the pids limit */
    threads = 0;
    for (i = 0; i < 200; i++) {
        if (pthread_create(&t, NULL, thread_idle, NULL) != 0) {
            break;
        }
        threads++;
    }
    report(threads > 0 && threads < (int) limits.pids,
           "thread bomb stops at %d threads (pids limit %u)", threads,
           limits.pids);
}


/* ------------------------------------------------------------------ */
/* attacks whose expected outcome is death by SIGSYS                   */

typedef struct {
    const char  *name;
    void       (*run)(void);
} fatal_t;


static void f_ptrace(void) { syscall(SYS_ptrace, 16 /*ATTACH*/, 1, 0, 0); }
static void f_bpf(void) { syscall(SYS_bpf, 0, NULL, 0); }
static void f_mount(void) { syscall(SYS_mount, "x", "/tmp", "tmpfs", 0, 0); }
static void f_umount(void) { syscall(SYS_umount2, "/tmp", 0); }
static void f_pivot(void) { syscall(SYS_pivot_root, "/tmp", "/tmp"); }
static void f_unshare(void) { syscall(SYS_unshare, CLONE_NEWUSER); }
static void f_setns(void) { syscall(SYS_setns, 0, 0); }
static void f_keyctl(void) { syscall(SYS_keyctl, 0, 0, 0, 0, 0); }
static void f_addkey(void) { syscall(SYS_add_key, "user", "x", "y", 1, 0); }
static void f_reqkey(void) { syscall(SYS_request_key, "user", "x", 0, 0); }
static void f_perf(void) { syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0); }
static void f_uffd(void) { syscall(SYS_userfaultfd, 0); }
static void f_uring(void) { syscall(SYS_io_uring_setup, 1, NULL); }
static void f_pvread(void) { syscall(SYS_process_vm_readv, 1, 0, 0, 0, 0,
                                     0); }
static void f_pvwrite(void) { syscall(SYS_process_vm_writev, 1, 0, 0, 0, 0,
                                      0); }
static void f_personality(void) { syscall(SYS_personality, 0x0400000); }
static void f_seccomp(void) { syscall(SYS_seccomp, 1, 0, NULL); }
static void f_prctl_pdeath(void) { prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0); }
static void f_init_module(void) { syscall(SYS_init_module, NULL, 0, ""); }
static void f_kexec(void) { syscall(SYS_kexec_load, 0, 0, NULL, 0); }
static void f_reboot(void) { syscall(SYS_reboot, 0, 0, 0, NULL); }
static void f_iopl(void) { syscall(SYS_iopl, 3); }
static void f_modify_ldt(void) { syscall(SYS_modify_ldt, 0, NULL, 0); }
static void f_pidfd_getfd(void) { syscall(SYS_pidfd_getfd, 0, 0, 0); }
static void f_open_by_handle(void) { syscall(SYS_open_by_handle_at, 0, 0,
                                             0); }
static void f_shmget(void) { syscall(SYS_shmget, 0, 4096, 01000); }
static void f_x32(void) { syscall(0x40000000 | SYS_getpid); }

static void
f_clone_ns_thread(void)
{
    syscall(SYS_clone, CLONE_VM | CLONE_THREAD | CLONE_SIGHAND
            | CLONE_NEWNET, NULL, NULL, NULL, NULL);
}

static void
f_i386(void)
{
    long  ret;

    /* getpid through the 32-bit entry point */
    __asm__ volatile ("int $0x80" : "=a" (ret) : "a" (20L) : "memory");
    (void) ret;
}


static const fatal_t  fatals[] = {
    { "ptrace", f_ptrace },
    { "bpf", f_bpf },
    { "mount (raw syscall)", f_mount },
    { "umount2", f_umount },
    { "pivot_root", f_pivot },
    { "unshare(CLONE_NEWUSER)", f_unshare },
    { "setns", f_setns },
    { "keyctl", f_keyctl },
    { "add_key", f_addkey },
    { "request_key", f_reqkey },
    { "perf_event_open", f_perf },
    { "userfaultfd", f_uffd },
    { "io_uring_setup", f_uring },
    { "process_vm_readv", f_pvread },
    { "process_vm_writev", f_pvwrite },
    { "personality(READ_IMPLIES_EXEC)", f_personality },
    { "seccomp() new filter", f_seccomp },
    { "prctl(PR_SET_PDEATHSIG, 0)", f_prctl_pdeath },
    { "init_module", f_init_module },
    { "kexec_load", f_kexec },
    { "reboot", f_reboot },
    { "iopl", f_iopl },
    { "modify_ldt", f_modify_ldt },
    { "pidfd_getfd", f_pidfd_getfd },
    { "open_by_handle_at", f_open_by_handle },
    { "shmget", f_shmget },
    { "x32 ABI syscall", f_x32 },
    { "i386 ABI int 0x80", f_i386 },
    { "clone thread with CLONE_NEWNET", f_clone_ns_thread },
};


/* ------------------------------------------------------------------ */
/* parent side                                                          */

static void
body_none(void)
{
}


static double  t_forked, t_enter, t_ready;

static pid_t
spawn(const char *name, const rlm_jail_limits_t *lim, int *rfd,
    void (*body)(void))
{
    int    sv[2];
    pid_t  pid;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        perror("socketpair");
        exit(2);
    }

    pid = rlm_jail_fork(&conf, name, lim);
    if (pid == -1) {
        fprintf(stderr, "rlm_jail_fork: %s (%s)\n", strerror(errno),
                conf.err);
        exit(2);
    }

    if (pid == 0) {
        close(sv[0]);
        report_fd = sv[1];
        t_enter = now_us();

        if (rlm_jail_enter(&conf, lim, sv[1]) != 0) {
            char  line[RLM_JAIL_ERRLEN + 32];
            int   n = snprintf(line, sizeof(line), "not ok - enter: %s\n",
                               conf.err);

            (void) write(sv[1], line, n);
            _exit(RLM_JAIL_EXIT_SETUP);
        }

        t_ready = now_us();
        (void) write(sv[1], "ready\n", 6);
        if (body == body_none) {
            (void) write(sv[1], &t_enter, sizeof(double));
            (void) write(sv[1], &t_ready, sizeof(double));
        }
        body();
        (void) write(sv[1], "done\n", 5);
        _exit(0);
    }

    t_forked = now_us();
    close(sv[1]);
    *rfd = sv[0];

    return pid;
}


static void
body_oom(void)
{
    size_t  i, size;
    char   *p;

    /* touch memory until the cgroup limit kills us */
    size = (size_t) 1 << 20;
    for (i = 0; i < 4096; i++) {
        p = malloc(size);
        if (p == NULL) {
            report(0, "malloc failed before the cgroup OOM kill");
            return;
        }
        memset(p, 1, size);
    }
}


static int
ns_differs(pid_t pid, const char *ns)
{
    char  a[64], b[64], path[64];
    ssize_t  n1, n2;

    snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int) pid, ns);
    n1 = readlink(path, a, sizeof(a) - 1);
    snprintf(path, sizeof(path), "/proc/self/ns/%s", ns);
    n2 = readlink(path, b, sizeof(b) - 1);

    if (n1 <= 0 || n2 <= 0) {
        return 0;
    }
    a[n1] = '\0';
    b[n2] = '\0';

    return strcmp(a, b) != 0;
}


static int
cgroup_gone(const char *name)
{
    char         path[1024];
    struct stat  st;

    snprintf(path, sizeof(path), "%s/%s", conf.cg_memory, name);
    if (stat(path, &st) == 0) {
        return 0;
    }

    snprintf(path, sizeof(path), "%s/%s", conf.cg_pids, name);

    return stat(path, &st) != 0;
}


/* read the report lines of a child until EOF; count and relay them */

static void
relay(int fd, const char *prefix)
{
    FILE  *f;
    char   line[1024];

    f = fdopen(fd, "r");
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';

        if (strncmp(line, "ok - ", 5) == 0) {
            result(1, "%s: %s", prefix, line + 5);

        } else if (strncmp(line, "not ok - ", 9) == 0) {
            result(0, "%s: %s", prefix, line + 9);

        } else if (verbose) {
            printf("# %s: %s\n", prefix, line);
        }
    }
    fclose(f);
}


static void
main_battery(void)
{
    int    fd, status;
    char   path[1024], buf[64];
    pid_t  pid;
    FILE  *f;
    long   limit;

    pid = spawn("selftest-main", &limits, &fd, inside_checks);

    /* "ready\n": the child is jailed */
    result(read(fd, buf, 6) == 6 && memcmp(buf, "ready\n", 6) == 0,
           "main sandbox entered its jail");

    result(ns_differs(pid, "pid") && ns_differs(pid, "mnt")
           && ns_differs(pid, "net") && ns_differs(pid, "ipc")
           && ns_differs(pid, "uts"),
           "child has its own pid, mnt, net, ipc and uts namespaces");
    result(ns_differs(pid, "cgroup"), "child has its own cgroup namespace");

    snprintf(path, sizeof(path), "%s/selftest-main/memory.limit_in_bytes",
             conf.cg_memory);
    if (conf.cgroup_version == RLM_CGROUP_V2) {
        snprintf(path, sizeof(path), "%s/selftest-main/memory.max",
                 conf.cg_memory);
    }
    limit = 0;
    f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL) {
            limit = atol(buf);
        }
        fclose(f);
    }
    result(limit == (long) limits.memory_mb << 20,
           "cgroup memory limit is %u MiB (%ld)", limits.memory_mb, limit);

    relay(fd, "main");

    waitpid(pid, &status, 0);
    result(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "main battery child exited 0 (status 0x%x)", status);

    result(rlm_jail_count(&conf, "selftest-main") == 0,
           "no process left in the cgroup once the sandbox is gone");

    result(rlm_jail_release(&conf, "selftest-main") == 0
           && cgroup_gone("selftest-main"), "release removes the cgroup");
}


/* the sandboxes' network namespace: only lo, and it is down */

static void
netns_battery(void)
{
    int                   fd, status, n, up;
    pid_t                 pid;
    struct ifreq          ifr;
    struct if_nameindex  *ifs, *p;
    struct sockaddr_in    sin;

    if (conf.netns_fd == -1) {
        result(0, "no shared network namespace");
        return;
    }

    pid = fork();
    if (pid == 0) {
        if (setns(conf.netns_fd, CLONE_NEWNET) != 0) {
            _exit(10);
        }

        ifs = if_nameindex();
        n = 0;
        for (p = ifs; p != NULL && p->if_index != 0; p++) {
            if (strcmp(p->if_name, "lo") != 0) {
                _exit(11);
            }
            n++;
        }

        fd = socket(AF_INET, SOCK_STREAM, 0);
        memset(&ifr, 0, sizeof(ifr));
        strcpy(ifr.ifr_name, "lo");
        up = (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP));
        if (n != 1 || up) {
            _exit(12);
        }

        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_port = htons(22);
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *) &sin, sizeof(sin)) == 0
            || errno != ENETUNREACH)
        {
            _exit(13);
        }

        _exit(0);
    }

    waitpid(pid, &status, 0);
    result(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "sandbox netns: only lo, down; 127.0.0.1 unreachable (exit %d)",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}


/*
 * Whether this host runs i386 system calls at all: some hypervisors and
 * kernels (ia32_emulation=0) answer int 0x80 with SIGSEGV before any
 * filter sees it.  Tried outside the jail, in a throw-away child.
 */
static int
i386_abi_available(void)
{
    int    status;
    pid_t  pid;

    pid = fork();
    if (pid == 0) {
        f_i386();
        _exit(0);
    }

    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        return 1;
    }

    return !(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
}


static void
fatal_battery(void)
{
    size_t  i;
    int     fd, status, want, i386;
    char    name[64];
    pid_t   pid;

    i386 = i386_abi_available();

    for (i = 0; i < sizeof(fatals) / sizeof(fatals[0]); i++) {
        snprintf(name, sizeof(name), "selftest-fatal-%zu", i);

        pid = spawn(name, &limits, &fd, fatals[i].run);
        relay(fd, fatals[i].name);
        waitpid(pid, &status, 0);

        /* without the i386 entry the call never reaches the filter */
        want = (fatals[i].run == f_i386 && !i386) ? SIGSEGV : SIGSYS;

        result(WIFSIGNALED(status) && WTERMSIG(status) == want,
               "%s kills the sandbox with %s (status 0x%x)%s",
               fatals[i].name, want == SIGSYS ? "SIGSYS" : "SIGSEGV",
               status, want == SIGSEGV ? " (this host has no i386 ABI)"
                                       : "");

        (void) rlm_jail_release(&conf, name);
    }
}


static void
oom_battery(void)
{
    int                fd, status;
    pid_t              pid;
    rlm_jail_limits_t  lim;

    lim = limits;
    lim.memory_mb = 32;
    lim.as_mb = 4096;

    pid = spawn("selftest-oom", &lim, &fd, body_oom);
    relay(fd, "oom");
    waitpid(pid, &status, 0);

    result(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
           "memory balloon is killed by the cgroup (status 0x%x)", status);
    result(rlm_jail_oom_killed(&conf, "selftest-oom") == 1,
           "rlm_jail_oom_killed reports the OOM kill");
    result(rlm_jail_release(&conf, "selftest-oom") == 0
           && cgroup_gone("selftest-oom"), "OOM cgroup released");

    /* and an ordinary sandbox has no OOM record */
    pid = spawn("selftest-nooom", &limits, &fd, body_none);
    relay(fd, "nooom");
    waitpid(pid, &status, 0);
    result(rlm_jail_oom_killed(&conf, "selftest-nooom") == 0,
           "no OOM recorded for a quiet sandbox");
    (void) rlm_jail_release(&conf, "selftest-nooom");
}


static void
release_battery(void)
{
    int    fd, status;
    char   line[16];
    pid_t  pid;

    /* release of a live sandbox kills it */
    pid = spawn("selftest-live", &limits, &fd, (void (*)(void)) pause);
    (void) read(fd, line, 6);

    result(rlm_jail_count(&conf, "selftest-live") == 1,
           "live sandbox: 1 process in its cgroup");
    result(rlm_jail_release(&conf, "selftest-live") == 0
           && cgroup_gone("selftest-live"), "release of a live sandbox");

    waitpid(pid, &status, 0);
    result(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
           "the live sandbox died of SIGKILL");
    close(fd);
}


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


static void
timing(int n, int netns)
{
    int     i, fd, status;
    char    name[64], line[16];
    double  t0, *lat, *lfork, *lenter, tt[2];
    pid_t   pid;

    lat = calloc(n, sizeof(double));
    lfork = calloc(n, sizeof(double));
    lenter = calloc(n, sizeof(double));
    conf.use_netns = netns;

    for (i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "selftest-t%d", i);
        t0 = now_us();
        pid = spawn(name, &limits, &fd, body_none);
        if (read(fd, line, 6) != 6 || memcmp(line, "ready\n", 6) != 0) {
            result(0, "timing sandbox %d did not get ready", i);
        }
        lat[i] = now_us() - t0;
        if (recv(fd, tt, sizeof(tt), MSG_WAITALL) == sizeof(tt)) {
            lfork[i] = t_forked - t0;
            lenter[i] = tt[1] - tt[0];
        }
        close(fd);
        waitpid(pid, &status, 0);
        (void) rlm_jail_release(&conf, name);
    }

    qsort(lat, n, sizeof(double), cmp_double);
    qsort(lfork, n, sizeof(double), cmp_double);
    qsort(lenter, n, sizeof(double), cmp_double);
    printf("# netns=%d: parent cgroup+fork p50 %.0f us; child "
           "rlm_jail_enter p50 %.0f us p90 %.0f us\n", netns, lfork[n / 2],
           lenter[n / 2], lenter[n * 9 / 10]);
    printf("# fork+enter, netns=%d, n=%d: p50 %.0f us, p90 %.0f us, "
           "max %.0f us\n", netns, n, lat[n / 2], lat[n * 9 / 10],
           lat[n - 1]);

    conf.use_netns = RLM_JAIL_NETNS_SHARED;
    free(lat);
    free(lfork);
    free(lenter);
}


int
main(int argc, char **argv)
{
    int   i, n;
    char  err[512], dir[128], cgname[64];

    n = 0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = 1;
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            n = atoi(argv[++i]);
        }
    }

    if (geteuid() != 0) {
        printf("1..0 # SKIP needs root\n");
        return 0;
    }

    setvbuf(stdout, NULL, _IOLBF, 0);

    snprintf(dir, sizeof(dir), "/tmp/rlm-jail-test-%d", (int) getpid());
    if (mkdir(dir, 0755) != 0) {
        perror(dir);
        return 2;
    }

    rlm_jail_conf_default(&conf);
    conf.runtime_dir = dir;
    /* unique: a second self-test running at the same time is no leftover */
    snprintf(cgname, sizeof(cgname), "rlm-jail-selftest-%d", (int) getpid());
    conf.cgroup_name = cgname;

    if (rlm_jail_init(&conf, err, sizeof(err)) != 0) {
        printf("Bail out! rlm_jail_init: %s\n", err);
        return 2;
    }

    printf("# cgroup v%d, memory parent %s, memsw %d\n",
           conf.cgroup_version == RLM_CGROUP_V2 ? 2 : 1, conf.cg_memory,
           conf.has_memsw);

    rlm_jail_limits_default(&limits);
    limits.memory_mb = 64;
    limits.pids = 8;
    limits.tmpfs_mb = 2;
    limits.fsize_mb = 4;
    limits.nofile = 32;

    main_battery();
    netns_battery();
    fatal_battery();
    oom_battery();
    release_battery();

    if (n > 0) {
        timing(n, RLM_JAIL_NETNS_NONE);
        timing(n, RLM_JAIL_NETNS_SHARED);
        timing(n, RLM_JAIL_NETNS_PRIVATE);
    }

    rlm_jail_cleanup(&conf);
    result(access(conf.cg_memory, F_OK) != 0
           && access(conf.cg_pids, F_OK) != 0,
           "cleanup removes the parent cgroups");

    result(rmdir(dir) == 0, "cleanup leaves the runtime dir empty");

    printf("1..%d\n", tests_run);

    return tests_failed ? 1 : 0;
}
