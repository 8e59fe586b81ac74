/*
 * The cgroup janitor (rlm_janitor.c): removes dead sandboxes' cgroups in
 * a helper process, so a slow rmdir() never stalls the manager's loop.
 */

#ifndef _RLM_JANITOR_H_INCLUDED_
#define _RLM_JANITOR_H_INCLUDED_


#include <sys/types.h>

#include "jail.h"


/* fork the helper; -1 leaves every removal to the manager */
int rlm_janitor_start(rlm_jail_conf_t *jail);

/* remove a dead sandbox's cgroup: handed over, or done here */
void rlm_janitor_release(rlm_jail_conf_t *jail, const char *name);

/* 1 if pid (just reaped) was the janitor; removals go back inline */
int rlm_janitor_is(pid_t pid);

/* close its pipe and wait for it to finish its queue */
void rlm_janitor_stop(void);


#endif /* _RLM_JANITOR_H_INCLUDED_ */
