/*
 * The sandbox's seccomp-bpf filter (internal to jail.c).
 */

#ifndef _RLM_SECCOMP_H_INCLUDED_
#define _RLM_SECCOMP_H_INCLUDED_


#include "jail.h"


/* compile the filters once, in the manager; result in conf->bpf */
int rlm_seccomp_build(rlm_jail_conf_t *conf, char *err, size_t errlen);

/* load them in the sandbox; no_new_privs must already be set */
int rlm_seccomp_load(rlm_jail_conf_t *conf);


#endif /* _RLM_SECCOMP_H_INCLUDED_ */
