/*
 * The manager's sandbox table (rlm_pool.c) and control clients
 * (rlm_control.c), driven by the event loop in rlm_sandboxd.c.
 */

#ifndef _RLM_MANAGER_H_INCLUDED_
#define _RLM_MANAGER_H_INCLUDED_


#include <stdint.h>
#include <sys/types.h>

#include "rlm_sandboxd.h"


typedef enum {
    RLM_SB_FREE = 0,
    RLM_SB_IDLE,            /* jailed (or jailing), waiting in the pool */
    RLM_SB_LIVE,            /* handed to a session */
    RLM_SB_DYING,           /* killed on release, not reaped yet */
    RLM_SB_DEAD             /* reaped; kept for status until released */
} rlm_sb_state_e;


typedef struct {
    rlm_sb_state_e  state;
    pid_t           pid;
    uint32_t        serial;
    char            id[RLM_ID_LEN + 1];
    char            session[RLM_SESSION_LEN + 1];
    rlm_limits_t    limits;
    int             warm;
    const char     *reason;         /* why it died; set on a live one
                                       that the manager killed and has
                                       not reaped yet */
    int             signal;
    int             exit_code;
    int             waiter;         /* client waiting for release, or -1 */
    uint32_t        waiter_gen;
    void           *waiter_seq;     /* json_t * echoed in the reply */
    uint64_t        born_us;
    uint64_t        live_us;        /* when acquired (monotonic) */
    uint64_t        died_us;
    char           *warm_reply;     /* acquire reply prepared at fork time */
    size_t          warm_reply_len;
} rlm_sandbox_t;


typedef struct {
    unsigned        live;
    unsigned        idle;
    unsigned        dying;
    unsigned        dead;
    uint64_t        memory_mb;      /* sum over idle, live and dying */
    uint64_t        created;
    uint64_t        released;
    uint64_t        oom;
    uint64_t        crashed;
    uint64_t        warm_acquires;
    uint64_t        cold_acquires;
    uint64_t        spawn_failures;
} rlm_pool_stats_t;


extern rlm_pool_stats_t  rlm_stats;


uint64_t rlm_now_us(void);

int rlm_pool_init(rlm_conf_t *conf);
/* slot or -1; *code gets "limit" or "internal" */
int rlm_pool_acquire(const rlm_limits_t *limits, const char *session,
    int *warm, const char **code);
rlm_sandbox_t *rlm_pool_find(const char *id);
int rlm_pool_slot(rlm_sandbox_t *sb);
rlm_sandbox_t *rlm_pool_find_slot(int slot);
unsigned rlm_pool_nslots(void);
/* 1: killed, reply when reaped; 2: already dying; 0: was dead, freed */
int rlm_pool_release(rlm_sandbox_t *sb);
/*
 * SIGKILL a live sandbox and everything in it, recording reason (a
 * static string) as its death reason; 1 if killed now, 0 if it was
 * already dead, dying or killed
 */
int rlm_pool_kill(rlm_sandbox_t *sb, const char *reason);
/* a live sandbox not killed yet (reason set means: dead, not reaped) */
#define rlm_pool_running(sb)                                                 \
    ((sb)->state == RLM_SB_LIVE && (sb)->reason == NULL)
void rlm_pool_reap(void);
/* fork one pool sandbox if the pool is short; 1 if more are wanted */
int rlm_pool_refill(void);
int rlm_pool_wants_refill(void);
int rlm_pool_refill_quiet_ms(void);
void rlm_pool_shutdown(void);
void rlm_sock_path(const char *id, char *buf, size_t len);

int rlm_limits_parse(void *json_limits, rlm_limits_t *out,
    char *err, size_t errlen);

/* rlm_control.c */
int rlm_control_init(rlm_conf_t *conf, int epfd);
void rlm_control_accept(void);
void rlm_control_event(unsigned idx, uint32_t events);
void rlm_control_release_done(rlm_sandbox_t *sb);
void rlm_control_close_all(void);
char *rlm_control_acquire_reply(rlm_sandbox_t *sb, int warm);

#define RLM_EV_LISTEN   0
#define RLM_EV_SIGNAL   1
#define RLM_EV_CLIENT   2

#define rlm_ev_pack(type, idx)  (((uint64_t) (type) << 32) | (idx))


#endif /* _RLM_MANAGER_H_INCLUDED_ */
