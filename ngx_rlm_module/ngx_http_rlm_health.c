
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * GET /healthz: liveness of the module.
 */


#include "ngx_http_rlm_module.h"


ngx_int_t
ngx_http_rlm_health_handler(ngx_http_request_t *r)
{
    ngx_int_t    rc;
    ngx_str_t    body;

    static u_char  ok[] = "{\"status\":\"ok\",\"module\":\"ngx_rlm\","
                          "\"version\":\"" NGX_HTTP_RLM_VERSION "\"}\n";

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

    body.data = ok;
    body.len = sizeof(ok) - 1;

    return ngx_http_rlm_send_json(r, NGX_HTTP_OK, body.data, body.len);
}
