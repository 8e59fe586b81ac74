
/*
 * libFuzzer target: the SSE parser.  The first byte chooses a piece size;
 * the events seen when the input arrives in pieces must equal the events
 * seen when it arrives in one call (a differential check of the code that
 * handles lines and CRLFs split between pieces).
 */


#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_rlm_sse.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


typedef struct {
    unsigned char  *buf;
    size_t          len;
    size_t          size;
    size_t          events;
} trace_t;


static int
record(void *ctx, const unsigned char *data, size_t len)
{
    trace_t  *t = ctx;
    size_t    need;

    /* each event as its length then its bytes */

    need = t->len + sizeof(size_t) + len;

    if (need > t->size) {
        t->size = need * 2;
        t->buf = realloc(t->buf, t->size);
        if (t->buf == NULL) {
            abort();
        }
    }

    memcpy(t->buf + t->len, &len, sizeof(size_t));
    memcpy(t->buf + t->len + sizeof(size_t), data, len);
    t->len = need;
    t->events++;

    return 0;
}


static int
run(const uint8_t *data, size_t size, size_t piece, trace_t *t)
{
    int                 rc;
    size_t              off, n;
    ngx_http_rlm_sse_t  p;

    memset(t, 0, sizeof(trace_t));
    ngx_http_rlm_sse_init(&p, 4096, record, t);

    rc = 0;

    for (off = 0; off < size; off += n) {
        n = (size - off < piece) ? size - off : piece;

        rc = ngx_http_rlm_sse_feed(&p, data + off, n);
        if (rc != NGX_HTTP_RLM_SSE_OK) {
            break;
        }
    }

    if (rc == NGX_HTTP_RLM_SSE_OK) {
        rc = ngx_http_rlm_sse_finish(&p);
    }

    ngx_http_rlm_sse_free(&p);

    return rc;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int      rc1, rc2;
    size_t   piece;
    trace_t  whole, pieces;

    if (size == 0) {
        return 0;
    }

    piece = (data[0] % 16) + 1;
    data++;
    size--;

    rc1 = run(data, size, size ? size : 1, &whole);
    rc2 = run(data, size, piece, &pieces);

    if (rc1 != rc2) {
        abort();
    }

    if (rc1 == NGX_HTTP_RLM_SSE_OK
        && (whole.len != pieces.len
            || (whole.len && memcmp(whole.buf, pieces.buf, whole.len) != 0)))
    {
        abort();
    }

    free(whole.buf);
    free(pieces.buf);

    return 0;
}
