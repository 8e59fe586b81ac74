/*
 * CPU watches.  The time limits inside a sandbox (rlm_child.c) are only
 * the gentle first step: code can block their signals or disarm their
 * timers.  The host therefore asks the manager, for a cell that runs
 * longer than a short threshold, to watch the sandbox: the manager
 * samples the CPU time the whole sandbox has used (its cgroup, see
 * rlm_cpu_usage.c) and SIGKILLs it with reason "cpu_limit" once it has
 * used the given budget more.  Nothing inside the sandbox can change
 * this.
 *
 * Samples are taken from the event loop every RLM_WATCH_PERIOD_MS while
 * at least one watch is active; with none the loop does not wake for
 * them.  A sandbox may use up to one period times its cores past the
 * budget before it is killed.
 */

#include <stdlib.h>
#include <string.h>

#include "rlm_watch.h"
#include "rlm_cpu_usage.h"


typedef struct {
    uint32_t  serial;       /* the watched sandbox's, 0: no watch */
    uint64_t  limit_us;     /* kill once its usage reaches this */
} rlm_watch_t;


static rlm_conf_t   *rlm_wconf;
static rlm_watch_t  *rlm_watches;       /* one per sandbox slot */
static unsigned      rlm_nwatches;      /* active ones */
static uint64_t      rlm_watch_due;     /* next sample (monotonic us) */


int
rlm_watch_init(rlm_conf_t *conf)
{
    rlm_wconf = conf;
    rlm_watches = calloc(rlm_pool_nslots(), sizeof(rlm_watch_t));

    return rlm_watches ? 0 : -1;
}


int
rlm_watch_start(rlm_sandbox_t *sb, uint64_t cpu_ms)
{
    rlm_watch_t  *w;
    uint64_t      used;

    if (rlm_cpu_usage_us(&rlm_wconf->jail, sb->id, sb->pid, &used) != 0) {
        return -1;
    }

    w = &rlm_watches[rlm_pool_slot(sb)];

    if (w->serial == 0) {
        if (rlm_nwatches++ == 0) {
            rlm_watch_due = rlm_now_us() + RLM_WATCH_PERIOD_MS * 1000;
        }
    }

    w->serial = sb->serial;
    w->limit_us = used + cpu_ms * 1000;

    return 0;
}


void
rlm_watch_stop(rlm_sandbox_t *sb)
{
    rlm_watch_t  *w;

    w = &rlm_watches[rlm_pool_slot(sb)];

    if (w->serial != 0) {
        w->serial = 0;
        rlm_nwatches--;
    }
}


int
rlm_watch_timeout(int timeout_ms)
{
    uint64_t  now, wait_ms;

    if (rlm_nwatches == 0) {
        return timeout_ms;
    }

    now = rlm_now_us();
    wait_ms = now < rlm_watch_due ? (rlm_watch_due - now + 999) / 1000 : 0;

    return (timeout_ms >= 0 && (uint64_t) timeout_ms < wait_ms)
           ? timeout_ms : (int) wait_ms;
}


void
rlm_watch_check(void)
{
    rlm_sandbox_t  *sb;
    rlm_watch_t    *w;
    uint64_t        now, used;
    unsigned        i, n;

    if (rlm_nwatches == 0) {
        return;
    }

    now = rlm_now_us();

    if (now < rlm_watch_due) {
        return;
    }

    rlm_watch_due = now + RLM_WATCH_PERIOD_MS * 1000;
    n = rlm_pool_nslots();

    for (i = 0; i < n && rlm_nwatches > 0; i++) {
        w = &rlm_watches[i];

        if (w->serial == 0) {
            continue;
        }

        sb = rlm_pool_find_slot((int) i);

        if (sb->state != RLM_SB_LIVE || sb->serial != w->serial
            || sb->reason != NULL)
        {
            /* ended without the pool telling us: drop it */
            w->serial = 0;
            rlm_nwatches--;
            continue;
        }

        if (rlm_cpu_usage_us(&rlm_wconf->jail, sb->id, sb->pid, &used)
            != 0)
        {
            /* dying: the reap ends the watch */
            continue;
        }

        if (used >= w->limit_us) {
            if (rlm_wconf->verbose) {
                rlm_log("sandbox %s (pid %d) used its CPU budget: killed",
                        sb->id, (int) sb->pid);
            }

            /* ends the watch too */
            (void) rlm_pool_kill(sb, "cpu_limit");
        }
    }
}
