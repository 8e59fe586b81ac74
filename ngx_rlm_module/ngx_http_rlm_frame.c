
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Frames of the sandbox protocol (docs/protocol.md): two big-endian
 * u32 lengths, a JSON object, then an optional binary blob.
 */


#include "ngx_http_rlm_module.h"


enum {
    ngx_http_rlm_frame_hdr = 0,
    ngx_http_rlm_frame_json,
    ngx_http_rlm_frame_blob
};


/*
 * One buffer holds the header and the JSON text; a blob, if any, is
 * chained after it by the caller so bulk data is never copied here.
 */

ngx_chain_t *
ngx_http_rlm_frame_encode(ngx_pool_t *pool, json_t *msg, size_t blob_len)
{
    char         *text;
    size_t        len;
    uint32_t      n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    text = json_dumps(msg, JSON_COMPACT);
    if (text == NULL) {
        return NULL;
    }

    len = ngx_strlen(text);

    if (len > NGX_HTTP_RLM_FRAME_JSON_MAX || blob_len > 0xffffffff) {
        free(text);
        return NULL;
    }

    b = ngx_create_temp_buf(pool, 8 + len);
    if (b == NULL) {
        free(text);
        return NULL;
    }

    n = htonl((uint32_t) len);
    b->last = ngx_cpymem(b->last, &n, 4);
    n = htonl((uint32_t) blob_len);
    b->last = ngx_cpymem(b->last, &n, 4);
    b->last = ngx_cpymem(b->last, text, len);

    free(text);

    cl = ngx_alloc_chain_link(pool);
    if (cl == NULL) {
        return NULL;
    }

    cl->buf = b;
    cl->next = NULL;

    return cl;
}


void
ngx_http_rlm_frame_decoder_reset(ngx_http_rlm_frame_decoder_t *d)
{
    if (d->json) {
        ngx_free(d->json);
    }

    ngx_memzero(d, sizeof(ngx_http_rlm_frame_decoder_t));
}


/*
 * Consumes bytes from *pos up to last.  NGX_OK: a whole frame is in
 * d->json / d->json_len (the caller parses it and resets the decoder);
 * NGX_AGAIN: more bytes are needed; NGX_ERROR: the peer broke framing.
 * A blob sent to us is skipped: the host never expects one.
 */

ngx_int_t
ngx_http_rlm_frame_decode(ngx_http_rlm_frame_decoder_t *d, u_char **pos,
    u_char *last, ngx_log_t *log)
{
    size_t    n;
    uint32_t  v;
    u_char   *p;

    p = *pos;

    for ( ;; ) {

        switch (d->state) {

        case ngx_http_rlm_frame_hdr:
            n = ngx_min((size_t) (last - p), 8 - d->hdr_got);
            ngx_memcpy(d->hdr + d->hdr_got, p, n);
            d->hdr_got += n;
            p += n;

            if (d->hdr_got < 8) {
                *pos = p;
                return NGX_AGAIN;
            }

            ngx_memcpy(&v, d->hdr, 4);
            d->json_len = ntohl(v);
            ngx_memcpy(&v, d->hdr + 4, 4);
            d->blob_len = ntohl(v);

            if (d->json_len < 2 || d->json_len > NGX_HTTP_RLM_FRAME_JSON_MAX)
            {
                ngx_log_error(NGX_LOG_ERR, log, 0,
                              "rlm: peer sent a frame with a JSON length "
                              "of %uz", d->json_len);
                *pos = p;
                return NGX_ERROR;
            }

            d->json = ngx_alloc(d->json_len, log);
            if (d->json == NULL) {
                *pos = p;
                return NGX_ERROR;
            }

            d->json_got = 0;
            d->state = ngx_http_rlm_frame_json;

            /* fall through */

        case ngx_http_rlm_frame_json:
            n = ngx_min((size_t) (last - p), d->json_len - d->json_got);
            ngx_memcpy(d->json + d->json_got, p, n);
            d->json_got += n;
            p += n;

            if (d->json_got < d->json_len) {
                *pos = p;
                return NGX_AGAIN;
            }

            d->state = ngx_http_rlm_frame_blob;
            d->blob_got = 0;

            /* fall through */

        case ngx_http_rlm_frame_blob:
            n = ngx_min((size_t) (last - p), d->blob_len - d->blob_got);
            d->blob_got += n;
            p += n;

            *pos = p;

            if (d->blob_got < d->blob_len) {
                return NGX_AGAIN;
            }

            return NGX_OK;

        default:
            return NGX_ERROR;
        }
    }
}
