
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Client of rlm-sandboxd's control socket: one connection per request,
 * one request and one reply per connection, so any worker can talk to
 * the manager without sharing state.
 */


#include "ngx_http_rlm_module.h"


typedef struct {
    ngx_http_rlm_control_pt   handler;
    void                     *data;
    json_t                   *reply;
    ngx_atomic_uint_t         generation;    /* the manager asked */
} ngx_http_rlm_control_ctx_t;


static ngx_int_t ngx_http_rlm_control_frame(ngx_http_rlm_peer_t *p,
    json_t *msg);
static void ngx_http_rlm_control_done(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status);
static void ngx_http_rlm_control_forget(ngx_log_t *log, const char *op,
    u_char *sandbox);
static void ngx_http_rlm_control_send(ngx_log_t *log, const char *op,
    u_char *sandbox, json_t *req);
static void ngx_http_rlm_control_release_done(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);


/*
 * Sends req (a reference is taken) and calls handler with the reply
 * object (NULL unless status is OK; borrowed for the call).  The handler
 * may run before this returns when the socket is not there at all.
 */

ngx_int_t
ngx_http_rlm_control(ngx_pool_t *pool, ngx_log_t *log, json_t *req,
    ngx_msec_t timeout, ngx_http_rlm_control_pt handler, void *data)
{
    ngx_chain_t                 *cl;
    ngx_http_rlm_peer_t         *p;
    ngx_http_rlm_main_conf_t    *rmcf;
    ngx_http_rlm_zone_t         *z;
    ngx_http_rlm_control_ctx_t  *ctx;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    ctx = ngx_pcalloc(pool, sizeof(ngx_http_rlm_control_ctx_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ctx->handler = handler;
    ctx->data = data;

    z = ngx_http_rlm_zone();
    if (z && z->sh) {
        ctx->generation = z->sh->super.starts;
    }

    p = ngx_http_rlm_peer_create(pool, log, &rmcf->control_path);
    if (p == NULL) {
        return NGX_ERROR;
    }

    p->timeout = timeout;
    p->frame_handler = ngx_http_rlm_control_frame;
    p->done_handler = ngx_http_rlm_control_done;
    p->data = ctx;

    cl = ngx_http_rlm_frame_encode(pool, req, 0);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    p->out = cl;

    return ngx_http_rlm_peer_start(p);
}


static ngx_int_t
ngx_http_rlm_control_frame(ngx_http_rlm_peer_t *p, json_t *msg)
{
    ngx_http_rlm_control_ctx_t  *ctx = p->data;

    ctx->reply = json_incref(msg);

    return NGX_OK;
}


static void
ngx_http_rlm_control_done(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status)
{
    json_t                      *reply;
    ngx_http_rlm_control_ctx_t  *ctx = p->data;

    reply = ctx->reply;
    ctx->reply = NULL;

    /* a manager that answers works: its supervisor need not back off */

    if (status == NGX_HTTP_RLM_PEER_OK && reply
        && json_is_true(json_object_get(reply, "ok")))
    {
        ngx_http_rlm_supervisor_served(ctx->generation);
    }

    ctx->handler(ctx->data, status == NGX_HTTP_RLM_PEER_OK ? reply : NULL,
                 status);

    json_decref(reply);
}


/* the limits every acquire asks for, from the current configuration */

json_t *
ngx_http_rlm_control_limits(ngx_http_rlm_main_conf_t *rmcf)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I}",
                     "cpu_s", (json_int_t) rmcf->cell_cpu_time,
                     "wall_ms", (json_int_t) rmcf->cell_timeout,
                     "memory_mb",
                     (json_int_t) (rmcf->sandbox_memory / (1024 * 1024)),
                     "pids", (json_int_t) rmcf->sandbox_pids,
                     "output_bytes", (json_int_t) rmcf->output_max);
}


/*
 * Fire and forget: the sandbox of an expired or deleted session goes back
 * to the manager in the background, on a pool of its own.
 */

void
ngx_http_rlm_control_release(ngx_log_t *log, u_char *sandbox)
{
    ngx_http_rlm_control_forget(log, "release", sandbox);
}


/* the same for a cell its host gave up on: it raises KeyboardInterrupt */

void
ngx_http_rlm_control_interrupt(ngx_log_t *log, u_char *sandbox)
{
    ngx_http_rlm_control_forget(log, "interrupt", sandbox);
}


/*
 * Limits held from outside the sandbox (ngx_http_rlm_cell.c): the manager
 * kills a sandbox whose cell ran past its wall time, and kills a watched
 * one once it has used cpu_ms more CPU time.
 */

void
ngx_http_rlm_control_kill(ngx_log_t *log, u_char *sandbox,
    const char *reason)
{
    ngx_http_rlm_control_send(log, "kill", sandbox,
                              json_pack("{s:s, s:s, s:s}", "op", "kill",
                                        "sandbox", (char *) sandbox,
                                        "reason", reason));
}


void
ngx_http_rlm_control_watch(ngx_log_t *log, u_char *sandbox,
    ngx_msec_t cpu_ms)
{
    ngx_http_rlm_control_send(log, "watch", sandbox,
                              json_pack("{s:s, s:s, s:I}", "op", "watch",
                                        "sandbox", (char *) sandbox,
                                        "cpu_ms", (json_int_t) cpu_ms));
}


void
ngx_http_rlm_control_unwatch(ngx_log_t *log, u_char *sandbox)
{
    ngx_http_rlm_control_forget(log, "unwatch", sandbox);
}


static void
ngx_http_rlm_control_forget(ngx_log_t *log, const char *op,
    u_char *sandbox)
{
    ngx_http_rlm_control_send(log, op, sandbox,
                              json_pack("{s:s, s:s}", "op", op,
                                        "sandbox", (char *) sandbox));
}


/* fire and forget: req (whose reference this takes) about sandbox */

static void
ngx_http_rlm_control_send(ngx_log_t *log, const char *op, u_char *sandbox,
    json_t *req)
{
    if (sandbox[0] == '\0') {
        json_decref(req);
        return;
    }

    if (req == NULL
        || ngx_http_rlm_control_pooled(log, req,
                                       ngx_http_rlm_control_release_done)
           != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "rlm: could not %s sandbox \"%s\"", op, sandbox);
    }

    json_decref(req);
}


/*
 * Sends req on a pool of its own, which the handler gets as data and
 * destroys.  NGX_ERROR: nothing was sent and the pool is gone.
 */

ngx_int_t
ngx_http_rlm_control_pooled(ngx_log_t *log, json_t *req,
    ngx_http_rlm_control_pt handler)
{
    ngx_pool_t  *pool;

    pool = ngx_create_pool(1024, log);
    if (pool == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_rlm_control(pool, log, req, NGX_HTTP_RLM_CONTROL_TIMEOUT,
                             handler, pool)
        != NGX_OK)
    {
        ngx_destroy_pool(pool);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* an acquire for session hex, with the running configuration's limits */

ngx_int_t
ngx_http_rlm_control_acquire(ngx_pool_t *pool, u_char *hex,
    ngx_http_rlm_control_pt handler, void *data)
{
    json_t                    *req;
    ngx_int_t                  rc;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    req = json_pack("{s:s, s:s%, s:o}", "op", "acquire",
                    "session", (char *) hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                    "limits", ngx_http_rlm_control_limits(rmcf));
    if (req == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_rlm_control(pool, pool->log, req,
                              NGX_HTTP_RLM_CONTROL_TIMEOUT, handler, data);
    json_decref(req);

    return rc;
}


static void
ngx_http_rlm_control_release_done(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    ngx_pool_t  *pool = data;

    json_t  *ok;

    ok = reply ? json_object_get(reply, "ok") : NULL;

    if (!json_is_true(ok)) {
        ngx_log_error(NGX_LOG_INFO, pool->log, 0,
                      "rlm: a request about a sandbox failed (status %d)",
                      (int) status);
    }

    ngx_destroy_pool(pool);
}
