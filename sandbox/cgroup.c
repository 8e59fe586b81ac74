/*
 * cgroup handling for the jail: one parent cgroup per manager instance,
 * one child cgroup per sandbox, on cgroup v1 (separate memory, pids and
 * cpu hierarchies) or v2 (unified hierarchy).
 *
 * The parent is created under the manager's own cgroup, so whatever limits
 * the host put on the manager also bound its sandboxes.
 *
 * On v1 a sandbox also gets a cgroup in the cpuacct hierarchy when that
 * one is mounted on its own (with cpu, it shares the cpu cgroup): the
 * manager reads there how much CPU the whole sandbox has used.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"


#define RLM_CG_PATH  1024     /* conf dirs are 512, plus a file name */


static int rlm_cg_write(const char *dir, const char *file, const char *val);
static ssize_t rlm_cg_read(const char *dir, const char *file, char *buf,
    size_t len);
static int rlm_cg_exists(const char *dir, const char *file);
static int rlm_cg_own_path(const char *controller, char *out, size_t len);
static int rlm_cg_v1_mount(const char *controller, char *out, size_t len);
static int rlm_cg_parent_dir(const char *mount, const char *controller,
    const char *name, char *out, size_t len);
static int rlm_cg_mkdir(const char *dir);
static int rlm_cg_kill_remove(const char *dir, int v2);
static void rlm_cg_remove_children(const char *dir, int v2,
    const char *skip);
static int rlm_cg_v2_try(rlm_jail_conf_t *conf, const char *anchor,
    int may_move, char *err, size_t errlen);
static int rlm_cg_v2_init(rlm_jail_conf_t *conf, char *err, size_t errlen);
static void rlm_cg_sleep_ms(unsigned ms);
static int rlm_cg_acct_own(rlm_jail_conf_t *conf);


static int
rlm_cg_write(const char *dir, const char *file, const char *val)
{
    int      fd, saved;
    char     path[RLM_CG_PATH];
    size_t   len;
    ssize_t  n;

    if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, file)
        >= sizeof(path))
    {
        errno = ENAMETOOLONG;
        return -1;
    }

    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd == -1) {
        return -1;
    }

    len = strlen(val);
    n = write(fd, val, len);
    saved = errno;
    close(fd);

    if (n != (ssize_t) len) {
        errno = (n == -1) ? saved : EIO;
        return -1;
    }

    return 0;
}


static ssize_t
rlm_cg_read(const char *dir, const char *file, char *buf, size_t len)
{
    int      fd;
    char     path[RLM_CG_PATH];
    size_t   got;
    ssize_t  n;

    if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, file)
        >= sizeof(path))
    {
        errno = ENAMETOOLONG;
        return -1;
    }

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        return -1;
    }

    got = 0;

    while (got + 1 < len) {
        n = read(fd, buf + got, len - 1 - got);
        if (n == -1 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        got += n;
    }

    close(fd);
    buf[got] = '\0';

    return got;
}


static int
rlm_cg_exists(const char *dir, const char *file)
{
    char  path[RLM_CG_PATH];

    snprintf(path, sizeof(path), "%s/%s", dir, file);

    return access(path, F_OK) == 0;
}


static void
rlm_cg_sleep_ms(unsigned ms)
{
    struct timespec  ts;

    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long) (ms % 1000) * 1000000L;

    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
        /* void */
    }
}


/*
 * Our own cgroup path for a v1 controller (or "" for v2) from
 * /proc/self/cgroup: lines "id:controller,controller:/path".
 */

static int
rlm_cg_own_path(const char *controller, char *out, size_t len)
{
    FILE    *f;
    char     line[1024], *ctl, *path, *tok, *save;
    int      found;

    f = fopen("/proc/self/cgroup", "re");
    if (f == NULL) {
        return -1;
    }

    found = 0;

    while (!found && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';

        ctl = strchr(line, ':');
        if (ctl == NULL) {
            continue;
        }
        ctl++;

        path = strchr(ctl, ':');
        if (path == NULL) {
            continue;
        }
        *path++ = '\0';

        if (controller[0] == '\0') {
            found = (ctl[0] == '\0' && line[0] == '0');

        } else {
            for (tok = strtok_r(ctl, ",", &save); tok != NULL;
                 tok = strtok_r(NULL, ",", &save))
            {
                if (strcmp(tok, controller) == 0) {
                    found = 1;
                    break;
                }
            }
        }

        if (found) {
            if ((size_t) snprintf(out, len, "%s", path) >= len) {
                found = 0;
            }
        }
    }

    fclose(f);

    return found ? 0 : -1;
}


/* the mount point of the v1 hierarchy that carries controller */

static int
rlm_cg_v1_mount(const char *controller, char *out, size_t len)
{
    FILE  *f;
    char   line[1024], *fields[4], *p, *tok, *save;
    int    found, i;

    f = fopen("/proc/self/mounts", "re");
    if (f == NULL) {
        return -1;
    }

    found = 0;

    while (!found && fgets(line, sizeof(line), f) != NULL) {
        p = line;

        for (i = 0; i < 4; i++) {
            fields[i] = strsep(&p, " ");
            if (fields[i] == NULL) {
                break;
            }
        }

        if (i < 4 || strcmp(fields[2], "cgroup") != 0) {
            continue;
        }

        for (tok = strtok_r(fields[3], ",", &save); tok != NULL;
             tok = strtok_r(NULL, ",", &save))
        {
            if (strcmp(tok, controller) == 0) {
                found = 1;
                break;
            }
        }

        if (found && (size_t) snprintf(out, len, "%s", fields[1]) >= len) {
            found = 0;
        }
    }

    fclose(f);

    return found ? 0 : -1;
}


/* <mount>/<own path>/<name>; falls back to <mount>/<name> */

static int
rlm_cg_parent_dir(const char *mount, const char *controller,
    const char *name, char *out, size_t len)
{
    char         own[RLM_CG_PATH], dir[RLM_CG_PATH];
    struct stat  st;

    if (rlm_cg_own_path(controller, own, sizeof(own)) != 0
        || strcmp(own, "/") == 0)
    {
        own[0] = '\0';
    }

    if ((size_t) snprintf(dir, sizeof(dir), "%s%s", mount, own)
        >= sizeof(dir))
    {
        return -1;
    }

    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof(dir), "%s", mount);
    }

    if ((size_t) snprintf(out, len, "%s/%s", dir, name) >= len) {
        return -1;
    }

    return 0;
}


static int
rlm_cg_mkdir(const char *dir)
{
    if (mkdir(dir, 0755) == -1 && errno != EEXIST) {
        return -1;
    }

    return 0;
}


/*
 * Kill every process of a cgroup (and of its descendants), then remove it.
 * Tasks leave the cgroup when they exit, before they are reaped, so this
 * does not depend on the manager's waitpid().
 */

static int
rlm_cg_kill_remove(const char *dir, int v2)
{
    char      buf[8192], *p, *end;
    long      pid;
    ssize_t   n;
    unsigned  round;

    if (access(dir, F_OK) != 0) {
        return 0;
    }

    rlm_cg_remove_children(dir, v2, NULL);

    if (v2) {
        /* cgroup.kill exists since Linux 5.14 */
        (void) rlm_cg_write(dir, "cgroup.kill", "1");
    }

    for (round = 0; round < 2000; round++) {
        n = rlm_cg_read(dir, "cgroup.procs", buf, sizeof(buf));
        if (n <= 0) {
            break;
        }

        for (p = buf; *p != '\0'; p = end) {
            pid = strtol(p, &end, 10);
            if (end == p) {
                break;
            }
            if (pid > 0) {
                (void) kill((pid_t) pid, SIGKILL);
            }
        }

        rlm_cg_sleep_ms(1);
    }

    for (round = 0; round < 2000; round++) {
        if (rmdir(dir) == 0 || errno == ENOENT) {
            return 0;
        }
        if (errno != EBUSY) {
            return -1;
        }
        rlm_cg_sleep_ms(1);
    }

    return -1;
}


static void
rlm_cg_remove_children(const char *dir, int v2, const char *skip)
{
    DIR            *d;
    struct dirent  *de;
    char            sub[RLM_CG_PATH];

    d = opendir(dir);
    if (d == NULL) {
        return;
    }

    while ((de = readdir(d)) != NULL) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.') {
            continue;
        }
        if (skip != NULL && strcmp(de->d_name, skip) == 0) {
            continue;
        }
        if ((size_t) snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name)
            >= sizeof(sub))
        {
            continue;
        }
        (void) rlm_cg_kill_remove(sub, v2);
    }

    closedir(d);
}


/*
 * v2: controllers must be enabled in the subtree_control of every ancestor
 * of a sandbox cgroup, and a non-root cgroup with processes cannot enable
 * them ("no internal processes").  The parent cgroup <anchor>/<name> is
 * tried first under our own cgroup: if we are alone in it, we move into
 * <anchor>/<name>/_manager to make it enableable.  If other processes
 * share our cgroup (nginx spawned us inside nginx.service), we put the
 * parent next to our cgroup instead, under its parent (a slice, which has
 * no processes and usually has memory and pids enabled already).
 */

static int
rlm_cg_v2_try(rlm_jail_conf_t *conf, const char *anchor, int may_move,
    char *err, size_t errlen)
{
    int    moved;
    char   base[sizeof(conf->cg_memory)], mgr[RLM_CG_PATH], pid[32];

    if ((size_t) snprintf(base, sizeof(base), "%s/%s", anchor,
                          conf->cgroup_name) >= sizeof(base))
    {
        snprintf(err, errlen, "cgroup v2: path too long");
        return -1;
    }

    snprintf(mgr, sizeof(mgr), "%s/_manager", base);
    snprintf(pid, sizeof(pid), "%d", (int) getpid());

    /* leftovers of a previous run, but not a manager's own leaf */
    rlm_cg_remove_children(base, 1, "_manager");

    if (rlm_cg_mkdir(base) != 0) {
        snprintf(err, errlen, "cgroup v2: mkdir %s: %s", base,
                 strerror(errno));
        return -1;
    }

    moved = 0;

    if (rlm_cg_write(anchor, "cgroup.subtree_control", "+memory +pids")
        != 0)
    {
        if (errno != EBUSY || !may_move) {
            snprintf(err, errlen, "cgroup v2: enabling memory and pids in "
                     "%s: %s", anchor, strerror(errno));
            goto failed;
        }

        if (rlm_cg_mkdir(mgr) != 0
            || rlm_cg_write(mgr, "cgroup.procs", pid) != 0)
        {
            snprintf(err, errlen, "cgroup v2: moving into %s: %s", mgr,
                     strerror(errno));
            goto failed;
        }

        moved = 1;

        if (rlm_cg_write(anchor, "cgroup.subtree_control", "+memory +pids")
            != 0)
        {
            snprintf(err, errlen, "cgroup v2: %s holds other processes "
                     "(%s)", anchor, strerror(errno));
            goto failed;
        }
    }

    /* cpu is optional: without it only cpu_pct and cpu_weight are lost */
    (void) rlm_cg_write(anchor, "cgroup.subtree_control", "+cpu");

    if (rlm_cg_write(base, "cgroup.subtree_control", "+memory +pids") != 0)
    {
        snprintf(err, errlen, "cgroup v2: enabling controllers in %s: %s",
                 base, strerror(errno));
        goto failed;
    }

    memcpy(conf->cg_memory, base, sizeof(base));
    memcpy(conf->cg_pids, base, sizeof(base));
    memcpy(conf->cg_cpu, base, sizeof(base));

    if (rlm_cg_write(base, "cgroup.subtree_control", "+cpu") != 0) {
        conf->cg_cpu[0] = '\0';
    }

    return 0;

failed:

    if (moved) {
        (void) rlm_cg_write(anchor, "cgroup.procs", pid);
        (void) rmdir(mgr);
    }

    (void) rmdir(base);

    return -1;
}


static int
rlm_cg_v2_init(rlm_jail_conf_t *conf, char *err, size_t errlen)
{
    char         own[RLM_CG_PATH], path[RLM_CG_PATH], err1[256];
    struct stat  st;

    if (rlm_cg_own_path("", path, sizeof(path)) != 0
        || strcmp(path, "/") == 0)
    {
        path[0] = '\0';
    }

    /* a restarted manager may find itself in the leaf it made before */
    if ((size_t) snprintf(own, sizeof(own), "/%s/_manager",
                          conf->cgroup_name) < sizeof(own)
        && strlen(path) >= strlen(own)
        && strcmp(path + strlen(path) - strlen(own), own) == 0)
    {
        path[strlen(path) - strlen(own)] = '\0';
    }

    if ((size_t) snprintf(own, sizeof(own), "%s%s", conf->cgroup_root, path)
        >= sizeof(conf->cg_memory) - 80
        || stat(own, &st) != 0 || !S_ISDIR(st.st_mode))
    {
        snprintf(own, sizeof(own), "%s", conf->cgroup_root);
    }

    if (rlm_cg_v2_try(conf, own, 1, err1, sizeof(err1)) == 0) {
        return 0;
    }

    if (strcmp(own, conf->cgroup_root) != 0) {
        *strrchr(own, '/') = '\0';

        if (rlm_cg_v2_try(conf, own, 0, err, errlen) == 0) {
            return 0;
        }
    }

    snprintf(err, errlen, "%s; run the manager in a cgroup of its own "
             "(systemd: Delegate=yes)", err1);

    return -1;
}


/* v1 only: the sandboxes' cpuacct cgroups are a hierarchy of their own */

static int
rlm_cg_acct_own(rlm_jail_conf_t *conf)
{
    return conf->cgroup_version == RLM_CGROUP_V1
           && conf->cg_cpuacct[0] != '\0'
           && strcmp(conf->cg_cpuacct, conf->cg_cpu) != 0;
}


int
rlm_cgroup_init(rlm_jail_conf_t *conf, char *err, size_t errlen)
{
    char  mount[RLM_CG_PATH], cpu_mount[RLM_CG_PATH];

    if (rlm_cg_exists(conf->cgroup_root, "cgroup.controllers")) {
        conf->cgroup_version = RLM_CGROUP_V2;
        conf->has_swap_max = 0;

        return rlm_cg_v2_init(conf, err, errlen);
    }

    if (rlm_cg_v1_mount("memory", mount, sizeof(mount)) != 0) {
        snprintf(err, errlen, "no cgroup v2 at %s and no cgroup v1 memory "
                 "hierarchy mounted", conf->cgroup_root);
        return -1;
    }

    conf->cgroup_version = RLM_CGROUP_V1;

    if (rlm_cg_parent_dir(mount, "memory", conf->cgroup_name,
                          conf->cg_memory, sizeof(conf->cg_memory)) != 0)
    {
        snprintf(err, errlen, "cgroup v1: memory path too long");
        return -1;
    }

    if (rlm_cg_v1_mount("pids", mount, sizeof(mount)) != 0
        || rlm_cg_parent_dir(mount, "pids", conf->cgroup_name,
                             conf->cg_pids, sizeof(conf->cg_pids)) != 0)
    {
        snprintf(err, errlen, "cgroup v1: no pids hierarchy mounted");
        return -1;
    }

    if (rlm_cg_v1_mount("cpu", cpu_mount, sizeof(cpu_mount)) != 0
        || rlm_cg_parent_dir(cpu_mount, "cpu", conf->cgroup_name,
                             conf->cg_cpu, sizeof(conf->cg_cpu)) != 0)
    {
        conf->cg_cpu[0] = '\0';
    }

    /* CPU usage: in the cpu cgroup when mounted with it, else its own */

    if (rlm_cg_v1_mount("cpuacct", mount, sizeof(mount)) != 0) {
        conf->cg_cpuacct[0] = '\0';

    } else if (conf->cg_cpu[0] != '\0' && strcmp(mount, cpu_mount) == 0) {
        memcpy(conf->cg_cpuacct, conf->cg_cpu, sizeof(conf->cg_cpuacct));

    } else if (rlm_cg_parent_dir(mount, "cpuacct", conf->cgroup_name,
                                 conf->cg_cpuacct,
                                 sizeof(conf->cg_cpuacct)) != 0)
    {
        conf->cg_cpuacct[0] = '\0';
    }

    rlm_cg_remove_children(conf->cg_memory, 0, NULL);
    rlm_cg_remove_children(conf->cg_pids, 0, NULL);

    if (conf->cg_cpu[0] != '\0') {
        rlm_cg_remove_children(conf->cg_cpu, 0, NULL);
    }

    if (rlm_cg_acct_own(conf)) {
        rlm_cg_remove_children(conf->cg_cpuacct, 0, NULL);

        if (rlm_cg_mkdir(conf->cg_cpuacct) != 0) {
            /* the manager then sums /proc for a sandbox's CPU usage */
            conf->cg_cpuacct[0] = '\0';
        }
    }

    if (rlm_cg_mkdir(conf->cg_memory) != 0
        || rlm_cg_mkdir(conf->cg_pids) != 0
        || (conf->cg_cpu[0] != '\0' && rlm_cg_mkdir(conf->cg_cpu) != 0))
    {
        snprintf(err, errlen, "cgroup v1: mkdir of the parent cgroups "
                 "failed: %s", strerror(errno));
        return -1;
    }

    conf->has_memsw = rlm_cg_exists(conf->cg_memory,
                                    "memory.memsw.limit_in_bytes");

    return 0;
}


static int
rlm_cg_dir(char *out, size_t len, const char *parent, const char *name)
{
    if (parent[0] == '\0') {
        out[0] = '\0';
        return 0;
    }

    if ((size_t) snprintf(out, len, "%s/%s", parent, name) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }

    return 0;
}


int
rlm_cgroup_create(rlm_jail_conf_t *conf, const char *name,
    const rlm_jail_limits_t *limits, char *err, size_t errlen)
{
    int         v2;
    char        mem[RLM_CG_PATH], pids[RLM_CG_PATH], cpu[RLM_CG_PATH];
    char        acct[RLM_CG_PATH], val[64];
    const char  *what;

    v2 = (conf->cgroup_version == RLM_CGROUP_V2);

    if (rlm_cg_dir(mem, sizeof(mem), conf->cg_memory, name) != 0
        || rlm_cg_dir(pids, sizeof(pids), conf->cg_pids, name) != 0
        || rlm_cg_dir(cpu, sizeof(cpu), conf->cg_cpu, name) != 0
        || rlm_cg_dir(acct, sizeof(acct), conf->cg_cpuacct, name) != 0)
    {
        snprintf(err, errlen, "cgroup path too long");
        return -1;
    }

    what = "mkdir";

    if (rlm_cg_mkdir(mem) != 0) {
        goto failed;
    }

    if (!v2) {
        if (rlm_cg_mkdir(pids) != 0) {
            goto failed;
        }
        if (cpu[0] != '\0' && rlm_cg_mkdir(cpu) != 0) {
            goto failed;
        }
        if (rlm_cg_acct_own(conf) && rlm_cg_mkdir(acct) != 0) {
            goto failed;
        }
    }

    if (limits->memory_mb) {
        snprintf(val, sizeof(val), "%llu",
                 (unsigned long long) limits->memory_mb << 20);

        if (v2) {
            what = "memory.max";
            if (rlm_cg_write(mem, "memory.max", val) != 0) {
                goto failed;
            }

            /* no swap: absent when swap accounting is off (then moot) */
            if (rlm_cg_exists(mem, "memory.swap.max")
                && rlm_cg_write(mem, "memory.swap.max", "0") != 0)
            {
                what = "memory.swap.max";
                goto failed;
            }

            /* an OOM kill takes the whole sandbox, not one thread */
            (void) rlm_cg_write(mem, "memory.oom.group", "1");

        } else {
            what = "memory.limit_in_bytes";
            if (rlm_cg_write(mem, "memory.limit_in_bytes", val) != 0) {
                goto failed;
            }

            if (conf->has_memsw) {
                what = "memory.memsw.limit_in_bytes";
                if (rlm_cg_write(mem, "memory.memsw.limit_in_bytes", val)
                    != 0)
                {
                    goto failed;
                }
            }

            (void) rlm_cg_write(mem, "memory.swappiness", "0");
        }
    }

    if (limits->pids) {
        what = "pids.max";
        snprintf(val, sizeof(val), "%u", limits->pids);
        if (rlm_cg_write(pids[0] != '\0' && !v2 ? pids : mem, "pids.max",
                         val) != 0)
        {
            goto failed;
        }
    }

    if (cpu[0] != '\0' || (v2 && conf->cg_cpu[0] != '\0')) {
        const char  *dir = v2 ? mem : cpu;

        if (limits->cpu_pct) {
            if (v2) {
                what = "cpu.max";
                snprintf(val, sizeof(val), "%u 100000",
                         limits->cpu_pct * 1000);
                if (rlm_cg_write(dir, "cpu.max", val) != 0) {
                    goto failed;
                }

            } else {
                what = "cpu.cfs_quota_us";
                snprintf(val, sizeof(val), "%u", limits->cpu_pct * 1000);
                if (rlm_cg_write(dir, "cpu.cfs_period_us", "100000") != 0
                    || rlm_cg_write(dir, "cpu.cfs_quota_us", val) != 0)
                {
                    goto failed;
                }
            }
        }

        if (limits->cpu_weight) {
            if (v2) {
                what = "cpu.weight";
                snprintf(val, sizeof(val), "%u", limits->cpu_weight);
                if (rlm_cg_write(dir, "cpu.weight", val) != 0) {
                    goto failed;
                }

            } else {
                what = "cpu.shares";
                snprintf(val, sizeof(val), "%u",
                         limits->cpu_weight * 1024 / 100);
                if (rlm_cg_write(dir, "cpu.shares", val) != 0) {
                    goto failed;
                }
            }
        }
    }

    return 0;

failed:

    snprintf(err, errlen, "cgroup %s (%s): %s", name, what, strerror(errno));
    (void) rlm_cgroup_destroy(conf, name);

    return -1;
}


/* called in the sandbox itself, before it leaves the host's mounts */

int
rlm_cgroup_join(rlm_jail_conf_t *conf, const char *name)
{
    char  dir[RLM_CG_PATH];

    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_memory, name) != 0
        || rlm_cg_write(dir, "cgroup.procs", "0") != 0)
    {
        return -1;
    }

    if (conf->cgroup_version == RLM_CGROUP_V2) {
        return 0;
    }

    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_pids, name) != 0
        || rlm_cg_write(dir, "cgroup.procs", "0") != 0)
    {
        return -1;
    }

    if (conf->cg_cpu[0] != '\0') {
        if (rlm_cg_dir(dir, sizeof(dir), conf->cg_cpu, name) != 0
            || rlm_cg_write(dir, "cgroup.procs", "0") != 0)
        {
            return -1;
        }
    }

    if (rlm_cg_acct_own(conf)) {
        if (rlm_cg_dir(dir, sizeof(dir), conf->cg_cpuacct, name) != 0
            || rlm_cg_write(dir, "cgroup.procs", "0") != 0)
        {
            return -1;
        }
    }

    return 0;
}


int
rlm_cgroup_destroy(rlm_jail_conf_t *conf, const char *name)
{
    int   rc, v2;
    char  dir[RLM_CG_PATH];

    if (conf->cgroup_version == RLM_CGROUP_NONE) {
        /* running without cgroups (rlm_sandbox_allow_missing) */
        return 0;
    }

    v2 = (conf->cgroup_version == RLM_CGROUP_V2);
    rc = 0;

    /* memory first: that is where v2 keeps everything */
    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_memory, name) == 0
        && dir[0] != '\0' && rlm_cg_kill_remove(dir, v2) != 0)
    {
        rc = -1;
    }

    if (v2) {
        return rc;
    }

    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_pids, name) == 0
        && dir[0] != '\0' && rlm_cg_kill_remove(dir, 0) != 0)
    {
        rc = -1;
    }

    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_cpu, name) == 0
        && dir[0] != '\0' && rlm_cg_kill_remove(dir, 0) != 0)
    {
        rc = -1;
    }

    if (rlm_cg_acct_own(conf)
        && rlm_cg_dir(dir, sizeof(dir), conf->cg_cpuacct, name) == 0
        && rlm_cg_kill_remove(dir, 0) != 0)
    {
        rc = -1;
    }

    return rc;
}


int
rlm_cgroup_oom_killed(rlm_jail_conf_t *conf, const char *name)
{
    char        dir[RLM_CG_PATH], buf[2048], *p;
    const char  *file;

    if (conf->cgroup_version == RLM_CGROUP_NONE) {
        /* running without cgroups (rlm_sandbox_allow_missing) */
        return 0;
    }

    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_memory, name) != 0) {
        return -1;
    }

    file = (conf->cgroup_version == RLM_CGROUP_V2) ? "memory.events"
                                                   : "memory.oom_control";

    if (rlm_cg_read(dir, file, buf, sizeof(buf)) < 0) {
        return -1;
    }

    /* both files carry a line "oom_kill N" */
    for (p = buf; p != NULL; p = strchr(p, '\n')) {
        if (*p == '\n') {
            p++;
        }
        if (strncmp(p, "oom_kill ", 9) == 0) {
            return strtol(p + 9, NULL, 10) > 0;
        }
    }

    return 0;
}


int
rlm_cgroup_count(rlm_jail_conf_t *conf, const char *name)
{
    int      count;
    char     dir[RLM_CG_PATH], buf[8192], *p;
    ssize_t  n;

    if (conf->cgroup_version == RLM_CGROUP_NONE) {
        errno = ENOTSUP;
        return -1;
    }

    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_memory, name) != 0) {
        return -1;
    }

    n = rlm_cg_read(dir, "cgroup.procs", buf, sizeof(buf));
    if (n < 0) {
        return -1;
    }

    count = 0;

    for (p = buf; *p != '\0'; p++) {
        if (*p == '\n') {
            count++;
        }
    }

    return count;
}


/*
 * SIGKILL to every process of the sandbox's cgroup, without waiting and
 * without removing it (that is rlm_cgroup_destroy's job once the manager
 * has reaped the sandbox).  v2 uses cgroup.kill when the kernel has it;
 * otherwise each pid of cgroup.procs (the memory hierarchy holds every
 * process of a sandbox on v1).  Returns how many processes were
 * signalled (0 for cgroup.kill), -1 if there is no such cgroup.
 */

int
rlm_cgroup_kill(rlm_jail_conf_t *conf, const char *name)
{
    int      count;
    char     dir[RLM_CG_PATH], buf[8192], *p, *end;
    long     pid;

    if (conf->cgroup_version == RLM_CGROUP_NONE) {
        /* running without cgroups (rlm_sandbox_allow_missing) */
        return 0;
    }

    if (rlm_cg_dir(dir, sizeof(dir), conf->cg_memory, name) != 0
        || dir[0] == '\0')
    {
        return -1;
    }

    if (conf->cgroup_version == RLM_CGROUP_V2
        && rlm_cg_write(dir, "cgroup.kill", "1") == 0)
    {
        return 0;
    }

    if (rlm_cg_read(dir, "cgroup.procs", buf, sizeof(buf)) < 0) {
        return -1;
    }

    count = 0;

    for (p = buf; *p != '\0'; p = end) {
        pid = strtol(p, &end, 10);
        if (end == p) {
            break;
        }
        if (pid > 0 && kill((pid_t) pid, SIGKILL) == 0) {
            count++;
        }
    }

    return count;
}


/*
 * CPU time used so far by every process that has been in the sandbox's
 * cgroup, in microseconds: v2 cpu.stat usage_usec (present whether or
 * not the cpu controller is enabled), v1 cpuacct.usage (nanoseconds).
 * -1 with errno ENOTSUP when there is no such accounting here.
 */

int
rlm_cgroup_cpu_usage(rlm_jail_conf_t *conf, const char *name,
    uint64_t *usec)
{
    char        dir[RLM_CG_PATH], buf[1024], *p, *end;
    uint64_t    v;
    const char  *parent, *file;

    if (conf->cgroup_version == RLM_CGROUP_NONE) {
        errno = ENOTSUP;
        return -1;
    }

    if (conf->cgroup_version == RLM_CGROUP_V2) {
        parent = conf->cg_memory;
        file = "cpu.stat";

    } else {
        parent = conf->cg_cpuacct;
        file = "cpuacct.usage";
    }

    if (parent[0] == '\0') {
        errno = ENOTSUP;
        return -1;
    }

    if (rlm_cg_dir(dir, sizeof(dir), parent, name) != 0
        || rlm_cg_read(dir, file, buf, sizeof(buf)) <= 0)
    {
        return -1;
    }

    p = buf;

    if (conf->cgroup_version == RLM_CGROUP_V2) {
        /* "usage_usec N" is the first line; look for it anyway */
        p = strstr(buf, "usage_usec ");
        if (p == NULL || (p != buf && p[-1] != '\n')) {
            errno = EINVAL;
            return -1;
        }
        p += sizeof("usage_usec ") - 1;
    }

    errno = 0;
    v = strtoull(p, &end, 10);

    if (end == p || errno != 0) {
        errno = EINVAL;
        return -1;
    }

    *usec = (conf->cgroup_version == RLM_CGROUP_V2) ? v : v / 1000;

    return 0;
}


void
rlm_cgroup_cleanup(rlm_jail_conf_t *conf)
{
    int  v2;

    if (conf->cgroup_version == RLM_CGROUP_NONE) {
        return;
    }

    v2 = (conf->cgroup_version == RLM_CGROUP_V2);

    if (conf->cg_memory[0] != '\0') {
        rlm_cg_remove_children(conf->cg_memory, v2, "_manager");
        (void) rmdir(conf->cg_memory);
    }

    if (v2) {
        return;
    }

    if (conf->cg_pids[0] != '\0') {
        rlm_cg_remove_children(conf->cg_pids, 0, NULL);
        (void) rmdir(conf->cg_pids);
    }

    if (rlm_cg_acct_own(conf)) {
        rlm_cg_remove_children(conf->cg_cpuacct, 0, NULL);
        (void) rmdir(conf->cg_cpuacct);
    }

    if (conf->cg_cpu[0] != '\0') {
        rlm_cg_remove_children(conf->cg_cpu, 0, NULL);
        (void) rmdir(conf->cg_cpu);
    }
}
