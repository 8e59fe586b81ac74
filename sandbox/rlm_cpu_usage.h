/*
 * How much CPU a sandbox has used (rlm_cpu_usage.c), for the manager's
 * CPU watches.
 */

#ifndef _RLM_CPU_USAGE_H_INCLUDED_
#define _RLM_CPU_USAGE_H_INCLUDED_


#include <stdint.h>
#include <sys/types.h>

#include "jail.h"


/*
 * CPU time used so far by sandbox <id> and everything in it, in
 * microseconds: its cgroup's accounting when the host has one (v2
 * cpu.stat, v1 cpuacct), or where the host has none, the sum over /proc
 * of the process <pid> (all its threads and reaped children) and its
 * descendants.  0, or -1 when it cannot be read (the sandbox is gone).
 */
int rlm_cpu_usage_us(rlm_jail_conf_t *jail, const char *id, pid_t pid,
    uint64_t *usec);


#endif /* _RLM_CPU_USAGE_H_INCLUDED_ */
