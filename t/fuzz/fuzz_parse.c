
/*
 * libFuzzer target: the response parser and the output truncation.
 * Checks that every result lies inside the input and that truncation
 * keeps whole UTF-8 sequences and never grows past len + marker.
 */


#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_rlm_parse.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void
check_slice(const uint8_t *data, size_t size, ngx_http_rlm_slice_t *s)
{
    if (s->len == 0) {
        return;
    }

    if (s->data < data || s->data + s->len > data + size) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                    i, max, keep, cut, n;
    unsigned char            *out;
    ngx_http_rlm_response_t   res;

    ngx_http_rlm_parse_response(data, size, &res);

    for (i = 0; i < res.nblocks; i++) {
        check_slice(data, size, &res.blocks[i]);
    }

    if (res.final != NGX_HTTP_RLM_FINAL_NONE) {
        if (res.nblocks || res.unterminated) {
            abort();
        }

        check_slice(data, size, &res.final_value);
    }

    max = size ? data[0] : 0;

    keep = ngx_http_rlm_truncate_len(data, size, max, &cut);

    if (keep > size || (cut == 0 && keep != size)) {
        abort();
    }

    /* a kept prefix never ends inside a valid sequence */
    if (cut && keep < size && (data[keep] & 0xc0) == 0x80 && keep > 0
        && data[keep - 1] >= 0xc2 && data[keep - 1] <= 0xf4)
    {
        /* allowed only if that lead byte did not start a valid sequence */
        n = ngx_http_rlm_truncate_len(data + keep - 1, size - keep + 1, 1,
                                      &i);
        if (n != 1) {
            abort();
        }
    }

    out = malloc(size + NGX_HTTP_RLM_TRUNC_MARKER_MAX);
    if (out == NULL) {
        return 0;
    }

    n = ngx_http_rlm_truncate(data, size, max, out);

    if (n > size + NGX_HTTP_RLM_TRUNC_MARKER_MAX
        || (keep && memcmp(out, data, keep) != 0))
    {
        abort();
    }

    /* the text without repl blocks: never longer, never a repl fence */

    n = ngx_http_rlm_parse_prose(data, size, out);

    if (n > size) {
        abort();
    }

    ngx_http_rlm_parse_response(out, n, &res);

    if (res.nblocks || res.unterminated) {
        abort();
    }

    free(out);

    return 0;
}
