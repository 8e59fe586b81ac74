/*
 * cgroup v1/v2 handling for the jail (internal to jail.c).
 */

#ifndef _RLM_CGROUP_H_INCLUDED_
#define _RLM_CGROUP_H_INCLUDED_


#include "jail.h"


int rlm_cgroup_init(rlm_jail_conf_t *conf, char *err, size_t errlen);
int rlm_cgroup_create(rlm_jail_conf_t *conf, const char *name,
    const rlm_jail_limits_t *limits, char *err, size_t errlen);
int rlm_cgroup_join(rlm_jail_conf_t *conf, const char *name);
int rlm_cgroup_destroy(rlm_jail_conf_t *conf, const char *name);
int rlm_cgroup_oom_killed(rlm_jail_conf_t *conf, const char *name);
int rlm_cgroup_count(rlm_jail_conf_t *conf, const char *name);
int rlm_cgroup_kill(rlm_jail_conf_t *conf, const char *name);
int rlm_cgroup_cpu_usage(rlm_jail_conf_t *conf, const char *name,
    uint64_t *usec);
void rlm_cgroup_cleanup(rlm_jail_conf_t *conf);


#endif /* _RLM_CGROUP_H_INCLUDED_ */
