/*
 * rlm-sandboxd: shared types of the manager, the zygote and the sandbox
 * child.  See docs/sandbox.md for the process model.
 */

#ifndef _RLM_SANDBOXD_H_INCLUDED_
#define _RLM_SANDBOXD_H_INCLUDED_


#include <stdint.h>
#include <sys/types.h>

#include "jail.h"


#define RLM_ID_LEN          24
#define RLM_SESSION_LEN     64
#define RLM_MAX_ALLOW       64

/* exit codes of a sandbox that killed itself on a hard limit */
#define RLM_EXIT_WALL       142     /* wall timer fired twice in a cell */
#define RLM_EXIT_CPU        152     /* SIGXCPU kept coming after the soft */
#define RLM_EXIT_INTERNAL   120     /* runtime could not start */


/* limits of one sandbox, as given in acquire (docs/protocol.md) */
typedef struct {
    unsigned    cpu_s;          /* per-cell CPU seconds */
    unsigned    wall_ms;        /* per-cell wall time */
    unsigned    memory_mb;      /* cgroup memory */
    unsigned    pids;           /* processes + threads */
    unsigned    output_bytes;   /* stdout + stderr per cell */
    unsigned    tmpfs_mb;       /* size of the private /tmp */
    unsigned    session_cpu_s;  /* RLIMIT_CPU hard over the sandbox life */
} rlm_limits_t;


typedef struct {
    char            runtime_dir[256];
    char            sock_dir[300];       /* <runtime_dir>/s */
    char            control_path[300];   /* <runtime_dir>/control.sock */
    unsigned        pool;                /* warm pool target */
    unsigned        max_sandboxes;       /* idle + live */
    unsigned        max_memory_mb;       /* sum of memory_mb, 0: no cap */
    uint32_t        max_blob;
    uid_t           sock_uid;
    gid_t           sock_gid;
    int             sock_owner_set;
    int             ready_fd;            /* written once when serving */
    int             keep_on_orphan;      /* do not exit when parent dies */
    int             verbose;
    rlm_limits_t    defaults;
    const char     *allow[RLM_MAX_ALLOW];
    unsigned        nallow;
    rlm_jail_conf_t jail;
} rlm_conf_t;


extern rlm_conf_t  rlm_conf;


void rlm_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* rlm_zygote.c: CPython set up once in the manager */
int rlm_zygote_init(rlm_conf_t *conf, char *err, size_t errlen);

/*
 * rlm_child.c: the sandbox side of a fork; never returns.  "prime" runs
 * one throw-away cell before serving (sandboxes made for the pool).
 */
void rlm_child_main(rlm_conf_t *conf, const rlm_jail_limits_t *jl,
    const rlm_limits_t *limits, int listen_fd, int prime)
    __attribute__((noreturn));

void rlm_limits_to_jail(const rlm_limits_t *l, rlm_jail_limits_t *jl);


#endif /* _RLM_SANDBOXD_H_INCLUDED_ */
