/*
 * The jail every sandbox enters before it accepts work: namespaces, a
 * minimal read-only root, a private tmpfs, credentials, capabilities,
 * rlimits, file descriptors, environment, and last the seccomp filter.
 * See jail.h for the calling sequence and docs/security.md for the why.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ftw.h>
#include <unistd.h>

#include "jail.h"
#include "cgroup.h"
#include "seccomp.h"


#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT            47
#define PR_CAP_AMBIENT_CLEAR_ALL  4
#endif

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP           0x02000000
#endif


extern char **environ;


static int rlm_jail_fail(rlm_jail_conf_t *conf, const char *fmt, ...);
static int rlm_jail_name_ok(const char *name);
static unsigned rlm_jail_hash(const char *s);
static int rlm_jail_is_kept(int fd, const int *keep, int nkeep);
static int rlm_jail_mkdirs(char *path, size_t skip, mode_t mode);
static int rlm_jail_build_template(rlm_jail_conf_t *conf);
static int rlm_jail_setns_works(int nstype, const char *own_path);
static void rlm_jail_refuse(rlm_jail_conf_t *conf, const char *why_cg,
    const char *why_root, char *err, size_t errlen);
static int rlm_jail_shared_root(rlm_jail_conf_t *conf, const char *name);
static int rlm_jail_build_linked_root(rlm_jail_conf_t *conf);
static void rlm_jail_shared_root_release(rlm_jail_conf_t *conf,
    const char *name);
static int rlm_jail_make_netns(rlm_jail_conf_t *conf, char *err,
    size_t errlen);
static int rlm_jail_bind(rlm_jail_conf_t *conf, const char *src,
    const char *dst, unsigned long flags);
static int rlm_jail_build_root(rlm_jail_conf_t *conf,
    const rlm_jail_limits_t *limits);
static int rlm_jail_rlimits(rlm_jail_conf_t *conf,
    const rlm_jail_limits_t *limits, rlim_t data_now);
static rlim_t rlm_jail_data_now(void);
static rlim_t rlm_jail_data_limit(const rlm_jail_limits_t *limits,
    rlim_t data_now);
static int rlm_jail_creds(rlm_jail_conf_t *conf);
static int rlm_jail_close_fds(const int *keep, int nkeep);
static int rlm_jail_stdio(rlm_jail_conf_t *conf, const int *keep, int nkeep);


/* the stdlib, its extension modules and the libraries they load */
static const char *rlm_jail_default_binds[] = {
    "/usr/lib/python3.11",
    "/usr/lib/x86_64-linux-gnu",
    NULL
};

/* the character devices of the jail's /dev (major 1) */
static const struct {
    const char  *name;
    unsigned     minor;
} rlm_jail_devices[] = {
    { "null", 3 }, { "zero", 5 }, { "full", 7 }, { "random", 8 },
    { "urandom", 9 }, { NULL, 0 }
};


void
rlm_jail_conf_default(rlm_jail_conf_t *conf)
{
    unsigned  i;

    memset(conf, 0, sizeof(rlm_jail_conf_t));

    conf->runtime_dir = "/run/rlm-sandboxd";
    conf->cgroup_root = "/sys/fs/cgroup";
    conf->cgroup_name = "rlm-sandboxd";
    conf->hostname = "sandbox";

    conf->uid_base = RLM_JAIL_UID_BASE;
    conf->uid_range = RLM_JAIL_UID_RANGE;
    conf->uid = 65534;
    conf->gid = 65534;

    for (i = 0; rlm_jail_default_binds[i] != NULL; i++) {
        conf->ro_binds[i] = rlm_jail_default_binds[i];
    }
    conf->nro_binds = i;

    conf->allow_threads = 1;
    conf->use_netns = RLM_JAIL_NETNS_SHARED;
    conf->pidns_fd = -1;
    conf->netns_fd = -1;
}


void
rlm_jail_limits_default(rlm_jail_limits_t *limits)
{
    memset(limits, 0, sizeof(rlm_jail_limits_t));

    limits->memory_mb = 256;
    limits->pids = 16;
    limits->cpu_s = 0;
    limits->cpu_pct = 100;
    limits->tmpfs_mb = 16;
    limits->nofile = 64;
    limits->fsize_mb = 16;
    limits->stack_mb = 8;
}


static int
rlm_jail_fail(rlm_jail_conf_t *conf, const char *fmt, ...)
{
    int      saved;
    size_t   n;
    va_list  args;

    saved = errno;

    va_start(args, fmt);
    vsnprintf(conf->err, sizeof(conf->err), fmt, args);
    va_end(args);

    n = strlen(conf->err);
    if (saved != 0 && n + 2 < sizeof(conf->err)) {
        snprintf(conf->err + n, sizeof(conf->err) - n, ": %s",
                 strerror(saved));
    }

    errno = saved;

    return -1;
}


static int
rlm_jail_name_ok(const char *name)
{
    size_t  i;

    for (i = 0; name[i] != '\0'; i++) {
        if (i >= 64) {
            return 0;
        }
        if (!((name[i] >= 'a' && name[i] <= 'z')
              || (name[i] >= 'A' && name[i] <= 'Z')
              || (name[i] >= '0' && name[i] <= '9')
              || name[i] == '_' || name[i] == '-' || name[i] == '.'))
        {
            return 0;
        }
    }

    return i > 0 && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}


static unsigned
rlm_jail_hash(const char *s)
{
    unsigned  h;

    /* FNV-1a */
    for (h = 2166136261u; *s != '\0'; s++) {
        h = (h ^ (unsigned char) *s) * 16777619u;
    }

    return h;
}


int
rlm_jail_init(rlm_jail_conf_t *conf, char *err, size_t errlen)
{
    int   fd;
    char  buf[32], why_cg[RLM_JAIL_ERRLEN], why_root[RLM_JAIL_ERRLEN];

    if ((size_t) snprintf(conf->root_dir, sizeof(conf->root_dir),
                          "%s/jail-root", conf->runtime_dir)
        >= sizeof(conf->root_dir))
    {
        snprintf(err, errlen, "runtime dir path too long");
        return -1;
    }

    if (mkdir(conf->root_dir, 0755) == -1 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", conf->root_dir,
                 strerror(errno));
        return -1;
    }

    /* the highest capability number, for the bounding set */
    conf->cap_last = 40;
    fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    if (fd != -1) {
        ssize_t  n = read(fd, buf, sizeof(buf) - 1);

        if (n > 0) {
            buf[n] = '\0';
            conf->cap_last = atoi(buf);
        }
        close(fd);
    }

    /* each fork gets its own pid namespace by unsharing it in between */
    if (conf->pidns_fd == -1) {
        conf->pidns_fd = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
        if (conf->pidns_fd == -1) {
            snprintf(err, errlen, "open /proc/self/ns/pid: %s",
                     strerror(errno));
            return -1;
        }
    }

    /*
     * gVisor (runsc) makes network namespaces but cannot setns() into
     * one: then each sandbox unshares a namespace of its own instead of
     * joining the shared one (slower to create, as empty).
     */
    if (conf->use_netns == RLM_JAIL_NETNS_SHARED && conf->netns_fd == -1
        && !rlm_jail_setns_works(CLONE_NEWNET, "/proc/self/ns/net"))
    {
        conf->use_netns = RLM_JAIL_NETNS_PRIVATE;
    }

    /* the same for pid namespaces: then clone() makes the child in one */
    conf->pidns_clone = !rlm_jail_setns_works(CLONE_NEWPID,
                                              "/proc/self/ns/pid");

    if (conf->use_netns == RLM_JAIL_NETNS_SHARED && conf->netns_fd == -1
        && rlm_jail_make_netns(conf, err, errlen) != 0)
    {
        return -1;
    }

    conf->missing = 0;
    why_cg[0] = '\0';
    why_root[0] = '\0';

    if (rlm_cgroup_init(conf, why_cg, sizeof(why_cg)) != 0) {
        conf->cgroup_version = RLM_CGROUP_NONE;
        conf->missing |= RLM_JAIL_LAYER_CGROUPS;
    }

    /*
     * Start the uid counter at a point derived from the cgroup name, so
     * that two managers on one host rarely hand out the same uids.
     */
    if (conf->uid_range > 0 && conf->fork_count == 0) {
        conf->fork_count = rlm_jail_hash(conf->cgroup_name)
                           % conf->uid_range;
    }

    if (!conf->template_ready) {
        if (rlm_jail_build_template(conf) != 0) {
            snprintf(why_root, sizeof(why_root), "%s", conf->err);
            conf->missing |= RLM_JAIL_LAYER_ROOT;
        }
        conf->template_ready = 1;
    }

    if (conf->missing & ~conf->allow_missing) {
        rlm_jail_refuse(conf, why_cg, why_root, err, errlen);
        return -1;
    }

    if ((conf->missing & RLM_JAIL_LAYER_ROOT)
        && rlm_jail_build_linked_root(conf) != 0)
    {
        snprintf(err, errlen, "jail root of hard links: %s", conf->err);
        return -1;
    }

    if (conf->bpf == NULL && rlm_seccomp_build(conf, err, errlen) != 0) {
        return -1;
    }

    return 0;
}


/*
 * One message for every layer that is missing and not allowed, naming
 * each and the directive that would accept running without it.
 */

static void
rlm_jail_refuse(rlm_jail_conf_t *conf, const char *why_cg,
    const char *why_root, char *err, size_t errlen)
{
    int       both;
    char      cg[RLM_JAIL_ERRLEN + 16], root[RLM_JAIL_ERRLEN + 16];
    unsigned  refused;

    refused = conf->missing & ~conf->allow_missing;
    both = (refused == (RLM_JAIL_LAYER_CGROUPS | RLM_JAIL_LAYER_ROOT));

    cg[0] = '\0';
    root[0] = '\0';

    if (refused & RLM_JAIL_LAYER_CGROUPS) {
        snprintf(cg, sizeof(cg), "cgroups (%s)%s", why_cg, both ? ", " : "");
    }

    if (refused & RLM_JAIL_LAYER_ROOT) {
        snprintf(root, sizeof(root), "root (%s)", why_root);
    }

    snprintf(err, errlen,
             "jail layer%s missing here: %s%s; refusing to run sandboxes "
             "without %s unless \"rlm_sandbox_allow_missing%s%s;\" "
             "accepts it", both ? "s" : "", cg, root, both ? "them" : "it",
             (refused & RLM_JAIL_LAYER_CGROUPS) ? " cgroups" : "",
             (refused & RLM_JAIL_LAYER_ROOT) ? " root" : "");
}


/*
 * Whether a process can setns() back into its own namespace of this type
 * after unsharing one: not in gVisor (runsc), for net and pid.
 */

static int
rlm_jail_setns_works(int nstype, const char *own_path)
{
    int    own, status;
    pid_t  pid;

    pid = fork();

    if (pid == 0) {
        own = open(own_path, O_RDONLY | O_CLOEXEC);
        if (own == -1 || unshare(nstype) != 0) {
            /* not our question: the real attempt says why */
            _exit(0);
        }
        _exit(setns(own, nstype) == 0 ? 0 : 1);
    }

    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        return 1;
    }

    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}


/* an empty network namespace, kept open by fd; we stay in our own */

static int
rlm_jail_make_netns(rlm_jail_conf_t *conf, char *err, size_t errlen)
{
    int  own;

    own = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (own == -1) {
        snprintf(err, errlen, "open /proc/self/ns/net: %s", strerror(errno));
        return -1;
    }

    if (unshare(CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "unshare(CLONE_NEWNET): %s", strerror(errno));
        close(own);
        return -1;
    }

    conf->netns_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);

    if (setns(own, CLONE_NEWNET) != 0) {
        /* we would serve the control socket from an empty namespace */
        snprintf(err, errlen, "setns back to our network namespace: %s",
                 strerror(errno));
        close(own);
        return -1;
    }

    close(own);

    if (conf->netns_fd == -1) {
        snprintf(err, errlen, "open the new netns: %s", strerror(errno));
        return -1;
    }

    return 0;
}


/*
 * glibc's fork() in between unshare(CLONE_NEWPID) and a setns() back to our
 * own pid namespace: the child is pid 1 of a fresh namespace, and glibc's
 * fork bookkeeping (tid, atfork handlers, locks) stays right.
 */

pid_t
rlm_jail_fork(rlm_jail_conf_t *conf, const char *name,
    const rlm_jail_limits_t *limits)
{
    int    flags, saved;
    char   err[RLM_JAIL_ERRLEN];
    pid_t  pid;

    if (!rlm_jail_name_ok(name) || conf->pidns_fd == -1 || conf->bpf == NULL
        || !conf->template_ready)
    {
        /* a bad name, or rlm_jail_init() did not succeed */
        errno = EINVAL;
        return -1;
    }

    if (conf->cgroup_version != RLM_CGROUP_NONE
        && rlm_cgroup_create(conf, name, limits, err, sizeof(err)) != 0)
    {
        snprintf(conf->err, sizeof(conf->err), "%s", err);
        return -1;
    }

    if (conf->uid_range > 0) {
        conf->run_uid = conf->uid_base + conf->fork_count % conf->uid_range;
        conf->run_gid = conf->run_uid;

    } else {
        conf->run_uid = conf->uid;
        conf->run_gid = conf->gid;
    }

    conf->fork_count++;

    if (conf->pidns_clone) {
        /*
         * A raw clone() into a new pid namespace, where setns() back
         * cannot work (gVisor).  glibc's fork bookkeeping is skipped: the
         * manager is single-threaded here, so no lock is held, and glibc
         * asks the kernel for the tid where it matters (raise()).
         */
        pid = (pid_t) syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL,
                              NULL, NULL);
        saved = errno;

        if (pid == -1) {
            (void) rlm_cgroup_destroy(conf, name);
            errno = saved;
            return -1;
        }

        if (pid > 0) {
            return pid;
        }

        goto child;
    }

    if (unshare(CLONE_NEWPID) != 0) {
        saved = errno;
        (void) rlm_cgroup_destroy(conf, name);
        errno = saved;
        return -1;
    }

    pid = fork();
    saved = errno;

    if (pid != 0) {
        /* parent: back to our own namespace for the next fork */
        if (setns(conf->pidns_fd, CLONE_NEWPID) != 0) {
            saved = errno;
            if (pid > 0) {
                (void) rlm_cgroup_destroy(conf, name);
            }
            errno = saved;
            return -1;
        }

        if (pid == -1) {
            (void) rlm_cgroup_destroy(conf, name);
        }

        errno = saved;
        return pid;
    }

child:

    /* child: pid 1 of its namespace, still root with the host's view */

    snprintf(conf->name, sizeof(conf->name), "%s", name);

    (void) prctl(PR_SET_PDEATHSIG, SIGKILL);

    /*
     * Its own session and process group: kill(0, sig) from the sandbox
     * must not reach the manager's process group (which may hold other
     * sandboxes, and the manager's parent).
     */
    if (setsid() == -1) {
        rlm_jail_fail(conf, "setsid");
        goto failed;
    }

    if (conf->cgroup_version != RLM_CGROUP_NONE
        && rlm_cgroup_join(conf, name) != 0)
    {
        rlm_jail_fail(conf, "joining cgroup %s", name);
        goto failed;
    }

    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
    if (conf->use_netns == RLM_JAIL_NETNS_PRIVATE) {
        flags |= CLONE_NEWNET;
    }

    if (unshare(flags) != 0) {
        rlm_jail_fail(conf, "unshare");
        goto failed;
    }

    if (conf->use_netns == RLM_JAIL_NETNS_SHARED
        && setns(conf->netns_fd, CLONE_NEWNET) != 0)
    {
        rlm_jail_fail(conf, "join the sandboxes' network namespace");
        goto failed;
    }

    return 0;

failed:

    (void) write(2, conf->err, strlen(conf->err));
    (void) write(2, "\n", 1);
    _exit(RLM_JAIL_EXIT_SETUP);
}


/* mkdir -p of path, creating only components after its first skip bytes */

static int
rlm_jail_mkdirs(char *path, size_t skip, mode_t mode)
{
    char  *p;

    for (p = path + skip + 1; *p != '\0'; p++) {
        if (*p != '/') {
            continue;
        }

        *p = '\0';
        if (mkdir(path, mode) == -1 && errno != EEXIST) {
            *p = '/';
            return -1;
        }
        *p = '/';
    }

    if (mkdir(path, mode) == -1 && errno != EEXIST) {
        return -1;
    }

    return 0;
}


/* bind the directory src at dst, then remount it with flags */

static int
rlm_jail_bind(rlm_jail_conf_t *conf, const char *src, const char *dst,
    unsigned long flags)
{
    char         path[PATH_MAX];
    size_t       root_len;
    struct stat  st;

    if (stat(src, &st) != 0) {
        /* an optional path missing on this host */
        return 0;
    }

    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return rlm_jail_fail(conf, "bind %s", src);
    }

    if ((size_t) snprintf(path, sizeof(path), "%s", dst) >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return rlm_jail_fail(conf, "bind %s", src);
    }

    /* only the components below the jail root are ours to create */
    root_len = strlen(conf->root_dir);

    if (rlm_jail_mkdirs(path, root_len, 0755) != 0) {
        return rlm_jail_fail(conf, "mkdir %s", dst);
    }

    if (mount(src, dst, NULL, MS_BIND, NULL) != 0) {
        return rlm_jail_fail(conf, "bind %s", src);
    }

    if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | flags, NULL) != 0) {
        return rlm_jail_fail(conf, "remount %s", dst);
    }

    return 0;
}


/*
 * The template root, built once by rlm_jail_init() in the manager's own
 * private mount namespace (so the host never sees these mounts):
 *
 *     /                   tmpfs, read-only, nosuid, nodev
 *     /usr/lib/python3.11 read-only bind (and the other ro_binds)
 *     /dev                tmpfs, read-only, noexec, nosuid, with the nodes
 *                         null zero full random urandom (mknod)
 *     /tmp                empty mount point for each sandbox's own tmpfs
 *
 * Every sandbox gets a copy of these mounts with its mount namespace; the
 * superblocks are shared but read-only, so they carry nothing from one
 * sandbox to another.
 */

static int
rlm_jail_build_template(rlm_jail_conf_t *conf)
{
    unsigned    i;
    char        dst[PATH_MAX];
    const char  *root;

    root = conf->root_dir;

    /* our own mount namespace: nothing we mount propagates to the host */
    if (unshare(CLONE_NEWNS) != 0) {
        return rlm_jail_fail(conf, "unshare(CLONE_NEWNS) for the manager");
    }

    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        return rlm_jail_fail(conf, "make / private");
    }

    if (mount("rlm-root", root, "tmpfs", MS_NOSUID | MS_NODEV,
              "size=256k,nr_inodes=256,mode=0755") != 0)
    {
        return rlm_jail_fail(conf, "tmpfs on %s", root);
    }

    for (i = 0; i < conf->nro_binds; i++) {
        snprintf(dst, sizeof(dst), "%s%s", root, conf->ro_binds[i]);

        if (rlm_jail_bind(conf, conf->ro_binds[i], dst,
                          MS_RDONLY | MS_NOSUID | MS_NODEV) != 0)
        {
            return -1;
        }
    }

    /* a minimal /dev: five character devices, nothing else */
    snprintf(dst, sizeof(dst), "%s/dev", root);
    if (mkdir(dst, 0755) != 0
        || mount("rlm-dev", dst, "tmpfs", MS_NOSUID | MS_NOEXEC,
                 "size=16k,nr_inodes=32,mode=0755") != 0)
    {
        return rlm_jail_fail(conf, "tmpfs on %s", dst);
    }

    for (i = 0; rlm_jail_devices[i].name != NULL; i++) {
        snprintf(dst, sizeof(dst), "%s/dev/%s", root,
                 rlm_jail_devices[i].name);

        if (mknod(dst, S_IFCHR | 0666, makedev(1, rlm_jail_devices[i].minor))
            != 0 || chmod(dst, 0666) != 0)
        {
            return rlm_jail_fail(conf, "mknod %s", dst);
        }
    }

    snprintf(dst, sizeof(dst), "%s/dev", root);
    if (mount(NULL, dst, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID
              | MS_NOEXEC, "size=16k,nr_inodes=32,mode=0755") != 0)
    {
        return rlm_jail_fail(conf, "remount %s read-only", dst);
    }

    snprintf(dst, sizeof(dst), "%s/tmp", root);
    if (mkdir(dst, 0755) != 0) {
        return rlm_jail_fail(conf, "mkdir %s", dst);
    }

    if (mount(NULL, root, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID
              | MS_NODEV, "size=256k,nr_inodes=256,mode=0755") != 0)
    {
        return rlm_jail_fail(conf, "remount %s read-only", root);
    }

    return 0;
}


/* in the sandbox: its own /tmp on the template, then pivot into it */

static int
rlm_jail_build_root(rlm_jail_conf_t *conf, const rlm_jail_limits_t *limits)
{
    char      dst[PATH_MAX], opts[128];
    unsigned  mb;

    mb = limits->tmpfs_mb ? limits->tmpfs_mb : 16;

    snprintf(dst, sizeof(dst), "%s/tmp", conf->root_dir);
    snprintf(opts, sizeof(opts), "size=%um,nr_inodes=%u,mode=0700,"
             "uid=%u,gid=%u", mb, mb * 64 + 64, (unsigned) conf->run_uid,
             (unsigned) conf->run_gid);

    if (conf->missing & RLM_JAIL_LAYER_ROOT) {
        return rlm_jail_shared_root(conf, conf->name);
    }

    if (mount("rlm-tmp", dst, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              opts) != 0)
    {
        return rlm_jail_fail(conf, "tmpfs on %s", dst);
    }

    /* swap roots; the old one is detached and unreachable */
    if (chdir(conf->root_dir) != 0) {
        return rlm_jail_fail(conf, "chdir %s", conf->root_dir);
    }

    if (syscall(SYS_pivot_root, ".", ".") != 0) {
        return rlm_jail_fail(conf, "pivot_root");
    }

    if (umount2(".", MNT_DETACH) != 0) {
        return rlm_jail_fail(conf, "detach the old root");
    }

    if (chdir("/tmp") != 0) {
        return rlm_jail_fail(conf, "chdir /tmp");
    }

    return 0;
}


/*
 * The private data the process maps now (the interpreter and stdlib it
 * got from the zygote), in bytes, from /proc/self/statm; 0 if unknown.
 */

static rlim_t
rlm_jail_data_now(void)
{
    int            fd;
    char           buf[256];
    ssize_t        n;
    unsigned long  size, rss, shared, text, lib, data;

    fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        return 0;
    }

    n = read(fd, buf, sizeof(buf) - 1);
    (void) close(fd);

    if (n <= 0) {
        return 0;
    }

    buf[n] = '\0';

    if (sscanf(buf, "%lu %lu %lu %lu %lu %lu", &size, &rss, &shared, &text,
               &lib, &data) != 6)
    {
        return 0;
    }

    return (rlim_t) data * (rlim_t) sysconf(_SC_PAGESIZE);
}


/*
 * The soft memory limit inside: RLIMIT_DATA, what the sandbox maps now
 * plus the cgroup's memory limit less an eighth (at least 16 MiB) for
 * what the cgroup also counts: pages of the zygote the sandbox writes to
 * (its whole data is about 13 MiB), page tables, kernel memory.  malloc()
 * then fails and Python raises MemoryError, which ends the cell and
 * keeps the interpreter, before the cgroup's OOM killer (the backstop)
 * ends the sandbox.  Files on the tmpfs are charged to the cgroup only:
 * a sandbox that filled both still meets the backstop.  None when the
 * address space limit was set by hand (ASan's shadow memory) or there
 * is no memory limit.
 */

static rlim_t
rlm_jail_data_limit(const rlm_jail_limits_t *limits, rlim_t data_now)
{
    rlim_t  mem, reserve;

    if (limits->memory_mb == 0 || limits->as_mb || data_now == 0) {
        return RLIM_INFINITY;
    }

    mem = (rlim_t) limits->memory_mb << 20;

    reserve = mem / 8;

    if (reserve < ((rlim_t) 16 << 20)) {
        reserve = (rlim_t) 16 << 20;
    }

    if (reserve + (16 << 20) > mem) {
        return data_now + (16 << 20);
    }

    return data_now + mem - reserve;
}


/*
 * Without the minimal root (rlm_sandbox_allow_missing root), where mounts
 * cannot be kept to one mount namespace (gVisor 2022: unshare(CLONE_NEWNS)
 * succeeds but mounts still show in the parent, and pivot_root and bind
 * mounts fail), the manager mounts nothing.  It builds the same tree in
 * <runtime_dir>/jail-root out of hard links to the files of the ro_binds
 * (no copy; the files stay root's and read-only to sandboxes), their
 * symbolic links, /lib-style top-level links, the five /dev nodes and a
 * /tmp nobody can list (0711).  A sandbox chroot()s into it (and loses
 * CAP_SYS_CHROOT with the rest) and works in /tmp/<name>, mode 0700, its
 * own uid; rlm_jail_release() removes that.  No /proc, /etc or /var is
 * in there.  The directory has no size limit but RLIMIT_FSIZE per file.
 */

static rlm_jail_conf_t  *rlm_jail_linking;


static int
rlm_jail_link_entry(const char *path, const struct stat *st, int flag,
    struct FTW *ftw)
{
    char     dst[PATH_MAX], target[PATH_MAX];
    ssize_t  n;

    (void) ftw;

    if ((size_t) snprintf(dst, sizeof(dst), "%s%s",
                          rlm_jail_linking->root_dir, path)
        >= sizeof(dst))
    {
        return 0;
    }

    switch (flag) {

    case FTW_D:
        if (mkdir(dst, st->st_mode & 0755) != 0 && errno != EEXIST) {
            return -1;
        }
        break;

    case FTW_F:
        if (link(path, dst) != 0 && errno != EEXIST) {
            return -1;
        }
        break;

    case FTW_SL:
        n = readlink(path, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            if (symlink(target, dst) != 0 && errno != EEXIST) {
                return -1;
            }
        }
        break;

    default:
        /* unreadable directories and the like: left out */
        break;
    }

    return 0;
}


static int
rlm_jail_build_linked_root(rlm_jail_conf_t *conf)
{
    unsigned     i;
    ssize_t      n;
    char         dst[PATH_MAX], target[PATH_MAX], *slash;
    struct stat  st;

    static const char  *top_links[] = { "/lib", "/lib64", "/bin", "/sbin",
                                        NULL };

    rlm_jail_linking = conf;

    for (i = 0; i < conf->nro_binds; i++) {
        if (stat(conf->ro_binds[i], &st) != 0) {
            continue;
        }

        /* the parents of the tree, owned by root, 0755 */
        snprintf(dst, sizeof(dst), "%s%s", conf->root_dir,
                 conf->ro_binds[i]);
        slash = strrchr(dst, '/');
        if (slash != NULL) {
            *slash = '\0';
            if (rlm_jail_mkdirs(dst, strlen(conf->root_dir), 0755) != 0) {
                return rlm_jail_fail(conf, "mkdir %s", dst);
            }
        }

        if (nftw(conf->ro_binds[i], rlm_jail_link_entry, 8, FTW_PHYS)
            != 0)
        {
            return rlm_jail_fail(conf, "hard links of %s",
                                 conf->ro_binds[i]);
        }
    }

    for (i = 0; top_links[i] != NULL; i++) {
        n = readlink(top_links[i], target, sizeof(target) - 1);
        if (n <= 0) {
            continue;
        }
        target[n] = '\0';
        snprintf(dst, sizeof(dst), "%s%s", conf->root_dir, top_links[i]);
        if (symlink(target, dst) != 0 && errno != EEXIST) {
            return rlm_jail_fail(conf, "symlink %s", dst);
        }
    }

    /*
     * The device nodes on a tmpfs of their own (gVisor's gofer root takes
     * no nodes); this mount is seen outside our namespace there, which is
     * harmless: it is our own directory.
     */
    snprintf(dst, sizeof(dst), "%s/dev", conf->root_dir);
    if ((mkdir(dst, 0755) != 0 && errno != EEXIST)
        || mount("rlm-dev", dst, "tmpfs", MS_NOSUID | MS_NOEXEC,
                 "size=16k,mode=0755") != 0)
    {
        return rlm_jail_fail(conf, "tmpfs on %s", dst);
    }

    for (i = 0; rlm_jail_devices[i].name != NULL; i++) {
        snprintf(dst, sizeof(dst), "%s/dev/%s", conf->root_dir,
                 rlm_jail_devices[i].name);

        if (mknod(dst, S_IFCHR | 0666, makedev(1, rlm_jail_devices[i].minor))
            != 0 && errno != EEXIST)
        {
            return rlm_jail_fail(conf, "mknod %s", dst);
        }

        (void) chmod(dst, 0666);
    }

    snprintf(dst, sizeof(dst), "%s/tmp", conf->root_dir);
    if ((mkdir(dst, 0711) != 0 && errno != EEXIST) || chmod(dst, 0711) != 0)
    {
        return rlm_jail_fail(conf, "mkdir %s", dst);
    }

    return 0;
}


static int
rlm_jail_shared_root(rlm_jail_conf_t *conf, const char *name)
{
    char  dir[PATH_MAX];

    if ((size_t) snprintf(dir, sizeof(dir), "%s/tmp/%s", conf->root_dir,
                          name)
        >= sizeof(dir))
    {
        errno = ENAMETOOLONG;
        return rlm_jail_fail(conf, "private dir");
    }

    if ((mkdir(dir, 0700) != 0 && errno != EEXIST)
        || chown(dir, conf->run_uid, conf->run_gid) != 0
        || chmod(dir, 0700) != 0)
    {
        return rlm_jail_fail(conf, "private dir %s", dir);
    }

    if (chroot(conf->root_dir) != 0) {
        return rlm_jail_fail(conf, "chroot %s", conf->root_dir);
    }

    snprintf(dir, sizeof(dir), "/tmp/%s", name);

    if (chdir(dir) != 0) {
        return rlm_jail_fail(conf, "chdir %s", dir);
    }

    return 0;
}


static int
rlm_jail_rm_entry(const char *path, const struct stat *st, int flag,
    struct FTW *ftw)
{
    (void) st;
    (void) ftw;

    (void) ((flag == FTW_DP) ? rmdir(path) : unlink(path));

    return 0;
}


static void
rlm_jail_shared_root_release(rlm_jail_conf_t *conf, const char *name)
{
    char  dir[PATH_MAX];

    if ((size_t) snprintf(dir, sizeof(dir), "%s/tmp/%s", conf->root_dir,
                          name)
        < sizeof(dir))
    {
        (void) nftw(dir, rlm_jail_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    }
}


static int
rlm_jail_rlimits(rlm_jail_conf_t *conf, const rlm_jail_limits_t *limits,
    rlim_t data_now)
{
    int            i;
    rlim_t         as;
    struct rlimit  rl;

    struct {
        int          resource;
        rlim_t       value;
        const char  *name;
    } table[10];

    if (limits->as_mb) {
        as = (rlim_t) limits->as_mb << 20;

    } else if (limits->memory_mb) {
        as = ((rlim_t) limits->memory_mb + 512) << 20;

    } else {
        as = RLIM_INFINITY;
    }

    table[0].resource = RLIMIT_AS;
    table[0].value = as;
    table[0].name = "RLIMIT_AS";

    table[1].resource = RLIMIT_CPU;
    table[1].value = limits->cpu_s ? (rlim_t) limits->cpu_s : RLIM_INFINITY;
    table[1].name = "RLIMIT_CPU";

    table[2].resource = RLIMIT_NOFILE;
    table[2].value = limits->nofile ? (rlim_t) limits->nofile : 64;
    table[2].name = "RLIMIT_NOFILE";

    /* per uid: exact only because each sandbox has its own uid */
    table[3].resource = RLIMIT_NPROC;
    table[3].value = limits->pids ? (rlim_t) limits->pids : 16;
    table[3].name = "RLIMIT_NPROC";

    table[4].resource = RLIMIT_FSIZE;
    table[4].value = limits->fsize_mb ? (rlim_t) limits->fsize_mb << 20
                                      : RLIM_INFINITY;
    table[4].name = "RLIMIT_FSIZE";

    table[5].resource = RLIMIT_CORE;
    table[5].value = 0;
    table[5].name = "RLIMIT_CORE";

    table[6].resource = RLIMIT_STACK;
    table[6].value = (rlim_t) (limits->stack_mb ? limits->stack_mb : 8)
                     << 20;
    table[6].name = "RLIMIT_STACK";

    table[7].resource = RLIMIT_MEMLOCK;
    table[7].value = 0;
    table[7].name = "RLIMIT_MEMLOCK";

    table[8].resource = RLIMIT_MSGQUEUE;
    table[8].value = 0;
    table[8].name = "RLIMIT_MSGQUEUE";

    table[9].resource = RLIMIT_DATA;
    table[9].value = rlm_jail_data_limit(limits, data_now);
    table[9].name = "RLIMIT_DATA";

    for (i = 0; i < 10; i++) {
        rl.rlim_cur = table[i].value;
        rl.rlim_max = table[i].value;

        if (setrlimit(table[i].resource, &rl) != 0) {
            /*
             * gVisor (2022) refuses RLIMIT_MSGQUEUE; the seccomp filter
             * kills on mq_open() anyway, so that one limit is a spare.
             */
            if (table[i].resource == RLIMIT_MSGQUEUE && errno == EPERM) {
                continue;
            }

            return rlm_jail_fail(conf, "setrlimit %s", table[i].name);
        }
    }

    return 0;
}


static int
rlm_jail_creds(rlm_jail_conf_t *conf)
{
    int    cap;
    uid_t  ruid, euid, suid;
    gid_t  rgid, egid, sgid;

    /* the bounding set needs CAP_SETPCAP, so it goes while we are root */
    for (cap = 0; cap <= conf->cap_last; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
            return rlm_jail_fail(conf, "drop capability %d", cap);
        }
    }

    if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) {
        return rlm_jail_fail(conf, "PR_SET_KEEPCAPS");
    }

    if (setgroups(0, NULL) != 0) {
        return rlm_jail_fail(conf, "setgroups");
    }

    if (setresgid(conf->run_gid, conf->run_gid, conf->run_gid) != 0) {
        return rlm_jail_fail(conf, "setresgid %u", (unsigned) conf->run_gid);
    }

    /* leaving uid 0 clears the permitted, effective and ambient sets */
    if (setresuid(conf->run_uid, conf->run_uid, conf->run_uid) != 0) {
        return rlm_jail_fail(conf, "setresuid %u", (unsigned) conf->run_uid);
    }

    (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);

    if (getresuid(&ruid, &euid, &suid) != 0 || ruid == 0 || euid == 0
        || suid == 0 || getresgid(&rgid, &egid, &sgid) != 0 || rgid == 0
        || egid == 0 || sgid == 0)
    {
        errno = EPERM;
        return rlm_jail_fail(conf, "still root after setresuid");
    }

    /* a uid change reset these two; set them for good now */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        return rlm_jail_fail(conf, "PR_SET_DUMPABLE");
    }

    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
        return rlm_jail_fail(conf, "PR_SET_PDEATHSIG");
    }

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return rlm_jail_fail(conf, "PR_SET_NO_NEW_PRIVS");
    }

    return 0;
}


static int
rlm_jail_is_kept(int fd, const int *keep, int nkeep)
{
    int  i;

    for (i = 0; i < nkeep; i++) {
        if (keep[i] == fd) {
            return 1;
        }
    }

    return 0;
}


/* close every fd >= 3 that is not kept */

static int
rlm_jail_close_fds(const int *keep, int nkeep)
{
    int            fd, next, i;
    struct rlimit  rl;

    fd = 3;

    for ( ;; ) {
        /* the lowest kept fd at or above fd */
        next = INT_MAX;
        for (i = 0; i < nkeep; i++) {
            if (keep[i] >= fd && keep[i] < next) {
                next = keep[i];
            }
        }

        if (syscall(SYS_close_range, (unsigned) fd,
                    next == INT_MAX ? ~0U : (unsigned) next - 1, 0) != 0)
        {
            if (errno != ENOSYS) {
                if (next == INT_MAX || next == fd) {
                    /* empty range */
                } else {
                    return -1;
                }
            }

            /* old kernel: one by one */
            if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
                rl.rlim_cur = 1024;
            }

            for (i = fd; i < (int) rl.rlim_cur
                         && (next == INT_MAX || i < next); i++)
            {
                (void) close(i);
            }
        }

        if (next == INT_MAX) {
            return 0;
        }

        fd = next + 1;
    }
}


/* 0, 1 and 2 become the jail's /dev/null unless kept */

static int
rlm_jail_stdio(rlm_jail_conf_t *conf, const int *keep, int nkeep)
{
    int  fd, target;

    for (target = 0; target < 3; target++) {
        if (rlm_jail_is_kept(target, keep, nkeep)) {
            continue;
        }

        fd = open("/dev/null", (target == 0 ? O_RDONLY : O_WRONLY));
        if (fd == -1) {
            return rlm_jail_fail(conf, "open /dev/null");
        }

        if (fd != target) {
            if (dup2(fd, target) == -1) {
                return rlm_jail_fail(conf, "dup2 /dev/null");
            }
            close(fd);
        }
    }

    return 0;
}


int
rlm_jail_enter(rlm_jail_conf_t *conf, const rlm_jail_limits_t *limits,
    int keep_fd)
{
    return rlm_jail_enter_fds(conf, limits, &keep_fd, keep_fd >= 0 ? 1 : 0);
}


int
rlm_jail_enter_fds(rlm_jail_conf_t *conf, const rlm_jail_limits_t *limits,
    const int *keep_fds, int nkeep)
{
    int     i;
    rlim_t  data_now;

    conf->err[0] = '\0';

    /* first of all, the manager's fds (control socket, other channels) */
    if (rlm_jail_close_fds(keep_fds, nkeep) != 0) {
        return rlm_jail_fail(conf, "close_range");
    }

    /* measured before the root swap takes /proc away */
    data_now = rlm_jail_data_now();

    if (rlm_jail_build_root(conf, limits) != 0) {
        return -1;
    }

    if (sethostname(conf->hostname, strlen(conf->hostname)) != 0) {
        return rlm_jail_fail(conf, "sethostname");
    }

    /*
     * gVisor (2022) refuses every setdomainname() with ENAMETOOLONG: the
     * sandbox then keeps the container's NIS domain name, in a uts
     * namespace of its own all the same.
     */
    (void) setdomainname("", 0);

    if (rlm_jail_rlimits(conf, limits, data_now) != 0) {
        return -1;
    }

    if (rlm_jail_creds(conf) != 0) {
        return -1;
    }

    /* a kept fd that is not open means the caller got its fds wrong */
    for (i = 0; i < nkeep; i++) {
        if (keep_fds[i] >= 0 && fcntl(keep_fds[i], F_GETFD) == -1) {
            return rlm_jail_fail(conf, "kept fd %d is not open",
                                 keep_fds[i]);
        }
    }

    if (clearenv() != 0) {
        return rlm_jail_fail(conf, "clearenv");
    }

    umask(077);

    /* RLIMIT_FSIZE then answers EFBIG instead of killing */
    signal(SIGXFSZ, SIG_IGN);

    if (rlm_jail_stdio(conf, keep_fds, nkeep) != 0) {
        return -1;
    }

    if (rlm_seccomp_load(conf) != 0) {
        return rlm_jail_fail(conf, "load the seccomp filter");
    }

    return 0;
}


int
rlm_jail_oom_killed(rlm_jail_conf_t *conf, const char *name)
{
    if (!rlm_jail_name_ok(name)) {
        errno = EINVAL;
        return -1;
    }

    return rlm_cgroup_oom_killed(conf, name);
}


int
rlm_jail_release(rlm_jail_conf_t *conf, const char *name)
{
    if (!rlm_jail_name_ok(name)) {
        errno = EINVAL;
        return -1;
    }

    if (conf->missing & RLM_JAIL_LAYER_ROOT) {
        rlm_jail_shared_root_release(conf, name);
    }

    return rlm_cgroup_destroy(conf, name);
}


int
rlm_jail_count(rlm_jail_conf_t *conf, const char *name)
{
    if (!rlm_jail_name_ok(name)) {
        errno = EINVAL;
        return -1;
    }

    return rlm_cgroup_count(conf, name);
}


int
rlm_jail_kill(rlm_jail_conf_t *conf, const char *name)
{
    if (!rlm_jail_name_ok(name)) {
        errno = EINVAL;
        return -1;
    }

    return rlm_cgroup_kill(conf, name);
}


int
rlm_jail_cpu_usage(rlm_jail_conf_t *conf, const char *name, uint64_t *usec)
{
    if (!rlm_jail_name_ok(name)) {
        errno = EINVAL;
        return -1;
    }

    return rlm_cgroup_cpu_usage(conf, name, usec);
}


void
rlm_jail_cleanup(rlm_jail_conf_t *conf)
{
    rlm_cgroup_cleanup(conf);

    /* the template is mounted in our private namespace only */
    if (conf->template_ready) {
        (void) umount2(conf->root_dir, MNT_DETACH);
        (void) rmdir(conf->root_dir);
        conf->template_ready = 0;
    }
}
