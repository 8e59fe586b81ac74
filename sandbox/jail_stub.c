/*
 * Development stand-in for the jail (make JAIL=stub): plain fork, fds
 * closed, PDEATHSIG.  No isolation at all; never use it in production.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "jail.h"


void
rlm_jail_conf_default(rlm_jail_conf_t *conf)
{
    memset(conf, 0, sizeof(*conf));
    conf->cgroup_name = "rlm-sandboxd";
}


void
rlm_jail_limits_default(rlm_jail_limits_t *limits)
{
    memset(limits, 0, sizeof(*limits));
}


int
rlm_jail_init(rlm_jail_conf_t *conf, char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    conf->cgroup_version = RLM_CGROUP_NONE;
    return 0;
}


pid_t
rlm_jail_fork(rlm_jail_conf_t *conf, const char *name,
    const rlm_jail_limits_t *limits)
{
    (void) conf;
    (void) name;
    (void) limits;
    return fork();
}


int
rlm_jail_enter(rlm_jail_conf_t *conf, const rlm_jail_limits_t *limits,
    int keep_fd)
{
    int  fd;

    (void) conf;
    (void) limits;

    prctl(PR_SET_PDEATHSIG, SIGKILL);

    for (fd = 0; fd < 1024; fd++) {
        if (fd != keep_fd) {
            close(fd);
        }
    }

    fd = open("/dev/null", O_RDWR);
    while (fd >= 0 && fd < 2) {
        fd = dup(fd);
    }

    return 0;
}


int
rlm_jail_oom_killed(rlm_jail_conf_t *conf, const char *name)
{
    (void) conf;
    (void) name;
    return 0;
}


int
rlm_jail_release(rlm_jail_conf_t *conf, const char *name)
{
    (void) conf;
    (void) name;
    return 0;
}


int
rlm_jail_count(rlm_jail_conf_t *conf, const char *name)
{
    (void) conf;
    (void) name;
    return -1;
}


/* no cgroup: the manager kills by pid and sums /proc */

int
rlm_jail_kill(rlm_jail_conf_t *conf, const char *name)
{
    (void) conf;
    (void) name;
    errno = ENOENT;
    return -1;
}


int
rlm_jail_cpu_usage(rlm_jail_conf_t *conf, const char *name, uint64_t *usec)
{
    (void) conf;
    (void) name;
    (void) usec;
    errno = ENOTSUP;
    return -1;
}


void
rlm_jail_cleanup(rlm_jail_conf_t *conf)
{
    (void) conf;
}
