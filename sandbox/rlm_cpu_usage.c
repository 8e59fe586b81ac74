/*
 * How much CPU a sandbox has used, read from outside it.  The cgroup's
 * accounting is preferred: it counts every thread and process that has
 * been in the sandbox, exited ones included, in one read.  Without it
 * (no cpuacct hierarchy on v1, or the development stub jail) the
 * manager walks the sandbox's process tree in /proc.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rlm_cpu_usage.h"


#define RLM_TREE_MAX_PROCS  256     /* more than any pids limit we set */
#define RLM_TREE_MAX_DEPTH  16


typedef struct {
    uint64_t  ticks;
    unsigned  procs;
} rlm_tree_sum_t;


static ssize_t rlm_read_small(const char *path, char *buf, size_t len);
static int rlm_proc_ticks(pid_t pid, uint64_t *ticks);
static void rlm_proc_tree(pid_t pid, unsigned depth, rlm_tree_sum_t *sum);


static ssize_t
rlm_read_small(const char *path, char *buf, size_t len)
{
    int      fd;
    ssize_t  n;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }

    do {
        n = read(fd, buf, len - 1);
    } while (n < 0 && errno == EINTR);

    close(fd);

    if (n < 0) {
        return -1;
    }

    buf[n] = '\0';

    return n;
}


/*
 * utime + stime + cutime + cstime of one process (fields 14-17 of
 * /proc/<pid>/stat, in clock ticks): the process's own line covers all
 * its threads, live and exited, and the children it has reaped.
 */
static int
rlm_proc_ticks(pid_t pid, uint64_t *ticks)
{
    char                path[64], buf[1024], *p, *end;
    int                 field;
    unsigned long long  v;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);

    if (rlm_read_small(path, buf, sizeof(buf)) <= 0) {
        return -1;
    }

    /* the command name may hold spaces and parentheses: skip to the last */
    p = strrchr(buf, ')');
    if (p == NULL) {
        return -1;
    }

    p++;
    *ticks = 0;

    /* field 3 (state) follows ")"; count on to field 17 */
    for (field = 3; field <= 17; field++) {
        while (*p == ' ') {
            p++;
        }

        if (*p == '\0') {
            return -1;
        }

        if (field >= 14) {
            errno = 0;
            v = strtoull(p, &end, 10);

            if (end == p || errno != 0) {
                return -1;
            }

            *ticks += v;
            p = end;
            continue;
        }

        p += strcspn(p, " ");
    }

    return 0;
}


/* the process and, through each thread's "children" list, its tree */
static void
rlm_proc_tree(pid_t pid, unsigned depth, rlm_tree_sum_t *sum)
{
    DIR            *d;
    struct dirent  *de;
    char            path[96], buf[4096], *p, *end;
    uint64_t        ticks;
    long            child;

    if (sum->procs >= RLM_TREE_MAX_PROCS || rlm_proc_ticks(pid, &ticks) != 0)
    {
        return;
    }

    sum->ticks += ticks;
    sum->procs++;

    if (depth >= RLM_TREE_MAX_DEPTH) {
        return;
    }

    snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);

    d = opendir(path);
    if (d == NULL) {
        return;
    }

    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9') {
            continue;
        }

        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children",
                 (int) pid, de->d_name);

        if (rlm_read_small(path, buf, sizeof(buf)) <= 0) {
            continue;
        }

        for (p = buf; *p != '\0'; p = end) {
            child = strtol(p, &end, 10);
            if (end == p) {
                break;
            }

            if (child > 0) {
                rlm_proc_tree((pid_t) child, depth + 1, sum);
            }
        }
    }

    closedir(d);
}


int
rlm_cpu_usage_us(rlm_jail_conf_t *jail, const char *id, pid_t pid,
    uint64_t *usec)
{
    long            hz;
    rlm_tree_sum_t  sum;

    if (rlm_jail_cpu_usage(jail, id, usec) == 0) {
        return 0;
    }

    /* one source per host: /proc only where there is no accounting */
    if (errno != ENOTSUP || pid <= 0) {
        return -1;
    }

    sum.ticks = 0;
    sum.procs = 0;
    rlm_proc_tree(pid, 0, &sum);

    if (sum.procs == 0) {
        return -1;
    }

    hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0) {
        hz = 100;
    }

    *usec = sum.ticks * 1000000 / (uint64_t) hz;

    return 0;
}
