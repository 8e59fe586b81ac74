
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The body size cap of the module's routes for bodies without a length.
 *
 * The routes lift client_max_body_size and compare a Content-Length with
 * their own cap, so a sized body over it gets a JSON 413 from the
 * handler.  A chunked body is only known to be too large while it is
 * read: a request body filter counts it and stops it at the cap.  nginx
 * itself then answers 413 (and closes the connection after a lingering
 * read), with its HTML error page; the output filters here replace that
 * page, for these requests only, with the API's error envelope.
 *
 * The Lua policy reads a completion's body in the access phase, before
 * the handler; it calls ngx_http_rlm_body_limit() first (through FFI),
 * which sets the same cap and refuses a Content-Length over it there
 * and then.
 */


#include "ngx_http_rlm_module.h"


static ngx_int_t ngx_http_rlm_body_cap_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_rlm_body_cap_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_rlm_body_cap_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);


static ngx_http_request_body_filter_pt  ngx_http_next_request_body_filter;
static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


ngx_int_t
ngx_http_rlm_body_cap_init(ngx_conf_t *cf)
{
    ngx_http_next_request_body_filter = ngx_http_top_request_body_filter;
    ngx_http_top_request_body_filter = ngx_http_rlm_body_cap_filter;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_rlm_body_cap_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_rlm_body_cap_body_filter;

    return NGX_OK;
}


/* the cap of this request's body, read next; 0 leaves it to nginx */

ngx_int_t
ngx_http_rlm_body_cap(ngx_http_request_t *r, off_t cap)
{
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_rlm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ctx->body_cap = cap;

    return NGX_OK;
}


/*
 * The cap of a body someone else reads (the Lua policy, through FFI).
 * A Content-Length over it is refused at once: the caller finalizes the
 * request with NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, so nginx answers
 * without a "100 Continue", drains what the client sends anyway without
 * keeping it and closes the connection; the header filter below writes
 * the envelope.  A chunked body is stopped at the cap while it is read.
 */

ngx_int_t
ngx_http_rlm_body_limit(ngx_http_request_t *r, off_t cap)
{
    ngx_http_rlm_ctx_t  *ctx;

    if (cap <= 0) {
        return NGX_ERROR;
    }

    ctx = ngx_http_rlm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    ctx->body_cap = cap;

    if (r->headers_in.content_length_n > cap) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "rlm: client intended to send a body of %O bytes, "
                      "more than %O", r->headers_in.content_length_n, cap);

        ctx->body_refused = 1;

        /* the body is not wanted: do not ask for it */
        r->expect_tested = 1;

        return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_body_cap_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_chain_t         *cl;
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL || ctx->body_cap == 0) {
        return ngx_http_next_request_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {
        ctx->body_received += ngx_buf_size(cl->buf);
    }

    if (ctx->body_received > ctx->body_cap) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "rlm: client intended to send a body larger than "
                      "%O bytes", ctx->body_cap);
        ctx->body_refused = 1;
        return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;
    }

    return ngx_http_next_request_body_filter(r, in);
}


/* nginx's 413 for a body this module refused: the envelope instead */

static ngx_int_t
ngx_http_rlm_body_cap_header_filter(ngx_http_request_t *r)
{
    u_char              *text;
    size_t               len;
    json_t              *err;
    ngx_buf_t           *b;
    ngx_chain_t         *cl;
    ngx_http_rlm_ctx_t  *ctx;
    u_char               msg[64 + NGX_OFF_T_LEN];

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL || !ctx->body_refused || ctx->refusal != NULL
        || r->headers_out.status != NGX_HTTP_REQUEST_ENTITY_TOO_LARGE)
    {
        return ngx_http_next_header_filter(r);
    }

    ngx_snprintf(msg, sizeof(msg), "the request body is larger than %O "
                 "bytes%Z", ctx->body_cap);

    err = ngx_http_rlm_error_value("invalid_request_error", "body_too_large",
                                   NULL, (char *) msg);
    if (err == NULL) {
        return NGX_ERROR;
    }

    text = ngx_http_rlm_json_body(r->pool, err, &len);
    json_decref(err);

    b = ngx_calloc_buf(r->pool);
    cl = ngx_alloc_chain_link(r->pool);
    if (text == NULL || b == NULL || cl == NULL) {
        return NGX_ERROR;
    }

    b->pos = text;
    b->last = text + len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    cl->buf = b;
    cl->next = NULL;
    ctx->refusal = cl;

    r->headers_out.content_length_n = b->last - b->pos;

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.charset.len = 0;

    return ngx_http_next_header_filter(r);
}


static ngx_int_t
ngx_http_rlm_body_cap_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL || ctx->refusal == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    if (ctx->refusal_sent) {
        /* the rest of nginx's page goes nowhere; flushing goes on */
        return ngx_http_next_body_filter(r, NULL);
    }

    ctx->refusal_sent = 1;

    return ngx_http_next_body_filter(r, ctx->refusal);
}
