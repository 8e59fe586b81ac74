
/*
 * What the typed protocol layer adds per cell, measured alone: a typical
 * result frame of an `x = 1` cell (and one with output and an answer),
 * parsed by jansson as the peer always did, then decoded and turned into
 * the API's answer by ngx_http_rlm_proto.c.  The baseline is the parse
 * alone plus the old answer (the frame's members reused by reference).
 *
 *   make -f t/unit/unit.mk build/bench/proto_decode && \
 *       build/bench/proto_decode [iterations]
 */


#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ngx_http_rlm_proto.h"


struct ngx_pool_s {
    int  unused;
};


void *
ngx_pnalloc(ngx_pool_t *p, size_t size)
{
    (void) p;
    return malloc(size);
}


const char *
ngx_http_rlm_cell_status_name(ngx_http_rlm_cell_status_e st)
{
    static const char  *names[] = {
        "ok", "error", "timeout", "oom", "output_truncated", "crashed",
        "sandbox_lost", "sandbox_error"
    };

    return names[st];
}


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/* the old path: parse, then the API's answer from the frame's members */

static json_t *
old_answer(const char *text, size_t len)
{
    json_t  *msg, *out, *v;

    msg = json_loadb(text, len, 0, NULL);
    out = json_pack("{s:s, s:s, s:I}", "object", "rlm.cell", "session",
                    "00112233445566778899aabbccddeeff", "cell", (json_int_t) 1);

    json_object_set(out, "status", json_object_get(msg, "status"));
    v = json_object_get(msg, "stdout");
    json_object_set(out, "stdout", v);
    v = json_object_get(msg, "stderr");
    json_object_set(out, "stderr", v);
    v = json_object_get(msg, "error");
    json_object_set(out, "error", v);
    v = json_object_get(msg, "duration_ms");
    json_object_set(out, "duration_ms", v);
    v = json_object_get(msg, "answer");
    json_object_set(out, "answer", v);
    v = json_object_get(msg, "state_delta");
    json_object_set(out, "state_delta", v);

    json_decref(msg);
    return out;
}


/* the new path: parse, decode into the typed result, answer from it */

static json_t *
new_answer(const char *text, size_t len)
{
    json_t                     *msg, *out, *res;
    const char                 *why;
    ngx_http_rlm_call_t         call;
    ngx_http_rlm_result_t       r;
    ngx_http_rlm_frame_type_e   type;
    ngx_http_rlm_proto_caps_t   caps = { 1 << 20, 1 << 20, 1 << 20 };

    msg = json_loadb(text, len, 0, NULL);

    if (ngx_http_rlm_proto_decode(msg, &caps, &type, &r, &call, &why)
        != NGX_OK)
    {
        abort();
    }

    out = json_pack("{s:s, s:s, s:I}", "object", "rlm.cell", "session",
                    "00112233445566778899aabbccddeeff", "cell", (json_int_t) 1);
    res = ngx_http_rlm_result_json(&r);
    json_object_update(out, res);
    json_decref(res);

    ngx_http_rlm_result_free(&r);
    json_decref(msg);
    return out;
}


static double
run(json_t *(*f)(const char *, size_t), const char *text, long n)
{
    long     i;
    double   t0;

    t0 = now();

    for (i = 0; i < n; i++) {
        json_decref(f(text, strlen(text)));
    }

    return (now() - t0) / n * 1e9;
}


int
main(int argc, char **argv)
{
    int          k, round;
    long         n;
    double       o, w;
    const char  *frames[] = {
        "{\"type\":\"result\",\"status\":\"ok\",\"stdout\":\"\",\"stderr\":"
        "\"\",\"error\":null,\"duration_ms\":0.021,\"output_truncated\":"
        "false,\"answer\":null,\"state_delta\":{}}",

        "{\"type\":\"result\",\"status\":\"ok\",\"stdout\":\"The context has"
        " 1000000 lines; the needle is on line 734012.\\n\",\"stderr\":\"\","
        "\"error\":null,\"duration_ms\":12.5,\"output_truncated\":false,"
        "\"answer\":{\"content\":\"734012\",\"ready\":true},"
        "\"state_delta\":{\"found\":734012}}"
    };
    const char  *names[] = { "x = 1 cell", "cell with output and answer" };

    n = argc > 1 ? atol(argv[1]) : 200000;

    for (k = 0; k < 2; k++) {
        for (round = 0; round < 3; round++) {
            o = run(old_answer, frames[k], n);
            w = run(new_answer, frames[k], n);
            printf("%-28s round %d: old %.0f ns, new %.0f ns, added %.0f ns"
                   " (%.2fx)\n", names[k], round + 1, o, w, w - o, w / o);
        }
    }

    return 0;
}
