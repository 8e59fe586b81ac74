
/*
 * ngx_rlm: incremental parser for server-sent events.
 */


#include <stdlib.h>
#include <string.h>

#include "ngx_http_rlm_sse.h"


static int ngx_http_rlm_sse_append(unsigned char **buf, size_t *len,
    size_t *size, size_t max, const unsigned char *data, size_t n);
static int ngx_http_rlm_sse_line(ngx_http_rlm_sse_t *p);
static int ngx_http_rlm_sse_dispatch(ngx_http_rlm_sse_t *p);


void
ngx_http_rlm_sse_init(ngx_http_rlm_sse_t *p, size_t max,
    ngx_http_rlm_sse_handler_pt handler, void *ctx)
{
    memset(p, 0, sizeof(ngx_http_rlm_sse_t));

    p->max = max;
    p->handler = handler;
    p->ctx = ctx;
}


int
ngx_http_rlm_sse_feed(ngx_http_rlm_sse_t *p, const unsigned char *buf,
    size_t len)
{
    int                   rc;
    const unsigned char  *pos, *end, *eol;

    if (p->stopped) {
        return NGX_HTTP_RLM_SSE_STOP;
    }

    pos = buf;
    end = buf + len;

    while (pos < end) {

        if (p->after_cr) {
            /* the LF of a CRLF that was split between two pieces */
            p->after_cr = 0;

            if (*pos == '\n') {
                pos++;
                continue;
            }
        }

        for (eol = pos; eol < end; eol++) {
            if (*eol == '\n' || *eol == '\r') {
                break;
            }
        }

        if (ngx_http_rlm_sse_append(&p->line, &p->line_len, &p->line_size,
                                    p->max, pos, eol - pos)
            != 0)
        {
            return NGX_HTTP_RLM_SSE_ERROR;
        }

        if (eol == end) {
            break;
        }

        p->after_cr = (*eol == '\r');
        pos = eol + 1;

        rc = ngx_http_rlm_sse_line(p);
        if (rc != NGX_HTTP_RLM_SSE_OK) {
            return rc;
        }
    }

    return NGX_HTTP_RLM_SSE_OK;
}


/*
 * At the end of the stream.  The standard drops an event that no blank
 * line terminated; some servers close right after their last data line,
 * so a pending line and event are delivered instead.
 */

int
ngx_http_rlm_sse_finish(ngx_http_rlm_sse_t *p)
{
    int  rc;

    if (p->stopped) {
        return NGX_HTTP_RLM_SSE_STOP;
    }

    if (p->line_len) {
        rc = ngx_http_rlm_sse_line(p);
        if (rc != NGX_HTTP_RLM_SSE_OK) {
            return rc;
        }
    }

    return ngx_http_rlm_sse_dispatch(p);
}


void
ngx_http_rlm_sse_free(ngx_http_rlm_sse_t *p)
{
    free(p->line);
    free(p->data);

    p->line = NULL;
    p->data = NULL;
    p->line_len = p->line_size = 0;
    p->data_len = p->data_size = 0;
}


static int
ngx_http_rlm_sse_line(ngx_http_rlm_sse_t *p)
{
    size_t          n, field_len;
    unsigned char  *value;

    n = p->line_len;
    p->line_len = 0;

    if (n == 0) {
        return ngx_http_rlm_sse_dispatch(p);
    }

    if (p->line[0] == ':') {
        return NGX_HTTP_RLM_SSE_OK;                /* a comment */
    }

    value = memchr(p->line, ':', n);
    field_len = value ? (size_t) (value - p->line) : n;

    if (field_len != 4 || memcmp(p->line, "data", 4) != 0) {
        return NGX_HTTP_RLM_SSE_OK;                /* event, id, retry ... */
    }

    if (value == NULL) {
        value = p->line + n;                       /* "data" alone */

    } else {
        value++;

        if (value < p->line + n && *value == ' ') {
            value++;
        }
    }

    if (p->has_data) {
        if (ngx_http_rlm_sse_append(&p->data, &p->data_len, &p->data_size,
                                    p->max, (const unsigned char *) "\n", 1)
            != 0)
        {
            return NGX_HTTP_RLM_SSE_ERROR;
        }
    }

    p->has_data = 1;

    if (ngx_http_rlm_sse_append(&p->data, &p->data_len, &p->data_size,
                                p->max, value, p->line + n - value)
        != 0)
    {
        return NGX_HTTP_RLM_SSE_ERROR;
    }

    return NGX_HTTP_RLM_SSE_OK;
}


static int
ngx_http_rlm_sse_dispatch(ngx_http_rlm_sse_t *p)
{
    size_t  n;

    if (!p->has_data) {
        return NGX_HTTP_RLM_SSE_OK;
    }

    n = p->data_len;
    p->data_len = 0;
    p->has_data = 0;

    if (p->handler(p->ctx, p->data ? p->data : (unsigned char *) "", n)
        != 0)
    {
        p->stopped = 1;
        return NGX_HTTP_RLM_SSE_STOP;
    }

    return NGX_HTTP_RLM_SSE_OK;
}


static int
ngx_http_rlm_sse_append(unsigned char **buf, size_t *len, size_t *size,
    size_t max, const unsigned char *data, size_t n)
{
    size_t          want;
    unsigned char  *nbuf;

    if (n == 0) {
        return 0;
    }

    if (n > max || *len > max - n) {
        return -1;
    }

    if (*len + n > *size) {
        want = *size ? *size * 2 : 256;

        while (want < *len + n) {
            want *= 2;
        }

        if (want > max) {
            want = max;
        }

        nbuf = realloc(*buf, want);
        if (nbuf == NULL) {
            return -1;
        }

        *buf = nbuf;
        *size = want;
    }

    memcpy(*buf + *len, data, n);
    *len += n;

    return 0;
}
