/*
 * The sandbox table: forking sandboxes from the zygote, the warm pool,
 * acquire, release, reaping and the record of why each sandbox died.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <jansson.h>

#include "rlm_manager.h"
#include "rlm_janitor.h"
#include "rlm_watch.h"


#define RLM_DEAD_KEEP   1024        /* dead records kept for status */


typedef struct {
    unsigned  slot;
    uint32_t  serial;
} rlm_idle_ref_t;


rlm_pool_stats_t        rlm_stats;

static rlm_conf_t      *rlm_pconf;
static rlm_sandbox_t   *rlm_slots;
static unsigned         rlm_nslots;
static uint32_t         rlm_serial;
static uint32_t         rlm_run_nonce;

/* FIFO of idle sandboxes: the oldest has certainly finished jailing */
static rlm_idle_ref_t  *rlm_idle_ring;
static unsigned         rlm_idle_head;
static unsigned         rlm_idle_len;

static unsigned         rlm_early_deaths;
static uint64_t         rlm_refill_pause_until;


uint64_t
rlm_now_us(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}


void
rlm_limits_to_jail(const rlm_limits_t *l, rlm_jail_limits_t *jl)
{
    rlm_jail_limits_default(jl);

    jl->memory_mb = l->memory_mb;
    jl->pids = l->pids;
    jl->cpu_s = l->session_cpu_s;
    jl->tmpfs_mb = l->tmpfs_mb;

#if defined(__SANITIZE_ADDRESS__)
    /* ASan's shadow memory needs terabytes of address space */
    jl->as_mb = 1u << 30;
#endif
}


void
rlm_sock_path(const char *id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s.sock", rlm_pconf->sock_dir, id);
}


int
rlm_pool_init(rlm_conf_t *conf)
{
    rlm_pconf = conf;
    rlm_nslots = conf->max_sandboxes + RLM_DEAD_KEEP;

    if (getrandom(&rlm_run_nonce, sizeof(rlm_run_nonce), 0)
        != sizeof(rlm_run_nonce))
    {
        rlm_run_nonce = (uint32_t) rlm_now_us() ^ (uint32_t) getpid();
    }

    rlm_slots = calloc(rlm_nslots, sizeof(rlm_sandbox_t));
    rlm_idle_ring = calloc(rlm_nslots, sizeof(rlm_idle_ref_t));

    if (rlm_slots == NULL || rlm_idle_ring == NULL) {
        return -1;
    }

    return 0;
}


rlm_sandbox_t *
rlm_pool_find_slot(int slot)
{
    return &rlm_slots[slot];
}


unsigned
rlm_pool_nslots(void)
{
    return rlm_nslots;
}


int
rlm_pool_slot(rlm_sandbox_t *sb)
{
    return (int) (sb - rlm_slots);
}


static void
rlm_slot_free(rlm_sandbox_t *sb)
{
    if (sb->state == RLM_SB_DEAD) {
        rlm_stats.dead--;
    }

    if (sb->waiter_seq) {
        json_decref(sb->waiter_seq);
    }

    free(sb->warm_reply);

    memset(sb, 0, sizeof(*sb));
    sb->state = RLM_SB_FREE;
    sb->waiter = -1;
}


static rlm_sandbox_t *
rlm_slot_get(void)
{
    rlm_sandbox_t  *sb, *oldest;
    unsigned        i;

    oldest = NULL;

    for (i = 0; i < rlm_nslots; i++) {
        sb = &rlm_slots[i];

        if (sb->state == RLM_SB_FREE) {
            return sb;
        }

        if (sb->state == RLM_SB_DEAD
            && (oldest == NULL || sb->died_us < oldest->died_us))
        {
            oldest = sb;
        }
    }

    if (oldest != NULL) {
        rlm_slot_free(oldest);
    }

    return oldest;
}


static int
rlm_listen_socket(const char *path)
{
    struct sockaddr_un  sa;
    int                 fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    unlink(path);

    if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0
        || chmod(path, 0660) != 0
        || (rlm_pconf->sock_owner_set
            && chown(path, rlm_pconf->sock_uid, rlm_pconf->sock_gid) != 0)
        || listen(fd, 16) != 0)
    {
        close(fd);
        unlink(path);
        return -1;
    }

    return fd;
}


static int
rlm_limits_equal(const rlm_limits_t *a, const rlm_limits_t *b)
{
    return a->cpu_s == b->cpu_s && a->wall_ms == b->wall_ms
           && a->memory_mb == b->memory_mb && a->pids == b->pids
           && a->output_bytes == b->output_bytes
           && a->tmpfs_mb == b->tmpfs_mb
           && a->session_cpu_s == b->session_cpu_s;
}


/*
 * fork one sandbox; its socket is bound and listening before the fork.
 * A sandbox for the pool is primed (see rlm_child_main()).
 */
static rlm_sandbox_t *
rlm_spawn(const rlm_limits_t *limits, int for_pool, const char **code)
{
    rlm_sandbox_t      *sb;
    rlm_jail_limits_t   jl;
    char                path[512];
    unsigned            live;
    pid_t               pid;
    int                 fd;

    live = rlm_stats.live + rlm_stats.idle;

    if (live >= rlm_pconf->max_sandboxes
        || (rlm_pconf->max_memory_mb
            && rlm_stats.memory_mb + limits->memory_mb
               > rlm_pconf->max_memory_mb))
    {
        *code = "limit";
        return NULL;
    }

    sb = rlm_slot_get();
    if (sb == NULL) {
        *code = "limit";
        return NULL;
    }

    /*
     * id = run nonce, serial, slot: unique across manager restarts, so a
     * host holding the id of a sandbox of a previous run can never reach
     * a new session's sandbox by it
     */

    rlm_serial++;
    sb->serial = rlm_serial;
    snprintf(sb->id, sizeof(sb->id), "%08x%08x%04x", rlm_run_nonce,
             rlm_serial, (unsigned) rlm_pool_slot(sb));
    rlm_sock_path(sb->id, path, sizeof(path));

    fd = rlm_listen_socket(path);
    if (fd < 0) {
        rlm_log("socket %s: %s", path, strerror(errno));
        *code = "internal";
        rlm_stats.spawn_failures++;
        memset(sb, 0, sizeof(*sb));
        return NULL;
    }

    rlm_limits_to_jail(limits, &jl);

    PyOS_BeforeFork();
    pid = rlm_jail_fork(&rlm_pconf->jail, sb->id, &jl);

    if (pid == 0) {
        rlm_child_main(rlm_pconf, &jl, limits, fd, for_pool);
    }

    PyOS_AfterFork_Parent();
    close(fd);

    if (pid < 0) {
        rlm_log("fork of sandbox %s: %s", sb->id, strerror(errno));
        unlink(path);
        *code = "internal";
        rlm_stats.spawn_failures++;
        memset(sb, 0, sizeof(*sb));
        return NULL;
    }

    sb->pid = pid;
    sb->limits = *limits;
    sb->waiter = -1;
    sb->born_us = rlm_now_us();
    sb->state = RLM_SB_IDLE;

    rlm_stats.created++;
    rlm_stats.memory_mb += limits->memory_mb;

    /* the reply a warm acquire sends, built now rather than on its path */
    sb->warm_reply = rlm_control_acquire_reply(sb, 1);
    sb->warm_reply_len = sb->warm_reply ? strlen(sb->warm_reply) : 0;

    return sb;
}


static rlm_sandbox_t *
rlm_idle_pop(void)
{
    rlm_idle_ref_t  ref;
    rlm_sandbox_t  *sb;

    while (rlm_idle_len > 0) {
        ref = rlm_idle_ring[rlm_idle_head];
        rlm_idle_head = (rlm_idle_head + 1) % rlm_nslots;
        rlm_idle_len--;

        sb = &rlm_slots[ref.slot];

        if (sb->state == RLM_SB_IDLE && sb->serial == ref.serial) {
            return sb;
        }
    }

    return NULL;
}


static void
rlm_idle_push(rlm_sandbox_t *sb)
{
    unsigned  tail;

    tail = (rlm_idle_head + rlm_idle_len) % rlm_nslots;
    rlm_idle_ring[tail].slot = rlm_pool_slot(sb);
    rlm_idle_ring[tail].serial = sb->serial;
    rlm_idle_len++;
    rlm_stats.idle++;
}


static void
rlm_make_live(rlm_sandbox_t *sb, const char *session, int warm)
{
    sb->state = RLM_SB_LIVE;
    sb->warm = warm;
    sb->live_us = rlm_now_us();
    snprintf(sb->session, sizeof(sb->session), "%s", session);
    rlm_stats.live++;

    if (warm) {
        rlm_stats.warm_acquires++;

    } else {
        rlm_stats.cold_acquires++;
    }
}


int
rlm_pool_acquire(const rlm_limits_t *limits, const char *session,
    int *warm, const char **code)
{
    rlm_sandbox_t  *sb, *victim;

    /* the acquire path never forks while the pool has a fitting sandbox */

    if (rlm_limits_equal(limits, &rlm_pconf->defaults)) {
        sb = rlm_idle_pop();

        if (sb != NULL) {
            rlm_stats.idle--;
            rlm_early_deaths = 0;
            rlm_make_live(sb, session, 1);
            *warm = 1;
            return rlm_pool_slot(sb);
        }
    }

    /* burst or custom limits: cold create, making room from the pool */

    sb = rlm_spawn(limits, 0, code);

    if (sb == NULL && strcmp(*code, "limit") == 0) {
        victim = rlm_idle_pop();

        if (victim != NULL) {
            rlm_stats.idle--;
            kill(victim->pid, SIGKILL);
            victim->state = RLM_SB_DYING;
            victim->reason = "evicted";
            rlm_stats.dying++;
            rlm_stats.memory_mb -= victim->limits.memory_mb;
            sb = rlm_spawn(limits, 0, code);
        }
    }

    if (sb == NULL) {
        return -1;
    }

    rlm_make_live(sb, session, 0);
    *warm = 0;

    return rlm_pool_slot(sb);
}


rlm_sandbox_t *
rlm_pool_find(const char *id)
{
    unsigned long   slot;
    rlm_sandbox_t  *sb;
    char           *end;

    if (strlen(id) != 20) {
        return NULL;
    }

    slot = strtoul(id + 16, &end, 16);

    if (*end != '\0' || slot >= rlm_nslots) {
        return NULL;
    }

    sb = &rlm_slots[slot];

    if (sb->state == RLM_SB_FREE || sb->state == RLM_SB_IDLE
        || strcmp(sb->id, id) != 0)
    {
        return NULL;
    }

    return sb;
}


int
rlm_pool_release(rlm_sandbox_t *sb)
{
    if (sb->state == RLM_SB_DEAD) {
        rlm_slot_free(sb);
        return 0;
    }

    if (sb->state == RLM_SB_DYING) {
        return 2;
    }

    rlm_watch_stop(sb);
    rlm_stats.live--;
    rlm_stats.dying++;
    rlm_stats.memory_mb -= sb->limits.memory_mb;
    sb->state = RLM_SB_DYING;
    sb->reason = "released";
    kill(sb->pid, SIGKILL);

    return 1;
}


/*
 * The sandbox is pid 1 of its own pid namespace: SIGKILL to it makes the
 * kernel kill everything else in the namespace.  Its cgroup is swept as
 * well, for anything that is in the cgroup without being in the
 * namespace.  The record stays live until the reap; from now on status
 * reports it dead with this reason.
 */
int
rlm_pool_kill(rlm_sandbox_t *sb, const char *reason)
{
    if (!rlm_pool_running(sb)) {
        return 0;
    }

    sb->reason = reason;
    rlm_watch_stop(sb);

    kill(sb->pid, SIGKILL);
    (void) rlm_jail_kill(&rlm_pconf->jail, sb->id);

    return 1;
}


static void
rlm_record_death(rlm_sandbox_t *sb, int status)
{
    int  oom;

    oom = rlm_jail_oom_killed(&rlm_pconf->jail, sb->id);

    sb->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    sb->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;

    if (sb->reason != NULL) {
        /* released, evicted or killed by us */

    } else if (oom == 1) {
        sb->reason = "oom";
        rlm_stats.oom++;

    } else if (WIFSIGNALED(status)) {
        sb->reason = sb->signal == SIGKILL ? "killed" : "crashed";
        rlm_stats.crashed++;

    } else if (sb->exit_code == RLM_EXIT_WALL) {
        sb->reason = "wall_limit";

    } else if (sb->exit_code == RLM_EXIT_CPU) {
        sb->reason = "cpu_limit";

    } else if (sb->exit_code == RLM_JAIL_EXIT_SETUP) {
        sb->reason = "jail_failed";
        rlm_stats.crashed++;

    } else {
        sb->reason = "exited";
    }
}


void
rlm_pool_reap(void)
{
    rlm_sandbox_t  *sb;
    char            path[512];
    unsigned        i;
    pid_t           pid;
    int             status, was_idle;

    for ( ;; ) {
        pid = waitpid(-1, &status, WNOHANG);

        if (pid <= 0) {
            if (pid < 0 && errno == EINTR) {
                continue;
            }

            return;
        }

        sb = NULL;

        for (i = 0; i < rlm_nslots; i++) {
            if (rlm_slots[i].pid == pid && rlm_slots[i].state != RLM_SB_FREE
                && rlm_slots[i].state != RLM_SB_DEAD)
            {
                sb = &rlm_slots[i];
                break;
            }
        }

        if (sb == NULL) {
            if (rlm_janitor_is(pid)) {
                rlm_log("cgroup janitor %d exited (status %d)", (int) pid,
                        status);
            }

            continue;
        }

        was_idle = (sb->state == RLM_SB_IDLE);

        rlm_watch_stop(sb);
        rlm_record_death(sb, status);
        rlm_janitor_release(&rlm_pconf->jail, sb->id);
        rlm_sock_path(sb->id, path, sizeof(path));
        unlink(path);

        if (sb->state != RLM_SB_DYING) {
            rlm_stats.memory_mb -= sb->limits.memory_mb;
        }

        sb->died_us = rlm_now_us();

        switch (sb->state) {
        case RLM_SB_IDLE:
            rlm_stats.idle--;
            break;
        case RLM_SB_LIVE:
            rlm_stats.live--;
            break;
        case RLM_SB_DYING:
            rlm_stats.dying--;
            break;
        default:
            break;
        }

        if (was_idle) {
            rlm_log("pool sandbox %s (pid %d) died: %s signal %d exit %d",
                    sb->id, (int) pid, sb->reason, sb->signal,
                    sb->exit_code);

            if (++rlm_early_deaths >= 3) {
                rlm_refill_pause_until = rlm_now_us() + 1000000;
            }
        }

        if (sb->state == RLM_SB_DYING) {
            if (strcmp(sb->reason, "released") == 0) {
                rlm_stats.released++;
            }

            rlm_control_release_done(sb);
            rlm_slot_free(sb);

        } else {
            if (rlm_pconf->verbose && !was_idle) {
                rlm_log("sandbox %s (pid %d) died: %s", sb->id, (int) pid,
                        sb->reason);
            }

            sb->state = RLM_SB_DEAD;
            rlm_stats.dead++;
        }
    }
}


int
rlm_pool_wants_refill(void)
{
    unsigned  live;

    if (rlm_stats.idle >= rlm_pconf->pool) {
        return 0;
    }

    live = rlm_stats.live + rlm_stats.idle;

    if (live >= rlm_pconf->max_sandboxes
        || (rlm_pconf->max_memory_mb
            && rlm_stats.memory_mb + rlm_pconf->defaults.memory_mb
               > rlm_pconf->max_memory_mb))
    {
        return 0;
    }

    if (rlm_refill_pause_until && rlm_now_us() < rlm_refill_pause_until) {
        return 0;
    }

    return 1;
}


/*
 * How long the loop waits without events before a refill fork.  While
 * the pool is at least half full, 5 ms: the acquire that made room is
 * usually followed by its session's first cells, and the fork (then the
 * new sandbox's jail and prime) would take a core from them on a small
 * machine.  Below half, 1 ms: keeping up matters more.
 */

int
rlm_pool_refill_quiet_ms(void)
{
    return (rlm_stats.idle * 2 >= rlm_pconf->pool) ? 5 : 1;
}


int
rlm_pool_refill(void)
{
    rlm_sandbox_t  *sb;
    const char     *code;

    if (!rlm_pool_wants_refill()) {
        return 0;
    }

    rlm_refill_pause_until = 0;

    sb = rlm_spawn(&rlm_pconf->defaults, 1, &code);
    if (sb == NULL) {
        rlm_refill_pause_until = rlm_now_us() + 100000;
        return 0;
    }

    rlm_idle_push(sb);

    return rlm_pool_wants_refill();
}


void
rlm_pool_shutdown(void)
{
    rlm_sandbox_t  *sb;
    char            path[512];
    unsigned        i;
    int             status;

    for (i = 0; i < rlm_nslots; i++) {
        sb = &rlm_slots[i];

        if (sb->state == RLM_SB_IDLE || sb->state == RLM_SB_LIVE
            || sb->state == RLM_SB_DYING)
        {
            kill(sb->pid, SIGKILL);
        }
    }

    for (i = 0; i < rlm_nslots; i++) {
        sb = &rlm_slots[i];

        if (sb->state == RLM_SB_IDLE || sb->state == RLM_SB_LIVE
            || sb->state == RLM_SB_DYING)
        {
            while (waitpid(sb->pid, &status, 0) < 0 && errno == EINTR) {
                /* retry */
            }

            rlm_jail_release(&rlm_pconf->jail, sb->id);
            rlm_sock_path(sb->id, path, sizeof(path));
            unlink(path);
        }
    }

    rlm_jail_cleanup(&rlm_pconf->jail);
}


int
rlm_limits_parse(void *json_limits, rlm_limits_t *out, char *err,
    size_t errlen)
{
    static const struct {
        const char  *name;
        size_t       off;
        unsigned     min;
        unsigned     max;
    } fields[] = {
        { "cpu_s", offsetof(rlm_limits_t, cpu_s), 1, 86400 },
        { "wall_ms", offsetof(rlm_limits_t, wall_ms), 1, 86400000 },
        { "memory_mb", offsetof(rlm_limits_t, memory_mb), 16, 1048576 },
        { "pids", offsetof(rlm_limits_t, pids), 1, 65536 },
        { "output_bytes", offsetof(rlm_limits_t, output_bytes), 0,
          1u << 30 },
        { "tmpfs_mb", offsetof(rlm_limits_t, tmpfs_mb), 1, 65536 },
        { "session_cpu_s", offsetof(rlm_limits_t, session_cpu_s), 0,
          1u << 30 },
    };

    json_t      *obj, *v;
    const char  *key;
    json_int_t   n;
    unsigned     i;

    obj = json_limits;
    *out = rlm_pconf->defaults;

    if (obj == NULL || json_is_null(obj)) {
        return 0;
    }

    if (!json_is_object(obj)) {
        snprintf(err, errlen, "limits must be an object");
        return -1;
    }

    json_object_foreach(obj, key, v) {
        for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
            if (strcmp(key, fields[i].name) == 0) {
                break;
            }
        }

        if (i == sizeof(fields) / sizeof(fields[0])) {
            snprintf(err, errlen, "unknown limit \"%.64s\"", key);
            return -1;
        }

        if (!json_is_integer(v)) {
            snprintf(err, errlen, "limit \"%s\" must be an integer", key);
            return -1;
        }

        n = json_integer_value(v);

        if (n < fields[i].min || n > fields[i].max) {
            snprintf(err, errlen, "limit \"%s\" out of range %u..%u", key,
                     fields[i].min, fields[i].max);
            return -1;
        }

        *(unsigned *) ((char *) out + fields[i].off) = (unsigned) n;
    }

    return 0;
}
