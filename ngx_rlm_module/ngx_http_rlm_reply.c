
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * JSON responses, OpenAI-style error envelopes and the per-request
 * context.
 */


#include "ngx_http_rlm_module.h"


static void ngx_http_rlm_free_text(void *data);


static ngx_uint_t  ngx_http_rlm_handler_depth;


ngx_http_rlm_ctx_t *
ngx_http_rlm_get_ctx(ngx_http_request_t *r)
{
    ngx_http_rlm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    if (ctx == NULL) {
        ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_rlm_ctx_t));
        if (ctx == NULL) {
            return NULL;
        }

        ngx_http_set_ctx(r, ctx, ngx_http_rlm_module);
    }

    return ctx;
}


/*
 * Work that ends in one of our own event handlers (a sandbox answer, a
 * timer) finalizes the request outside nginx's request handler, so the
 * requests this posts (a parent waiting for its subrequest: Lua's
 * ngx.location.capture) must be run here, as the upstream module does.
 * Inside a handler nginx called, nginx runs them itself.
 */

void
ngx_http_rlm_finalize(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_connection_t  *c;

    c = r->connection;

    ngx_http_finalize_request(r, rc);

    if (ngx_http_rlm_handler_depth == 0) {
        ngx_http_run_posted_requests(c);
    }
}


/*
 * Marks code nginx called as a request handler (a content handler, a
 * body post handler); a worker runs one thing at a time, so a counter is
 * enough, and it is never in freed request memory.
 */

void
ngx_http_rlm_enter_handler(void)
{
    ngx_http_rlm_handler_depth++;
}


void
ngx_http_rlm_leave_handler(void)
{
    ngx_http_rlm_handler_depth--;
}


ngx_int_t
ngx_http_rlm_send_json(ngx_http_request_t *r, ngx_uint_t status, u_char *data,
    size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    r->headers_out.status = status;
    r->headers_out.content_length_n = len;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (r->method == NGX_HTTP_HEAD || len == 0) {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = data;
    b->last = data + len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/*
 * A response body of value: compact JSON and a closing newline, in text
 * jansson allocated and the pool frees.  NULL on failure.
 */

u_char *
ngx_http_rlm_json_body(ngx_pool_t *pool, json_t *value, size_t *len)
{
    char                *text;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    text = json_dumps(value, JSON_COMPACT|JSON_REAL_PRECISION(10));
    if (text == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_rlm_free_text;
    cln->data = text;

    *len = ngx_strlen(text);

    /* the closing newline replaces the terminating NUL */
    text[(*len)++] = '\n';

    return (u_char *) text;
}


ngx_int_t
ngx_http_rlm_send_json_value(ngx_http_request_t *r, ngx_uint_t status,
    json_t *value)
{
    u_char  *text;
    size_t   len;

    text = ngx_http_rlm_json_body(r->pool, value, &len);
    if (text == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_rlm_send_json(r, status, text, len);
}


static void
ngx_http_rlm_free_text(void *data)
{
    free(data);
}


ngx_int_t
ngx_http_rlm_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *message)
{
    return ngx_http_rlm_send_error_param(r, status, type, code, NULL,
                                         message);
}


/* {"error":{"message","type","param","code"}} as OpenAI answers */

json_t *
ngx_http_rlm_error_value(const char *type, const char *code,
    const char *param, const char *message)
{
    return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error",
                     "message", message, "type", type, "param", param,
                     "code", code);
}


ngx_int_t
ngx_http_rlm_send_error_param(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *param,
    const char *message)
{
    json_t     *body;
    ngx_int_t   rc;

    body = ngx_http_rlm_error_value(type, code, param, message);
    if (body == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(r, status, body);

    json_decref(body);

    return rc;
}


/* an SSE event ("data: JSON"), a comment (": text"), or [DONE] */

ngx_int_t
ngx_http_rlm_send_sse(ngx_http_request_t *r, json_t *event,
    const char *comment, ngx_uint_t last)
{
    char                *text;
    size_t               len;
    u_char              *p;
    ngx_buf_t           *b;
    ngx_chain_t          out;

    text = NULL;

    if (event) {
        text = json_dumps(event, JSON_COMPACT);
        if (text == NULL) {
            return NGX_ERROR;
        }

        len = ngx_strlen(text);

    } else if (comment) {
        len = ngx_strlen(comment);

    } else {
        len = sizeof("[DONE]") - 1;
    }

    p = ngx_pnalloc(r->pool, len + sizeof("data: \n\n"));
    b = ngx_calloc_buf(r->pool);

    if (p == NULL || b == NULL) {
        free(text);
        return NGX_ERROR;
    }

    b->pos = p;

    if (comment) {
        p = ngx_cpymem(p, ": ", 2);
        p = ngx_cpymem(p, comment, len);

    } else {
        p = ngx_cpymem(p, "data: ", 6);
        p = ngx_cpymem(p, text ? text : "[DONE]", len);
    }

    *p++ = '\n';
    *p++ = '\n';

    b->last = p;
    b->memory = 1;
    b->flush = 1;

    if (last) {
        b->last_buf = (r == r->main) ? 1 : 0;
        b->last_in_chain = 1;
    }

    free(text);

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/*
 * An error answer to a request whose body is not wanted: the body is
 * discarded (read and dropped, so the connection can be kept) first.
 */

ngx_int_t
ngx_http_rlm_refuse(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *param,
    const char *message)
{
    ngx_int_t  rc;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_rlm_send_error_param(r, status, type, code, param,
                                         message);
}


ngx_int_t
ngx_http_rlm_set_header(ngx_http_request_t *r, const char *name,
    const char *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value.data = (u_char *) value;
    h->value.len = ngx_strlen(value);
    h->lowcase_key = NULL;

    return NGX_OK;
}


/* the value of the request's first header called name (any case), or NULL */

ngx_str_t *
ngx_http_rlm_request_header(ngx_http_request_t *r, const char *name)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    len = ngx_strlen(name);
    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i].value;
        }
    }
}


/*
 * The whole request body in one piece of memory, from buffers or file.
 * It may be the request's own buffer: callers may change it in place but
 * not write past its end.
 */

ngx_int_t
ngx_http_rlm_read_body(ngx_http_request_t *r, ngx_str_t *body)
{
    off_t         len;
    u_char       *p;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    body->len = 0;
    body->data = (u_char *) "";

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    /* one buffer in memory (the common case): no copy */

    b = r->request_body->bufs->buf;

    if (r->request_body->bufs->next == NULL && !b->in_file) {
        body->data = b->pos;
        body->len = b->last - b->pos;
        return NGX_OK;
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    p = ngx_pnalloc(r->pool, len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    body->data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                              b->file_pos);
            if (n == NGX_ERROR) {
                return NGX_ERROR;
            }

            p += n;
            continue;
        }

        p = ngx_cpymem(p, b->pos, b->last - b->pos);
    }

    body->len = p - body->data;

    return NGX_OK;
}
