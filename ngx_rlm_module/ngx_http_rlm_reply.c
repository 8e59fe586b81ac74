
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * JSON responses and OpenAI-style error envelopes.
 */


#include <jansson.h>

#include "ngx_http_rlm_module.h"


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


ngx_int_t
ngx_http_rlm_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *message)
{
    char    *text;
    size_t   len;
    u_char  *data;
    json_t  *body;

    /* {"error":{"message","type","param","code"}} as OpenAI answers */

    body = json_pack("{s:{s:s, s:s, s:n, s:s?}}", "error",
                     "message", message, "type", type, "param",
                     "code", code);
    if (body == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);

    if (text == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = ngx_strlen(text);

    data = ngx_pnalloc(r->pool, len + 1);
    if (data == NULL) {
        free(text);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(data, text, len);
    data[len++] = '\n';
    free(text);

    return ngx_http_rlm_send_json(r, status, data, len);
}
