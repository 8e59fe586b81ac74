
/*
 * libFuzzer target for ngx_http_rlm_json_take_string(): whatever the
 * input, results stay inside the buffer, a refused document is left as it
 * was, and when jansson accepts the document the value taken out is
 * exactly the string jansson reads for "context".
 */


#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ngx_http_rlm_jsonstr.h"


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
