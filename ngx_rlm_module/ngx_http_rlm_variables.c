
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Variables for access logs: $rlm_session_id, $rlm_cell_status,
 * $rlm_sandbox_ms, and $rlm_request_id: the client's X-Request-Id when it
 * is a sane token, else nginx's $request_id, so the id an answer's
 * X-Request-Id header carries (add_header ... $rlm_request_id) is the one
 * the logs show.
 */


#include "ngx_http_rlm_module.h"


static ngx_int_t ngx_http_rlm_session_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_rlm_cell_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_rlm_sandbox_ms_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_int_t ngx_http_rlm_completion_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_rlm_node_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_rlm_request_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_rlm_empty_variable(ngx_http_variable_value_t *v);


/* the longest client id taken as is; a longer one is replaced */
#define NGX_HTTP_RLM_REQUEST_ID_MAX  128

static ngx_int_t  ngx_http_rlm_request_id_index = NGX_ERROR;


static ngx_http_variable_t  ngx_http_rlm_vars[] = {

    { ngx_string("rlm_session_id"), NULL,
      ngx_http_rlm_session_id_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("rlm_cell_status"), NULL,
      ngx_http_rlm_cell_status_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("rlm_sandbox_ms"), NULL,
      ngx_http_rlm_sandbox_ms_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("rlm_iterations"), NULL,
      ngx_http_rlm_completion_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("rlm_tokens"), NULL,
      ngx_http_rlm_completion_variable, 1,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    /* money, 6 decimals; the Lua policy adds it to the tenant's total */
    { ngx_string("rlm_cost"), NULL,
      ngx_http_rlm_completion_variable, 2,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    /* rlm_node_id in decimal, "" for a single node (rlm.cluster reads it) */
    { ngx_string("rlm_node_id"), NULL,
      ngx_http_rlm_node_id_variable, 0, 0, 0 },

    /* cacheable: evaluated once, the header and the logs agree */
    { ngx_string("rlm_request_id"), NULL,
      ngx_http_rlm_request_id_variable, 0, 0, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_rlm_add_variables(ngx_conf_t *cf)
{
    ngx_str_t             name = ngx_string("request_id");
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_rlm_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    /* indexed, so that $request_id too is computed once per request */

    ngx_http_rlm_request_id_index = ngx_http_get_variable_index(cf, &name);
    if (ngx_http_rlm_request_id_index == NGX_ERROR) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * $rlm_request_id: X-Request-Id from the client if it is 1 to 128 of
 * [A-Za-z0-9._:-] (nothing that could split a log line or a header),
 * else $request_id (32 hex digits).
 */

static ngx_int_t
ngx_http_rlm_request_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                     *p, *end;
    ngx_str_t                  *given;
    ngx_http_variable_value_t  *id;

    given = ngx_http_rlm_request_header(r, "X-Request-Id");

    if (given != NULL
        && given->len > 0 && given->len <= NGX_HTTP_RLM_REQUEST_ID_MAX)
    {
        end = given->data + given->len;

        for (p = given->data; p < end; p++) {
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
                  || (*p >= '0' && *p <= '9') || *p == '.' || *p == '_'
                  || *p == ':' || *p == '-'))
            {
                break;
            }
        }

        if (p == end) {
            v->data = given->data;
            v->len = given->len;
            v->valid = 1;
            v->no_cacheable = 0;
            v->not_found = 0;

            return NGX_OK;
        }
    }

    id = ngx_http_get_indexed_variable(r, ngx_http_rlm_request_id_index);

    if (id == NULL || id->not_found) {
        return ngx_http_rlm_empty_variable(v);
    }

    *v = *id;
    v->no_cacheable = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_session_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL || !ctx->has_session) {
        return ngx_http_rlm_empty_variable(v);
    }

    v->data = ctx->session_id;
    v->len = NGX_HTTP_RLM_ID_HEX;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_node_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char     *p;
    ngx_int_t   node;

    node = ngx_http_rlm_session_node();

    if (node < 0) {
        return ngx_http_rlm_empty_variable(v);
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%i", node) - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_cell_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL || ctx->cell_status.len == 0) {
        return ngx_http_rlm_empty_variable(v);
    }

    v->data = ctx->cell_status.data;
    v->len = ctx->cell_status.len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_sandbox_ms_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char              *p;
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL || !ctx->has_sandbox_time) {
        return ngx_http_rlm_empty_variable(v);
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN + 4);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;
    v->len = ngx_sprintf(p, "%ui.%03ui", ctx->sandbox_us / 1000,
                         ctx->sandbox_us % 1000) - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* $rlm_iterations (data 0), $rlm_tokens (1), $rlm_cost (2) */

static ngx_int_t
ngx_http_rlm_completion_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char              *p;
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL || !ctx->has_completion) {
        return ngx_http_rlm_empty_variable(v);
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN + 8);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;

    if (data == 2) {
        v->len = ngx_sprintf(p, "%.6f", ctx->cost) - p;

    } else {
        v->len = (data ? ngx_sprintf(p, "%uL", ctx->tokens)
                       : ngx_sprintf(p, "%ui", ctx->iterations)) - p;
    }
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* a request that did not touch a session logs an empty value, not "-" */

static ngx_int_t
ngx_http_rlm_empty_variable(ngx_http_variable_value_t *v)
{
    v->data = (u_char *) "";
    v->len = 0;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}
