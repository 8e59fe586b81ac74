
/*
 * libFuzzer target: the typed protocol layer (ngx_http_rlm_proto.c), fed
 * frames as a sandbox would send them.  Two bytes pick the caps, the
 * rest is the frame's JSON.  Checks that a decoded result keeps within
 * every cap, only says what a sandbox may say of its cell, and turns
 * back into valid JSON (so a cut never splits a UTF-8 sequence); that a
 * decoded call's prompts can all be read; that a malformed frame says why.
 */


#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_rlm_proto.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


/* the fuzzer's pool: every allocation of one input, freed after it */

struct ngx_pool_s {
    void    *items[4096];
    size_t   n;
};

static struct ngx_pool_s  pool;


void *
ngx_pnalloc(ngx_pool_t *p, size_t size)
{
    void  *m;

    if (p->n == sizeof(p->items) / sizeof(p->items[0])) {
        return NULL;
    }

    m = malloc(size);
    if (m) {
        p->items[p->n++] = m;
    }

    return m;
}


static void
pool_free(ngx_pool_t *p)
{
    while (p->n) {
        free(p->items[--p->n]);
    }
}


const char *
ngx_http_rlm_cell_status_name(ngx_http_rlm_cell_status_e st)
{
    static const char  *names[] = {
        "ok", "error", "timeout", "oom", "output_truncated", "crashed",
        "sandbox_lost", "sandbox_error"
    };

    if ((unsigned) st >= NGX_HTTP_RLM_CELL_NSTATUS) {
        abort();
    }

    return names[st];
}


static void
check_result(ngx_http_rlm_result_t *res, ngx_http_rlm_proto_caps_t *caps)
{
    json_t  *j;

    if (res->status > NGX_HTTP_RLM_CELL_TRUNCATED) {
        /* crashed, lost and sandbox_error are the host's to say */
        abort();
    }

    if (res->out.len + res->err.len > caps->output_max
        || res->ename.len > NGX_HTTP_RLM_PROTO_ENAME_MAX
        || res->evalue.len > NGX_HTTP_RLM_PROTO_EVALUE_MAX
        || res->traceback.len > NGX_HTTP_RLM_PROTO_TRACEBACK_MAX
        || res->name.len > NGX_HTTP_RLM_PROTO_NAME_MAX
        || (res->answer_ready && res->answer.len > caps->answer_max)
        || (res->state_delta && !json_is_object(res->state_delta))
        || !(res->duration_ms >= 0))
    {
        abort();
    }

    if (res->state_delta && json_object_size(res->state_delta)
        && json_dumpb(res->state_delta, NULL, 0, JSON_COMPACT)
           > caps->state_max)
    {
        abort();
    }

    /* every string, cut or not, is still whole UTF-8 */

    j = ngx_http_rlm_result_json(res);
    if (j == NULL) {
        abort();
    }

    json_decref(j);
}


static void
check_call(ngx_http_rlm_call_t *call)
{
    json_t      *j;
    ngx_str_t    text;
    ngx_uint_t   i;

    if (call->fn > NGX_HTTP_RLM_CALL_TOOL
        || call->model.len > NGX_HTTP_RLM_PROTO_MODEL_MAX
        || (call->state && !json_is_object(call->state))
        || ngx_http_rlm_call_fn_name(call->fn) == NULL)
    {
        abort();
    }

    if (call->fn != NGX_HTTP_RLM_CALL_TOOL) {
        if (call->batched
            ? call->nprompts != json_array_size(call->prompts)
            : call->nprompts != 1)
        {
            abort();
        }

        for (i = 0; i < call->nprompts && i < 64; i++) {
            if (ngx_http_rlm_call_prompt(call, i, &pool, &text) != NGX_OK) {
                abort();
            }
        }
    }

    j = ngx_http_rlm_proto_refusal(call->id, "no");
    if (j == NULL) {
        abort();
    }

    json_decref(j);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t                     *msg;
    ngx_int_t                   rc;
    const char                 *why;
    json_error_t                err;
    ngx_http_rlm_call_t         call;
    ngx_http_rlm_result_t       res;
    ngx_http_rlm_frame_type_e   type;
    ngx_http_rlm_proto_caps_t   caps;

    if (size < 2) {
        return 0;
    }

    caps.output_max = data[0] * 4;
    caps.answer_max = data[1] * 2;
    caps.state_max = data[1] * 8 + 2;

    msg = json_loadb((const char *) data + 2, size - 2, 0, &err);
    if (msg == NULL || !json_is_object(msg)) {
        json_decref(msg);
        return 0;
    }

    why = NULL;
    rc = ngx_http_rlm_proto_decode(msg, &caps, &type, &res, &call, &why);

    if (rc != NGX_OK) {
        if (why == NULL) {
            abort();
        }

    } else if (type == NGX_HTTP_RLM_FRAME_RESULT) {
        check_result(&res, &caps);
        ngx_http_rlm_result_free(&res);

    } else {
        check_call(&call);
        ngx_http_rlm_call_free(&call);
    }

    json_decref(msg);
    pool_free(&pool);

    return 0;
}
