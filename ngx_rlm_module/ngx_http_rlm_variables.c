
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Variables for access logs: $rlm_session_id, $rlm_cell_status,
 * $rlm_sandbox_ms.
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
static ngx_int_t ngx_http_rlm_empty_variable(ngx_http_variable_value_t *v);


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

      ngx_http_null_variable
};


ngx_int_t
ngx_http_rlm_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_rlm_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

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
