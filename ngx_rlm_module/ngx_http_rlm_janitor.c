
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * A once-a-second timer in every worker.  Worker 0 expires idle sessions
 * (releasing their sandboxes), pings the manager for rlm_manager_up and
 * every 10 s releases orphaned sandboxes (ngx_http_rlm_orphans.c);
 * every worker tops up the spare sandboxes (rlm_session_spares) and
 * drops the channel descriptors nginx hands it for the supervised
 * manager, which it never uses.
 */


#include "ngx_http_rlm_module.h"


#define NGX_HTTP_RLM_JANITOR_INTERVAL  1000
#define NGX_HTTP_RLM_PING_EVERY        5
#define NGX_HTTP_RLM_SWEEP_EVERY       10


static void ngx_http_rlm_janitor_handler(ngx_event_t *ev);
static void ngx_http_rlm_janitor_ping(ngx_log_t *log);
static void ngx_http_rlm_janitor_pong(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);


static ngx_event_t  ngx_http_rlm_janitor_event;
static ngx_uint_t   ngx_http_rlm_janitor_ticks;
static ngx_uint_t   ngx_http_rlm_janitor_pinging;


ngx_int_t
ngx_http_rlm_janitor_init(ngx_cycle_t *cycle)
{
    ngx_event_t  *ev;

    ev = &ngx_http_rlm_janitor_event;

    ngx_memzero(ev, sizeof(ngx_event_t));

    ev->handler = ngx_http_rlm_janitor_handler;
    ev->log = cycle->log;
    ev->data = cycle;

    /* a worker shutting down gracefully does not wait for this timer */
    ev->cancelable = 1;

    ngx_add_timer(ev, NGX_HTTP_RLM_JANITOR_INTERVAL);

    return NGX_OK;
}


static void
ngx_http_rlm_janitor_handler(ngx_event_t *ev)
{
    ngx_http_rlm_zone_t       *z;
    ngx_http_rlm_main_conf_t  *rmcf;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    ngx_http_rlm_supervisor_worker_tidy();

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);
    z = ngx_http_rlm_zone();

    if (ngx_worker == 0 && rmcf && z && z->sh) {
        ngx_http_rlm_session_expire(z, rmcf->session_idle_timeout, ev->log);

        if (rmcf->control_path.len
            && ngx_http_rlm_janitor_ticks % NGX_HTTP_RLM_PING_EVERY == 0)
        {
            ngx_http_rlm_janitor_ping(ev->log);
        }

        if (ngx_http_rlm_janitor_ticks % NGX_HTTP_RLM_SWEEP_EVERY
            == NGX_HTTP_RLM_SWEEP_EVERY - 1)
        {
            ngx_http_rlm_orphans_sweep(ev->log);
        }

        ngx_http_rlm_janitor_ticks++;
    }

    ngx_http_rlm_spare_fill(ev->log);

    ngx_add_timer(ev, NGX_HTTP_RLM_JANITOR_INTERVAL);
}


static void
ngx_http_rlm_janitor_ping(ngx_log_t *log)
{
    json_t  *req;

    if (ngx_http_rlm_janitor_pinging) {
        return;
    }

    req = json_pack("{s:s}", "op", "ping");
    if (req == NULL) {
        return;
    }

    ngx_http_rlm_janitor_pinging = 1;

    if (ngx_http_rlm_control_pooled(log, req, ngx_http_rlm_janitor_pong)
        != NGX_OK)
    {
        ngx_http_rlm_janitor_pinging = 0;
    }

    json_decref(req);
}


static void
ngx_http_rlm_janitor_pong(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    ngx_pool_t  *pool = data;

    ngx_uint_t            ok;
    ngx_http_rlm_zone_t  *z;

    ok = reply && json_is_true(json_object_get(reply, "ok"));

    z = ngx_http_rlm_zone();
    if (z && z->sh) {
        if (z->sh->stats.manager_up && !ok) {
            ngx_log_error(NGX_LOG_ERR, pool->log, 0,
                          "rlm: the sandbox manager stopped answering "
                          "on its control socket");
        }

        z->sh->stats.manager_up = ok;
    }

    ngx_http_rlm_janitor_pinging = 0;

    ngx_destroy_pool(pool);
}
