
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Spare sandboxes (rlm_session_spares): sandboxes acquired from the
 * manager before anybody asks, kept in the session zone, so that opening
 * a session is a table operation instead of a round trip to the manager.
 * On an idle 2-core VM that round trip was most of a create (waking the
 * manager's CPU and the worker's again for the answer).
 *
 * A spare lives in the zone's spares queue, not in the rbtree: no request
 * can name it.  Only an open whose id was made up for it takes a spare,
 * which then becomes a session of the caller's owner under the id the
 * spare was acquired for (a client-chosen id asks the manager).  A
 * spare is made only while sessions and spares together stay under
 * rlm_max_sessions.  One is never handed out after the manager restarted
 * (its sandbox is gone) or after a reload changed the sandbox limits (new
 * sessions get the new limits): the fill releases such spares and makes
 * new ones.  Every worker's janitor tick tops the spares up; a worker
 * that took one refills a few milliseconds later, once the new session's
 * first cell has had the CPU.
 */


#include "ngx_http_rlm_module.h"
#include "ngx_http_rlm_metrics.h"


#define NGX_HTTP_RLM_SPARES_MAX        64     /* the directive's bound */
#define NGX_HTTP_RLM_SPARE_REFILL_MS   3


typedef struct {
    ngx_http_rlm_zone_t       *zone;
    ngx_http_rlm_session_t    *spare;
    ngx_pool_t                *pool;
} ngx_http_rlm_spare_op_t;


static uint32_t ngx_http_rlm_spare_limits_key(
    ngx_http_rlm_main_conf_t *rmcf);
static ngx_uint_t ngx_http_rlm_spare_usable(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, uint32_t key);
static ngx_int_t ngx_http_rlm_spare_acquire(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, ngx_log_t *log);
static void ngx_http_rlm_spare_acquired(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);
static void ngx_http_rlm_spare_drop(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
static void ngx_http_rlm_spare_refill_handler(ngx_event_t *ev);


static ngx_event_t       ngx_http_rlm_spare_refill_event;

/* what the event's debug lines print as its connection (fd -1) */
static ngx_connection_t  ngx_http_rlm_spare_refill_conn;


/*
 * Makes a ready spare a session of this owner, under the spare's own id
 * (the one its sandbox was acquired for: the manager's records and the
 * zone's agree, which the orphan sweep relies on).  NGX_OK with *sp
 * referenced and active, or NGX_DECLINED when there is none to take or
 * the session limit is reached (the ordinary open reports that).
 */

ngx_int_t
ngx_http_rlm_spare_take(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_main_conf_t *rmcf, ngx_str_t *owner,
    ngx_http_rlm_session_t **sp)
{
    uint32_t                 key;
    ngx_queue_t             *q;
    ngx_http_rlm_session_t  *s;

    if (owner->len > NGX_HTTP_RLM_OWNER_LEN) {
        return NGX_DECLINED;
    }

    key = ngx_http_rlm_spare_limits_key(rmcf);

    ngx_shmtx_lock(&z->shpool->mutex);

    if (z->sh->count >= rmcf->max_sessions) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_DECLINED;
    }

    for (q = ngx_queue_head(&z->sh->spares);
         q != ngx_queue_sentinel(&z->sh->spares);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_rlm_session_t, lru);

        if (!ngx_http_rlm_spare_usable(z, s, key)
            || ngx_http_rlm_session_lookup_locked(z, s->id))
        {
            continue;
        }

        ngx_queue_remove(q);
        z->sh->nspares--;

        ngx_http_rlm_session_link_locked(z, s, s->id, owner);

        ngx_shmtx_unlock(&z->shpool->mutex);

        (void) ngx_atomic_fetch_add(&z->sh->stats.sessions_from_spare, 1);

        *sp = s;

        return NGX_OK;
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return NGX_DECLINED;
}


/*
 * Brings the spares to rlm_session_spares: drops those of dead workers'
 * unfinished acquires, releases stale and surplus ones, and acquires the
 * missing ones.
 */

void
ngx_http_rlm_spare_fill(ngx_log_t *log)
{
    uint32_t                   key;
    ngx_uint_t                 i, target, ready, nstale, nnew;
    ngx_queue_t               *q, *next;
    ngx_http_rlm_zone_t       *z;
    ngx_http_rlm_session_t    *s, *fresh[NGX_HTTP_RLM_SPARES_MAX];
    ngx_http_rlm_main_conf_t  *rmcf;
    u_char                     stale[NGX_HTTP_RLM_SPARES_MAX]
                                    [NGX_HTTP_RLM_SANDBOX_LEN + 1];

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);
    z = ngx_http_rlm_zone();

    if (rmcf == NULL || z == NULL || z->sh == NULL
        || rmcf->control_path.len == 0)
    {
        return;
    }

    target = rmcf->session_spares;

    if (target == 0 && z->sh->nspares == 0) {
        return;
    }

    key = ngx_http_rlm_spare_limits_key(rmcf);
    ready = 0;
    nstale = 0;
    nnew = 0;

    ngx_shmtx_lock(&z->shpool->mutex);

    for (q = ngx_queue_head(&z->sh->spares);
         q != ngx_queue_sentinel(&z->sh->spares);
         q = next)
    {
        next = ngx_queue_next(q);
        s = ngx_queue_data(q, ngx_http_rlm_session_t, lru);

        if (s->state == NGX_HTTP_RLM_SESSION_CREATING) {
            if (!ngx_http_rlm_pid_alive(s->busy_pid)) {
                /* its worker died waiting for the manager */
                ngx_queue_remove(q);
                z->sh->nspares--;
                ngx_http_rlm_session_free_locked(z, s);
            }

            continue;
        }

        if (ngx_http_rlm_spare_usable(z, s, key) && ready < target) {
            ready++;
            continue;
        }

        /* a sandbox of the manager that died is gone with it */

        if (s->generation == z->sh->super.starts
            && nstale < NGX_HTTP_RLM_SPARES_MAX)
        {
            ngx_memcpy(stale[nstale++], s->sandbox,
                       NGX_HTTP_RLM_SANDBOX_LEN + 1);
        }

        ngx_queue_remove(q);
        z->sh->nspares--;
        ngx_http_rlm_session_free_locked(z, s);
    }

    while (z->sh->stats.manager_up
           && z->sh->nspares < target
           && z->sh->count + z->sh->nspares < rmcf->max_sessions)
    {
        s = ngx_slab_calloc_locked(z->shpool,
                                   sizeof(ngx_http_rlm_session_t));
        if (s == NULL) {
            break;
        }

        s->state = NGX_HTTP_RLM_SESSION_CREATING;
        s->busy_pid = ngx_pid;
        s->limits_key = key;
        ngx_queue_init(&s->waiters);

        ngx_queue_insert_tail(&z->sh->spares, &s->lru);
        z->sh->nspares++;

        fresh[nnew++] = s;
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    for (i = 0; i < nstale; i++) {
        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "rlm: releasing spare sandbox \"%s\": it is gone, "
                      "the limits changed or rlm_session_spares was lowered",
                      stale[i]);

        ngx_http_rlm_control_release(log, stale[i]);
    }

    for (i = 0; i < nnew; i++) {
        if (ngx_http_rlm_spare_acquire(z, fresh[i], log) != NGX_OK) {
            ngx_http_rlm_spare_drop(z, fresh[i]);
        }
    }
}


/* a spare was taken: make another once the new session is under way */

void
ngx_http_rlm_spare_refill_soon(ngx_log_t *log)
{
    ngx_event_t  *ev;

    ev = &ngx_http_rlm_spare_refill_event;

    if (ev->timer_set) {
        return;
    }

    ngx_http_rlm_spare_refill_conn.fd = (ngx_socket_t) -1;

    ev->handler = ngx_http_rlm_spare_refill_handler;
    ev->data = &ngx_http_rlm_spare_refill_conn;
    ev->log = log;
    ev->cancelable = 1;

    ngx_add_timer(ev, NGX_HTTP_RLM_SPARE_REFILL_MS);
}


static void
ngx_http_rlm_spare_refill_handler(ngx_event_t *ev)
{
    ngx_http_rlm_spare_fill(ev->log);
}


/* spares a session could take now, for the metrics */

ngx_uint_t
ngx_http_rlm_spare_ready(ngx_http_rlm_zone_t *z)
{
    uint32_t                   key;
    ngx_uint_t                 n;
    ngx_queue_t               *q;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);
    if (rmcf == NULL) {
        return 0;
    }

    key = ngx_http_rlm_spare_limits_key(rmcf);
    n = 0;

    ngx_shmtx_lock(&z->shpool->mutex);

    for (q = ngx_queue_head(&z->sh->spares);
         q != ngx_queue_sentinel(&z->sh->spares);
         q = ngx_queue_next(q))
    {
        n += ngx_http_rlm_spare_usable(z, ngx_queue_data(q,
                                       ngx_http_rlm_session_t, lru), key);
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return n;
}


/*
 * The limits a sandbox was acquired with, reduced to a number: a reload
 * that changes any of them makes the older spares unfit.
 */

static uint32_t
ngx_http_rlm_spare_limits_key(ngx_http_rlm_main_conf_t *rmcf)
{
    uint64_t  limits[5];

    limits[0] = (uint64_t) rmcf->cell_cpu_time;
    limits[1] = rmcf->cell_timeout;
    limits[2] = rmcf->sandbox_memory;
    limits[3] = rmcf->sandbox_pids;
    limits[4] = rmcf->output_max;

    return ngx_crc32_short((u_char *) limits, sizeof(limits));
}


/*
 * Called with the zone locked.  The process check catches sandboxes that
 * died without the generation changing: an external manager restarted, or
 * the manager of the old binary during a binary upgrade (whose control
 * socket the new workers used until it left).
 */

static ngx_uint_t
ngx_http_rlm_spare_usable(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s,
    uint32_t key)
{
    return s->state == NGX_HTTP_RLM_SESSION_ACTIVE
           && s->generation == z->sh->super.starts
           && s->limits_key == key
           && ngx_http_rlm_pid_alive(s->sandbox_pid);
}


static ngx_int_t
ngx_http_rlm_spare_acquire(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s,
    ngx_log_t *log)
{
    u_char                    label[NGX_HTTP_RLM_ID_HEX];
    ngx_pool_t               *pool;
    ngx_http_rlm_spare_op_t  *op;

    /*
     * the id of the session the spare will become; no other worker reads
     * it before the spare is ready
     */

    if (ngx_http_rlm_session_random_id(s->id, log) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_rlm_session_format_id(s->id, label);

    pool = ngx_create_pool(1024, log);
    if (pool == NULL) {
        return NGX_ERROR;
    }

    op = ngx_palloc(pool, sizeof(ngx_http_rlm_spare_op_t));
    if (op == NULL) {
        ngx_destroy_pool(pool);
        return NGX_ERROR;
    }

    op->zone = z;
    op->spare = s;
    op->pool = pool;

    if (ngx_http_rlm_control_acquire(pool, label,
                                     ngx_http_rlm_spare_acquired, op)
        != NGX_OK)
    {
        ngx_destroy_pool(pool);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_spare_acquired(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    ngx_http_rlm_spare_op_t  *op = data;

    json_t      *err;
    ngx_pool_t  *pool;
    const char  *code;

    pool = op->pool;

    ngx_http_rlm_metrics_acquire(reply);

    if (reply && json_is_true(json_object_get(reply, "ok"))
        && ngx_http_rlm_session_activate(op->zone, op->spare, reply)
           == NGX_OK)
    {
        (void) ngx_atomic_fetch_add(&op->zone->sh->stats.sandbox_starts, 1);

        ngx_destroy_pool(pool);
        return;
    }

    err = reply ? json_object_get(reply, "error") : NULL;
    code = json_string_value(json_object_get(err, "code"));

    ngx_log_error(NGX_LOG_INFO, pool->log, 0,
                  "rlm: no spare sandbox from the manager (%s)",
                  code ? code : reply ? "bad reply" : "not reachable");

    ngx_http_rlm_spare_drop(op->zone, op->spare);

    ngx_destroy_pool(pool);

    (void) status;
}


/* a spare whose acquire failed */

static void
ngx_http_rlm_spare_drop(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s)
{
    ngx_shmtx_lock(&z->shpool->mutex);

    ngx_queue_remove(&s->lru);
    z->sh->nspares--;
    ngx_http_rlm_session_free_locked(z, s);

    ngx_shmtx_unlock(&z->shpool->mutex);
}
