
/*
 * libFuzzer target for ngx_http_rlm_json_take_string() and
 * _take_container(): whatever the input, results stay inside the buffer,
 * a refused document is left as it was, and when jansson accepts the
 * document the value taken out is exactly what jansson reads for
 * "context" (the decoded string; the container's text, item count and
 * the sizes of the first array items).
 */


#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ngx_http_rlm_jsonstr.h"


static void
fuzz_container(const uint8_t *data, size_t size, unsigned char *buf)
{
    size_t                      i, n, cut, cut_len, want;
    json_t                     *doc, *ctx, *part, *item;
    json_error_t                err;
    ngx_http_rlm_json_shape_t   sh;

    memcpy(buf, data, size);

    if (ngx_http_rlm_json_take_container(buf, size, "context", &sh, &cut,
                                         &cut_len)
        != 0)
    {
        if (size && memcmp(buf, data, size) != 0) {
            abort();
        }

        return;
    }

    if (cut + cut_len > size || memcmp(buf, data, size) != 0
        || sh.measured > NGX_HTTP_RLM_JSON_MEASURED)
    {
        abort();
    }

    doc = json_loadb((const char *) data, size,
                     JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (doc == NULL) {
        return;
    }

    ctx = json_object_get(doc, "context");
    part = json_loadb((const char *) data + cut, cut_len,
                      JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);

    if (part == NULL || !json_equal(part, ctx)) {
        abort();
    }

    n = json_is_array(ctx) ? json_array_size(ctx) : json_object_size(ctx);

    if (sh.items != n || sh.object != json_is_object(ctx)) {
        abort();
    }

    for (i = 0; json_is_array(ctx) && i < sh.measured; i++) {
        item = json_array_get(ctx, i);

        if (json_is_array(item)) {
            want = json_array_size(item);

        } else if (json_is_object(item)) {
            want = json_object_size(item);

        } else if (json_is_string(item)) {
            /* code points: UTF-8 lead bytes of the decoded string */
            const unsigned char  *c = (const unsigned char *)
                                      json_string_value(item);
            size_t                j;

            want = 0;

            for (j = 0; j < json_string_length(item); j++) {
                want += ((c[j] & 0xc0) != 0x80);
            }

        } else {
            want = 1;
        }

        if (sh.lengths[i] != want) {
            abort();
        }
    }

    json_decref(part);
    json_decref(doc);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int             rc;
    size_t          vlen, cut, cut_len;
    json_t         *doc, *ctx;
    json_error_t    err;
    unsigned char  *buf, *v;

    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        return 0;
    }

    fuzz_container(data, size, buf);

    memcpy(buf, data, size);

    rc = ngx_http_rlm_json_take_string(buf, size, "context", &v, &vlen,
                                       &cut, &cut_len);

    if (rc != 0) {
        if (size && memcmp(buf, data, size) != 0) {
            abort();
        }

        free(buf);
        return 0;
    }

    if (cut + cut_len > size || cut_len < 2 || vlen > cut_len - 2
        || v != buf + cut + 1)
    {
        abort();
    }

    doc = json_loadb((const char *) data, size,
                     JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);

    if (doc != NULL) {
        ctx = json_object_get(doc, "context");

        if (!json_is_string(ctx) || json_string_length(ctx) != vlen
            || memcmp(json_string_value(ctx), v, vlen) != 0)
        {
            abort();
        }

        json_decref(doc);
    }

    free(buf);

    return 0;
}
