/*
 * CPU watches (rlm_watch.c): the manager ends a sandbox that keeps
 * running past a CPU budget the host gave it (control op "watch").
 */

#ifndef _RLM_WATCH_H_INCLUDED_
#define _RLM_WATCH_H_INCLUDED_


#include <stdint.h>

#include "rlm_manager.h"


#define RLM_WATCH_PERIOD_MS   100           /* between two samples */
#define RLM_WATCH_MAX_MS      86400000u     /* largest cpu_ms accepted */


int rlm_watch_init(rlm_conf_t *conf);

/*
 * Sample the live sandbox's CPU usage now and kill it (reason cpu_limit)
 * once it has used cpu_ms more; replaces a watch it had.  0, or -1 when
 * its usage cannot be read.
 */
int rlm_watch_start(rlm_sandbox_t *sb, uint64_t cpu_ms);

/* end the sandbox's watch, if any */
void rlm_watch_stop(rlm_sandbox_t *sb);

/* the event loop's wait, shortened to the next sample while watching */
int rlm_watch_timeout(int timeout_ms);

/* sample every watched sandbox if a period has passed; kill the spent */
void rlm_watch_check(void);


#endif /* _RLM_WATCH_H_INCLUDED_ */
