/*
 * The cgroup janitor: a helper process that removes the cgroups of dead
 * sandboxes, off the manager's event loop.
 *
 * Removing an empty memory cgroup takes about 50 us, but about one time
 * in ten the kernel makes rmdir() wait 3-15 ms.  In the manager's single
 * loop that stalled every acquire queued behind it.  The manager now
 * writes the sandbox's name to a pipe and goes on; the janitor, forked
 * before CPython is loaded (so it is small), removes the cgroups in
 * order.  If the janitor is gone or its pipe is full, the manager
 * removes the cgroup itself, as before.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "rlm_sandboxd.h"
#include "rlm_janitor.h"


/* one record per dead sandbox: its name, NUL-padded; a pipe write of it
 * is atomic (far below PIPE_BUF) */
#define RLM_JANITOR_REC  32


static int    rlm_janitor_fd = -1;
static pid_t  rlm_janitor_pid = -1;


static void rlm_janitor_main(rlm_jail_conf_t *jail, int fd)
    __attribute__((noreturn));


int
rlm_janitor_start(rlm_jail_conf_t *jail)
{
    int    fds[2];
    pid_t  pid;

    if (pipe2(fds, O_CLOEXEC) != 0) {
        return -1;
    }

    pid = fork();

    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }

    if (pid == 0) {
        close(fds[1]);
        rlm_janitor_main(jail, fds[0]);
    }

    close(fds[0]);

    if (fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
        close(fds[1]);
        kill(pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
        return -1;
    }

    rlm_janitor_fd = fds[1];
    rlm_janitor_pid = pid;

    return 0;
}


static void
rlm_janitor_main(rlm_jail_conf_t *jail, int fd)
{
    char     rec[RLM_JANITOR_REC];
    ssize_t  n;

    /* dies with the manager; a new manager cleans what is left */
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
    (void) prctl(PR_SET_NAME, "rlm-janitor");

    if (getppid() == 1) {
        _exit(0);
    }

    /* nothing of the manager's but the pipe and stdio (its lock file) */
    if (fd != 3) {
        if (dup2(fd, 3) != 3) {
            _exit(1);
        }

        fd = 3;
    }

    (void) close_range(4, ~0U, 0);

    for ( ;; ) {
        n = read(fd, rec, sizeof(rec));

        if (n == 0) {
            /* the manager closed the pipe: nothing more will come */
            _exit(0);
        }

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            _exit(1);
        }

        if (n != (ssize_t) sizeof(rec)) {
            continue;
        }

        rec[sizeof(rec) - 1] = '\0';

        if (rlm_jail_release(jail, rec) != 0) {
            rlm_log("janitor: cgroup of %s: %s", rec, strerror(errno));
        }
    }
}


void
rlm_janitor_release(rlm_jail_conf_t *jail, const char *name)
{
    char  rec[RLM_JANITOR_REC];

    if (rlm_janitor_fd >= 0 && strlen(name) < sizeof(rec)) {
        memset(rec, 0, sizeof(rec));
        memcpy(rec, name, strlen(name));

        if (write(rlm_janitor_fd, rec, sizeof(rec))
            == (ssize_t) sizeof(rec))
        {
            return;
        }

        if (errno == EPIPE) {
            /* the janitor died: from now on the manager does it all */
            rlm_log("janitor is gone: removing cgroups in the manager");
            close(rlm_janitor_fd);
            rlm_janitor_fd = -1;
        }
    }

    (void) rlm_jail_release(jail, name);
}


int
rlm_janitor_is(pid_t pid)
{
    if (pid != rlm_janitor_pid || pid <= 0) {
        return 0;
    }

    /* reaped by the manager's loop: it exited or was killed */
    rlm_janitor_pid = -1;

    if (rlm_janitor_fd >= 0) {
        close(rlm_janitor_fd);
        rlm_janitor_fd = -1;
    }

    return 1;
}


void
rlm_janitor_stop(void)
{
    int  status;

    if (rlm_janitor_fd >= 0) {
        close(rlm_janitor_fd);
        rlm_janitor_fd = -1;
    }

    if (rlm_janitor_pid > 0) {
        /* it ends at the end of its queue */
        while (waitpid(rlm_janitor_pid, &status, 0) < 0 && errno == EINTR) {
            /* retry */
        }

        rlm_janitor_pid = -1;
    }
}
