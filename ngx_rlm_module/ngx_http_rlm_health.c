
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * GET /healthz (rlm_health): liveness of the module and reachability of
 * the sandbox manager, which is pinged on its control socket without
 * blocking the worker.
 */


#include "ngx_http_rlm_module.h"


#define NGX_HTTP_RLM_HEALTH_TIMEOUT  1000


static void ngx_http_rlm_health_pong(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);
static ngx_int_t ngx_http_rlm_health_send(ngx_http_request_t *r,
    const char *manager, ngx_uint_t ok);


ngx_int_t
ngx_http_rlm_health_handler(ngx_http_request_t *r)
{
    json_t                    *req;
    ngx_int_t                  rc;
    ngx_http_rlm_main_conf_t  *rmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_ALLOWED,
                                       "invalid_request_error",
                                       "method_not_allowed",
                                       "use GET or HEAD for the health "
                                       "endpoint");
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    if (rmcf->control_path.len == 0) {
        return ngx_http_rlm_health_send(r, "not_configured", 1);
    }

    req = json_pack("{s:s}", "op", "ping");
    if (req == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->main->count++;

    rc = ngx_http_rlm_control(r->pool, r->connection->log, req,
                              NGX_HTTP_RLM_HEALTH_TIMEOUT,
                              ngx_http_rlm_health_pong, r);
    json_decref(req);

    if (rc != NGX_OK) {
        r->main->count--;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_health_pong(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    ngx_http_request_t  *r = data;

    ngx_uint_t            ok;
    ngx_http_rlm_zone_t  *z;

    ok = reply && json_is_true(json_object_get(reply, "ok"));

    z = ngx_http_rlm_zone();
    if (z && z->sh) {
        z->sh->stats.manager_up = ok;
    }

    ngx_http_rlm_finalize(r,
        ngx_http_rlm_health_send(r, ok ? "reachable" : "unreachable", ok));
}


static ngx_int_t
ngx_http_rlm_health_send(ngx_http_request_t *r, const char *manager,
    ngx_uint_t ok)
{
    json_t     *o;
    ngx_int_t   rc;

    o = json_pack("{s:s, s:s, s:s, s:s}",
                  "status", ok ? "ok" : "degraded",
                  "module", "ngx_rlm",
                  "version", NGX_HTTP_RLM_VERSION,
                  "manager", manager);
    if (o == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(r, ok ? NGX_HTTP_OK
                                            : NGX_HTTP_SERVICE_UNAVAILABLE,
                                      o);
    json_decref(o);

    return rc;
}
