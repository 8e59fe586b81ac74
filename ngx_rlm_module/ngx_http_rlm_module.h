
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Declarations shared by the module's source files.
 */


#ifndef _NGX_HTTP_RLM_MODULE_H_INCLUDED_
#define _NGX_HTTP_RLM_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include <jansson.h>

#include "ngx_http_rlm_conf.h"


#define NGX_HTTP_RLM_VERSION        "0.1.0"

#define NGX_HTTP_RLM_ID_BYTES       16
#define NGX_HTTP_RLM_ID_HEX         (2 * NGX_HTTP_RLM_ID_BYTES)
#define NGX_HTTP_RLM_SANDBOX_LEN    64
#define NGX_HTTP_RLM_PATH_LEN       108
#define NGX_HTTP_RLM_OWNER_LEN      128
#define NGX_HTTP_RLM_REASON_LEN     32

/* a JSON part larger than this is a protocol error (docs/protocol.md) */
#define NGX_HTTP_RLM_FRAME_JSON_MAX (16 * 1024 * 1024)

/* eval and create bodies are small JSON documents */
#define NGX_HTTP_RLM_EVAL_BODY_MAX  (16 * 1024 * 1024)

#define NGX_HTTP_RLM_CONTROL_TIMEOUT  5000


/* what a location serves, set by the handler directives */
typedef enum {
    NGX_HTTP_RLM_HANDLER_NONE = 0,
    NGX_HTTP_RLM_HANDLER_HEALTH,
    NGX_HTTP_RLM_HANDLER_SESSIONS,
    NGX_HTTP_RLM_HANDLER_METRICS,
    NGX_HTTP_RLM_HANDLER_TRAJECTORIES
} ngx_http_rlm_handler_e;


/* cell outcomes, in the order the metrics list them */
typedef enum {
    NGX_HTTP_RLM_CELL_OK = 0,
    NGX_HTTP_RLM_CELL_ERROR,
    NGX_HTTP_RLM_CELL_TIMEOUT,
    NGX_HTTP_RLM_CELL_OOM,
    NGX_HTTP_RLM_CELL_TRUNCATED,
    NGX_HTTP_RLM_CELL_CRASHED,
    NGX_HTTP_RLM_CELL_LOST,
    NGX_HTTP_RLM_CELL_SANDBOX_ERROR,   /* a malformed frame */
    NGX_HTTP_RLM_CELL_NSTATUS
} ngx_http_rlm_cell_status_e;


/* why a sandbox died, as the manager's status op reports it */
typedef enum {
    NGX_HTTP_RLM_DEATH_OOM = 0,
    NGX_HTTP_RLM_DEATH_CRASHED,
    NGX_HTTP_RLM_DEATH_KILLED,
    NGX_HTTP_RLM_DEATH_EXITED,
    NGX_HTTP_RLM_DEATH_LIMIT,          /* wall_limit, cpu_limit */
    NGX_HTTP_RLM_DEATH_N
} ngx_http_rlm_death_e;


#define NGX_HTTP_RLM_HIST_N         11


/* what the manager answered to an acquire */
typedef enum {
    NGX_HTTP_RLM_ACQUIRE_OK = 0,
    NGX_HTTP_RLM_ACQUIRE_LIMIT,
    NGX_HTTP_RLM_ACQUIRE_ERROR,
    NGX_HTTP_RLM_ACQUIRE_UNREACHABLE,
    NGX_HTTP_RLM_ACQUIRE_N
} ngx_http_rlm_acquire_e;


/* counters in shared memory, updated with atomic adds */
typedef struct {
    ngx_atomic_t                sessions_created;
    ngx_atomic_t                sessions_deleted;
    ngx_atomic_t                sessions_expired;
    ngx_atomic_t                sessions_rejected;
    ngx_atomic_t                sessions_from_spare;
    ngx_atomic_t                cells[NGX_HTTP_RLM_CELL_NSTATUS];
    ngx_atomic_t                cells_rejected;
    ngx_atomic_t                turns_woken;     /* by the worker's cell */
    ngx_atomic_t                turns_polled;    /* found by polling */
    ngx_atomic_t                conns_new;       /* sandbox connections */
    ngx_atomic_t                conns_reused;
    ngx_atomic_t                cell_hist[NGX_HTTP_RLM_HIST_N];
    ngx_atomic_t                cell_us_sum;
    ngx_atomic_t                cell_count;
    ngx_atomic_t                sandbox_starts;
    ngx_atomic_t                sandbox_orphans;
    ngx_atomic_t                sandbox_deaths[NGX_HTTP_RLM_DEATH_N];
    ngx_atomic_t                context_loads;
    ngx_atomic_t                context_bytes;
    ngx_atomic_t                manager_up;
    ngx_atomic_t                acquires[NGX_HTTP_RLM_ACQUIRE_N];
} ngx_http_rlm_stats_t;


/*
 * Counters of one model (ngx_http_rlm_metrics.c).  Histograms keep
 * their buckets apart (not cumulative) and the sum in milliseconds.
 */

#define NGX_HTTP_RLM_MODELS_MAX      32
#define NGX_HTTP_RLM_MODEL_NAME_LEN  64
#define NGX_HTTP_RLM_LHIST_N         13     /* model-call latency buckets */
#define NGX_HTTP_RLM_CALL_CODES      8      /* ngx_http_rlm_llm_error_e: all */
#define NGX_HTTP_RLM_CALL_CLASSES    5      /* none, 2xx, 3xx, 4xx, 5xx */

typedef enum {
    NGX_HTTP_RLM_OUTCOME_STOP = 0,
    NGX_HTTP_RLM_OUTCOME_LENGTH,
    NGX_HTTP_RLM_OUTCOME_ERROR,
    NGX_HTTP_RLM_OUTCOME_N
} ngx_http_rlm_outcome_e;

typedef struct {
    ngx_atomic_t                completions[NGX_HTTP_RLM_OUTCOME_N];
    ngx_atomic_t                completion_hist[NGX_HTTP_RLM_LHIST_N];
    ngx_atomic_t                completion_ms;
    ngx_atomic_t                calls[NGX_HTTP_RLM_CALL_CODES]
                                     [NGX_HTTP_RLM_CALL_CLASSES];
    ngx_atomic_t                call_hist[NGX_HTTP_RLM_LHIST_N];
    ngx_atomic_t                call_ms;
    ngx_atomic_t                prompt_tokens;
    ngx_atomic_t                completion_tokens;
    ngx_atomic_t                iterations;
    ngx_atomic_t                subcalls[2];     /* llm_query, rlm_query */
} ngx_http_rlm_model_stats_t;

/*
 * Slots are claimed in order under the zone's mutex and published by
 * nmodels; readers scan without the lock.  Names that do not fit, or
 * come once the table is full, count as the model "other".  The lengths
 * and names lie apart from the counters, so a scan reads a few cache
 * lines.
 */

typedef struct {
    ngx_atomic_t                nmodels;
    ngx_atomic_t                other_used;
    size_t                      lens[NGX_HTTP_RLM_MODELS_MAX];
    u_char                      names[NGX_HTTP_RLM_MODELS_MAX]
                                     [NGX_HTTP_RLM_MODEL_NAME_LEN];
    ngx_http_rlm_model_stats_t  stats[NGX_HTTP_RLM_MODELS_MAX];
    ngx_http_rlm_model_stats_t  other;
} ngx_http_rlm_models_t;


/* the supervisor's memory of manager starts, shared with its children */
typedef struct {
    ngx_atomic_t                starts;          /* generation */
    ngx_atomic_t                restarts;
    time_t                      last_start;
    ngx_uint_t                  fast_failures;
    ngx_uint_t                  planned;         /* a reload asked for it */
    ngx_atomic_t                served;          /* last generation that
                                                    answered a request */
    ngx_pid_t                   pid;
} ngx_http_rlm_super_t;


typedef enum {
    NGX_HTTP_RLM_SESSION_CREATING = 0,
    NGX_HTTP_RLM_SESSION_ACTIVE,
    NGX_HTTP_RLM_SESSION_LOST
} ngx_http_rlm_session_state_e;


/*
 * A session, or a spare: a sandbox acquired ahead of time that is not a
 * session yet (ngx_http_rlm_spare.c).  A spare is linked by lru into the
 * zone's spares queue, not into the rbtree; CREATING while its acquire
 * runs (busy_pid is the worker waiting for it), ACTIVE when ready.
 */

typedef struct {
    ngx_rbtree_node_t           node;      /* key: first id bytes */
    ngx_queue_t                 lru;       /* most recently used first */
    ngx_queue_t                 waiters;   /* cells waiting, in order */

    u_char                      id[NGX_HTTP_RLM_ID_BYTES];

    unsigned                    state:2;
    unsigned                    deleted:1;
    unsigned                    busy:1;

    ngx_uint_t                  refs;      /* requests holding it */
    ngx_uint_t                  nwaiting;
    ngx_pid_t                   busy_pid;

    time_t                      created;
    time_t                      last_used;

    uint64_t                    cells;
    uint64_t                    errors;
    uint64_t                    cell_us;
    uint64_t                    context_bytes;

    uint64_t                    completions;
    uint64_t                    prompt_tokens;
    uint64_t                    completion_tokens;

    ngx_uint_t                  generation;
    ngx_uint_t                  watched;   /* left by an abandoned cell */
    ngx_pid_t                   sandbox_pid;
    uint32_t                    limits_key;  /* spares: the limits asked */

    u_char                      sandbox[NGX_HTTP_RLM_SANDBOX_LEN + 1];
    u_char                      path[NGX_HTTP_RLM_PATH_LEN];
    u_char                      reason[NGX_HTTP_RLM_REASON_LEN];

    size_t                      owner_len;
    u_char                      owner[NGX_HTTP_RLM_OWNER_LEN];
} ngx_http_rlm_session_t;


typedef struct {
    ngx_queue_t                 queue;
    ngx_pid_t                   pid;
} ngx_http_rlm_waiter_t;


typedef struct {
    ngx_rbtree_t                rbtree;
    ngx_rbtree_node_t           sentinel;
    ngx_queue_t                 lru;
    ngx_uint_t                  count;
    ngx_http_rlm_stats_t        stats;
    ngx_http_rlm_models_t       models;
    ngx_http_rlm_super_t        super;
    ngx_queue_t                 spares;    /* pending and ready spares */
    ngx_uint_t                  nspares;
} ngx_http_rlm_shctx_t;


typedef struct {
    ngx_http_rlm_shctx_t       *sh;
    ngx_slab_pool_t            *shpool;
} ngx_http_rlm_zone_t;


/* jail layers rlm_sandbox_allow_missing lets the manager run without */
#define NGX_HTTP_RLM_JAIL_CGROUPS   0x0002
#define NGX_HTTP_RLM_JAIL_ROOT      0x0004


typedef struct {
    ngx_str_t                   sandboxd;          /* manager executable */
    ngx_str_t                   sandboxd_socket;   /* external manager */
    ngx_str_t                   runtime_dir;
    ngx_str_t                   control_path;      /* the socket we use */

    /* for a message on the control path, known after the http block */
    ngx_http_rlm_conf_where_t   runtime_dir_where;
    ngx_http_rlm_conf_where_t   socket_where;

    ngx_uint_t                  pool_size;
    ngx_uint_t                  max_sessions;
    ngx_uint_t                  session_spares;
    ngx_int_t                   node_id;           /* -1: single node */

    time_t                      cell_cpu_time;     /* seconds */
    ngx_msec_t                  cell_timeout;
    size_t                      sandbox_memory;
    ngx_uint_t                  sandbox_pids;
    ngx_uint_t                  allow_missing;     /* NGX_HTTP_RLM_JAIL_* */
    size_t                      output_max;
    size_t                      answer_max;
    size_t                      state_max;

    time_t                      session_idle_timeout;
    ngx_uint_t                  session_queue;

    size_t                      context_max_size;

    ngx_path_t                 *trajectory_dir;    /* NULL: none written */

    ngx_shm_zone_t             *shm_zone;
    ngx_flag_t                  used;              /* any rlm location */
} ngx_http_rlm_main_conf_t;


typedef struct {
    ngx_http_rlm_handler_e      handler;
    ngx_http_complex_value_t   *owner;
} ngx_http_rlm_loc_conf_t;


/* per-request state, also read by the variables */
typedef struct {
    void                       *eval;              /* ngx_http_rlm_eval_t */
    u_char                      session_id[NGX_HTTP_RLM_ID_HEX];
    ngx_str_t                   cell_status;
    off_t                       body_cap;          /* 0: not ours */
    off_t                       body_received;
    ngx_chain_t                *refusal;           /* JSON 413 over cap */
    ngx_uint_t                  sandbox_us;        /* a completion: sum */
    ngx_uint_t                  iterations;        /* of a completion */
    uint64_t                    tokens;
    double                      cost;              /* of a completion */
    unsigned                    has_session:1;
    unsigned                    has_sandbox_time:1;
    unsigned                    has_completion:1;
    unsigned                    body_refused:1;
    unsigned                    refusal_sent:1;
} ngx_http_rlm_ctx_t;


/* a non-blocking exchange of frames with a unix socket peer */

typedef struct ngx_http_rlm_peer_s  ngx_http_rlm_peer_t;

typedef enum {
    NGX_HTTP_RLM_PEER_OK = 0,
    NGX_HTTP_RLM_PEER_UNREACHABLE,    /* no socket, refused */
    NGX_HTTP_RLM_PEER_CLOSED,         /* closed before the exchange ended */
    NGX_HTTP_RLM_PEER_TIMEDOUT,
    NGX_HTTP_RLM_PEER_ERROR           /* bad frame, system error */
} ngx_http_rlm_peer_status_e;

/*
 * Called with every frame the peer sends.  NGX_AGAIN keeps reading
 * (the handler may have queued more frames with _peer_send()), NGX_OK
 * ends the exchange successfully, NGX_ERROR ends it as an error.
 */
typedef ngx_int_t (*ngx_http_rlm_peer_frame_pt)(ngx_http_rlm_peer_t *p,
    json_t *msg);
typedef void (*ngx_http_rlm_peer_done_pt)(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status);


typedef struct {
    u_char                      hdr[8];
    size_t                      hdr_got;
    u_char                     *json;
    size_t                      json_len;
    size_t                      json_got;
    size_t                      blob_len;
    size_t                      blob_got;
    ngx_uint_t                  state;
} ngx_http_rlm_frame_decoder_t;


struct ngx_http_rlm_peer_s {
    ngx_pool_t                 *pool;
    ngx_log_t                  *log;
    ngx_connection_t           *connection;
    ngx_str_t                   path;

    ngx_chain_t                *out;
    ngx_buf_t                  *in;
    ngx_http_rlm_frame_decoder_t  decoder;

    ngx_msec_t                  timeout;
    ngx_event_t                 retry;         /* backlog was full */
    ngx_msec_t                  connect_deadline;

    ngx_http_rlm_peer_frame_pt  frame_handler;
    ngx_http_rlm_peer_done_pt   done_handler;
    void                       *data;

    off_t                       sent_before;   /* c->sent when reused */

    unsigned                    finished:1;
    unsigned                    connected:1;
    unsigned                    keepalive:1;   /* may cache the socket */
    unsigned                    reused:1;      /* socket from the cache */
};


/* a control-socket request's outcome */
typedef void (*ngx_http_rlm_control_pt)(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);


/* opening a session: ngx_http_rlm_open.c */
typedef struct ngx_http_rlm_open_s  ngx_http_rlm_open_t;

typedef void (*ngx_http_rlm_open_pt)(ngx_http_rlm_open_t *op);

struct ngx_http_rlm_open_s {
    ngx_http_rlm_open_pt        handler;
    void                       *data;

    /* outcome: session (referenced, active) or status, code, message */
    ngx_http_rlm_session_t     *session;
    ngx_uint_t                  status;
    const char                 *code;
    const char                 *param;
    const char                 *message;
    u_char                      hex[NGX_HTTP_RLM_ID_HEX];
    unsigned                    retry_after:1;

    /*
     * set by the caller: the id was made up, a spare's own may replace
     * it (the id and hex then name the spare's, see ngx_http_rlm_spare.c)
     */
    unsigned                    any_id:1;

    /* private */
    ngx_http_rlm_zone_t        *zone;
    ngx_pool_t                 *pool;
    ngx_pool_cleanup_t         *cleanup;
    ngx_http_rlm_open_t        *pending;
    ngx_http_rlm_open_t        *caller;
    ngx_event_t                 taken;     /* a spare: answer when posted */
};


/* ngx_http_rlm_module.c */
ngx_http_rlm_zone_t *ngx_http_rlm_zone(void);
char *ngx_http_rlm_check_bounds(ngx_conf_t *cf, void *post, void *data);

/* ngx_http_rlm_reply.c */
ngx_int_t ngx_http_rlm_send_json(ngx_http_request_t *r, ngx_uint_t status,
    u_char *data, size_t len);
u_char *ngx_http_rlm_json_body(ngx_pool_t *pool, json_t *value,
    size_t *len);
json_t *ngx_http_rlm_error_value(const char *type, const char *code,
    const char *param, const char *message);
ngx_int_t ngx_http_rlm_send_json_value(ngx_http_request_t *r,
    ngx_uint_t status, json_t *value);
ngx_int_t ngx_http_rlm_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *message);
ngx_int_t ngx_http_rlm_send_error_param(ngx_http_request_t *r,
    ngx_uint_t status, const char *type, const char *code,
    const char *param, const char *message);
ngx_int_t ngx_http_rlm_send_sse(ngx_http_request_t *r, json_t *event,
    const char *comment, ngx_uint_t last);
ngx_int_t ngx_http_rlm_refuse(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *param,
    const char *message);
ngx_int_t ngx_http_rlm_set_header(ngx_http_request_t *r, const char *name,
    const char *value);
ngx_str_t *ngx_http_rlm_request_header(ngx_http_request_t *r,
    const char *name);
ngx_http_rlm_ctx_t *ngx_http_rlm_get_ctx(ngx_http_request_t *r);
ngx_int_t ngx_http_rlm_read_body(ngx_http_request_t *r, ngx_str_t *body);
void ngx_http_rlm_finalize(ngx_http_request_t *r, ngx_int_t rc);
void ngx_http_rlm_enter_handler(void);
void ngx_http_rlm_leave_handler(void);

/* ngx_http_rlm_health.c */
ngx_int_t ngx_http_rlm_health_handler(ngx_http_request_t *r);

/* ngx_http_rlm_metrics.c */
ngx_int_t ngx_http_rlm_metrics_handler(ngx_http_request_t *r);
void ngx_http_rlm_metrics_cell(ngx_http_rlm_cell_status_e status,
    ngx_uint_t us);
void ngx_http_rlm_metrics_death(const char *reason);
const char *ngx_http_rlm_cell_status_name(ngx_http_rlm_cell_status_e st);

/* ngx_http_rlm_variables.c */
ngx_int_t ngx_http_rlm_add_variables(ngx_conf_t *cf);

/* ngx_http_rlm_frame.c */
ngx_chain_t *ngx_http_rlm_frame_encode(ngx_pool_t *pool, json_t *msg,
    size_t blob_len);
ngx_int_t ngx_http_rlm_frame_decode(ngx_http_rlm_frame_decoder_t *d,
    u_char **pos, u_char *last, ngx_log_t *log);
void ngx_http_rlm_frame_decoder_reset(ngx_http_rlm_frame_decoder_t *d);

/* ngx_http_rlm_peer.c */
ngx_http_rlm_peer_t *ngx_http_rlm_peer_create(ngx_pool_t *pool,
    ngx_log_t *log, ngx_str_t *path);
ngx_int_t ngx_http_rlm_peer_start(ngx_http_rlm_peer_t *p);
ngx_int_t ngx_http_rlm_peer_send(ngx_http_rlm_peer_t *p, ngx_chain_t *cl);
void ngx_http_rlm_peer_close(ngx_http_rlm_peer_t *p);
void ngx_http_rlm_peer_close_idle(void);

/* ngx_http_rlm_control.c */
ngx_int_t ngx_http_rlm_control(ngx_pool_t *pool, ngx_log_t *log,
    json_t *req, ngx_msec_t timeout, ngx_http_rlm_control_pt handler,
    void *data);
void ngx_http_rlm_control_release(ngx_log_t *log, u_char *sandbox);
void ngx_http_rlm_control_interrupt(ngx_log_t *log, u_char *sandbox);
void ngx_http_rlm_control_kill(ngx_log_t *log, u_char *sandbox,
    const char *reason);
void ngx_http_rlm_control_watch(ngx_log_t *log, u_char *sandbox,
    ngx_msec_t cpu_ms);
void ngx_http_rlm_control_unwatch(ngx_log_t *log, u_char *sandbox);
json_t *ngx_http_rlm_control_limits(ngx_http_rlm_main_conf_t *rmcf);
ngx_int_t ngx_http_rlm_control_pooled(ngx_log_t *log, json_t *req,
    ngx_http_rlm_control_pt handler);
ngx_int_t ngx_http_rlm_control_acquire(ngx_pool_t *pool, u_char *hex,
    ngx_http_rlm_control_pt handler, void *data);

/* ngx_http_rlm_session.c */
ngx_int_t ngx_http_rlm_session_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
ngx_int_t ngx_http_rlm_session_parse_id(u_char *hex, size_t len,
    u_char *id);
void ngx_http_rlm_session_format_id(u_char *id, u_char *hex);
ngx_int_t ngx_http_rlm_session_random_id(u_char *id, ngx_log_t *log);
void ngx_http_rlm_session_set_node(ngx_int_t node);
ngx_int_t ngx_http_rlm_session_node(void);
ngx_int_t ngx_http_rlm_session_foreign(u_char *id);
ngx_int_t ngx_http_rlm_session_reserve(ngx_http_rlm_zone_t *z, u_char *id,
    ngx_str_t *owner, ngx_uint_t max, ngx_http_rlm_session_t **sp);
ngx_int_t ngx_http_rlm_session_activate(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, json_t *reply);
void ngx_http_rlm_session_abort(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
ngx_http_rlm_session_t *ngx_http_rlm_session_get(ngx_http_rlm_zone_t *z,
    u_char *id, ngx_str_t *owner);
void ngx_http_rlm_session_put(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
ngx_int_t ngx_http_rlm_session_delete(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, u_char *sandbox);
void ngx_http_rlm_session_discard(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
ngx_uint_t ngx_http_rlm_session_deleted(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
ngx_uint_t ngx_http_rlm_session_lost(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, const char *reason);
ngx_uint_t ngx_http_rlm_session_is_lost(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, u_char *reason, size_t len);
json_t *ngx_http_rlm_session_json(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
json_t *ngx_http_rlm_session_list(ngx_http_rlm_zone_t *z, ngx_str_t *owner);
ngx_uint_t ngx_http_rlm_session_count_owner(ngx_http_rlm_zone_t *z,
    ngx_str_t *owner);
ngx_int_t ngx_http_rlm_session_enter(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, ngx_uint_t max_waiting,
    ngx_http_rlm_waiter_t **wp, ngx_uint_t *local);
ngx_int_t ngx_http_rlm_session_poll(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, ngx_http_rlm_waiter_t *w, ngx_uint_t *local);
void ngx_http_rlm_session_leave(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, ngx_http_rlm_waiter_t *w);
uint64_t ngx_http_rlm_session_done(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, ngx_uint_t cell_us, ngx_uint_t error,
    size_t context_bytes);
void ngx_http_rlm_session_copy_sandbox(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, ngx_str_t *path, u_char *sandbox,
    ngx_uint_t *generation, ngx_uint_t *state, u_char *reason);
void ngx_http_rlm_session_expire(ngx_http_rlm_zone_t *z, time_t idle,
    ngx_log_t *log);
uint64_t ngx_http_rlm_session_begin_completion(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
void ngx_http_rlm_session_add_tokens(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, uint64_t prompt, uint64_t completion);
ngx_http_rlm_session_t *ngx_http_rlm_session_lookup_locked(
    ngx_http_rlm_zone_t *z, u_char *id);
void ngx_http_rlm_session_link_locked(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, u_char *id, ngx_str_t *owner);
void ngx_http_rlm_session_free_locked(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
ngx_uint_t ngx_http_rlm_pid_alive(ngx_pid_t pid);

/* ngx_http_rlm_orphans.c */
void ngx_http_rlm_orphans_sweep(ngx_log_t *log);

/* ngx_http_rlm_spare.c */
ngx_int_t ngx_http_rlm_spare_take(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_main_conf_t *rmcf, ngx_str_t *owner,
    ngx_http_rlm_session_t **sp);
void ngx_http_rlm_spare_fill(ngx_log_t *log);
void ngx_http_rlm_spare_refill_soon(ngx_log_t *log);
ngx_uint_t ngx_http_rlm_spare_ready(ngx_http_rlm_zone_t *z);

/* ngx_http_rlm_api.c */
ngx_int_t ngx_http_rlm_sessions_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_rlm_api_owner(ngx_http_request_t *r, ngx_str_t *owner);
ngx_http_rlm_session_t *ngx_http_rlm_api_session(ngx_http_request_t *r,
    ngx_str_t *id, ngx_int_t *rc);

/* ngx_http_rlm_body_cap.c */
ngx_int_t ngx_http_rlm_body_cap_init(ngx_conf_t *cf);
ngx_int_t ngx_http_rlm_body_cap(ngx_http_request_t *r, off_t cap);
ngx_int_t ngx_http_rlm_body_limit(ngx_http_request_t *r, off_t cap);

/* ngx_http_rlm_open.c */
ngx_int_t ngx_http_rlm_session_open(ngx_http_rlm_open_t *op,
    ngx_pool_t *caller_pool, u_char *id, ngx_str_t *owner);
ngx_int_t ngx_http_rlm_open_send_error(ngx_http_request_t *r,
    ngx_http_rlm_open_t *op);

/* ngx_http_rlm_eval.c */
ngx_int_t ngx_http_rlm_eval_handler(ngx_http_request_t *r,
    ngx_http_rlm_session_t *s, ngx_uint_t context);

/* ngx_http_rlm_supervisor.c */
ngx_int_t ngx_http_rlm_supervisor_init(ngx_cycle_t *cycle,
    ngx_http_rlm_main_conf_t *rmcf);
void ngx_http_rlm_supervisor_exit(ngx_cycle_t *cycle);
void ngx_http_rlm_supervisor_worker_tidy(void);
void ngx_http_rlm_supervisor_served(ngx_atomic_uint_t generation);

/* ngx_http_rlm_janitor.c */
ngx_int_t ngx_http_rlm_janitor_init(ngx_cycle_t *cycle);


extern ngx_module_t  ngx_http_rlm_module;


#endif /* _NGX_HTTP_RLM_MODULE_H_INCLUDED_ */
