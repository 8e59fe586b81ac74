
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The typed protocol layer: a sandbox's "result" and "call" frames
 * (docs/protocol.md) decoded into ngx_http_rlm_result_t and
 * ngx_http_rlm_call_t.  A field of the wrong type, an unknown status or
 * function, a call without an integer id: the frame is malformed, and the
 * cell ends as sandbox_error.  Output over the host's caps is cut, an
 * answer or a state change over its cap becomes the cell's error, so the
 * code learns of it and nothing larger than a cap goes further.
 */


#include "ngx_http_rlm_proto.h"


typedef struct {
    const char                 *name;
    ngx_http_rlm_cell_status_e  status;
} ngx_http_rlm_proto_status_t;


/* what a sandbox may say of its own cell; crashed and lost are ours */
static ngx_http_rlm_proto_status_t  ngx_http_rlm_proto_statuses[] = {
    { "ok", NGX_HTTP_RLM_CELL_OK },
    { "error", NGX_HTTP_RLM_CELL_ERROR },
    { "timeout", NGX_HTTP_RLM_CELL_TIMEOUT },
    { "oom", NGX_HTTP_RLM_CELL_OOM },
    { "output_truncated", NGX_HTTP_RLM_CELL_TRUNCATED },
    { NULL, 0 }
};


static const char  *ngx_http_rlm_call_fns[] = {
    "llm_query",
    "llm_query_batched",
    "rlm_query",
    "rlm_query_batched",
    "tool",
    NULL
};


static ngx_int_t ngx_http_rlm_proto_result(json_t *msg,
    ngx_http_rlm_proto_caps_t *caps, ngx_http_rlm_result_t *res,
    const char **why);
static ngx_int_t ngx_http_rlm_proto_call(json_t *msg,
    ngx_http_rlm_call_t *call, const char **why);
static ngx_int_t ngx_http_rlm_proto_string(json_t *obj, const char *key,
    size_t max, ngx_str_t *dst);
static ngx_int_t ngx_http_rlm_proto_error(json_t *v,
    ngx_http_rlm_result_t *res);
static ngx_int_t ngx_http_rlm_proto_answer(json_t *v,
    ngx_http_rlm_proto_caps_t *caps, ngx_http_rlm_result_t *res);
static ngx_int_t ngx_http_rlm_proto_state(json_t *v,
    ngx_http_rlm_proto_caps_t *caps, ngx_http_rlm_result_t *res);
static ngx_int_t ngx_http_rlm_proto_prompt_ok(json_t *v);
static void ngx_http_rlm_proto_cut(ngx_str_t *s, size_t max);
static void ngx_http_rlm_proto_fail(ngx_http_rlm_result_t *res,
    const char *ename, const char *evalue);


ngx_int_t
ngx_http_rlm_proto_decode(json_t *msg, ngx_http_rlm_proto_caps_t *caps,
    ngx_http_rlm_frame_type_e *type, ngx_http_rlm_result_t *res,
    ngx_http_rlm_call_t *call, const char **why)
{
    const char  *t;

    t = json_string_value(json_object_get(msg, "type"));

    if (t == NULL) {
        *why = "a frame without a \"type\"";
        return NGX_ERROR;
    }

    if (ngx_strcmp(t, "result") == 0) {
        *type = NGX_HTTP_RLM_FRAME_RESULT;
        return ngx_http_rlm_proto_result(msg, caps, res, why);
    }

    if (ngx_strcmp(t, "call") == 0) {
        *type = NGX_HTTP_RLM_FRAME_CALL;
        return ngx_http_rlm_proto_call(msg, call, why);
    }

    *why = "a frame of an unknown type";
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_rlm_proto_result(json_t *msg, ngx_http_rlm_proto_caps_t *caps,
    ngx_http_rlm_result_t *res, const char **why)
{
    size_t                        total;
    json_t                       *v;
    const char                   *s;
    ngx_http_rlm_proto_status_t  *st;

    ngx_memzero(res, sizeof(ngx_http_rlm_result_t));

    s = json_string_value(json_object_get(msg, "status"));
    if (s == NULL) {
        *why = "a result without a status";
        return NGX_ERROR;
    }

    for (st = ngx_http_rlm_proto_statuses; st->name; st++) {
        if (ngx_strcmp(s, st->name) == 0) {
            break;
        }
    }

    if (st->name == NULL) {
        *why = "a result with an unknown status";
        return NGX_ERROR;
    }

    res->status = st->status;

    if (ngx_http_rlm_proto_string(msg, "stdout", 0, &res->out) != NGX_OK
        || ngx_http_rlm_proto_string(msg, "stderr", 0, &res->err) != NGX_OK)
    {
        *why = "a result whose stdout or stderr is not a string";
        return NGX_ERROR;
    }

    v = json_object_get(msg, "duration_ms");
    if (v) {
        if (!json_is_number(v) || !(json_number_value(v) >= 0)
            || json_number_value(v) > 1e12)
        {
            *why = "a result with a bad duration_ms";
            return NGX_ERROR;
        }

        res->duration_ms = json_number_value(v);
    }

    v = json_object_get(msg, "output_truncated");
    if (v && !json_is_boolean(v)) {
        *why = "a result whose output_truncated is not a boolean";
        return NGX_ERROR;
    }

    res->output_truncated = json_is_true(v);

    if (ngx_http_rlm_proto_error(json_object_get(msg, "error"), res)
        != NGX_OK)
    {
        *why = "a result with a malformed error";
        return NGX_ERROR;
    }

    if (ngx_http_rlm_proto_string(msg, "name", NGX_HTTP_RLM_PROTO_NAME_MAX,
                                  &res->name)
        != NGX_OK
        || ngx_http_rlm_proto_string(msg, "kind", NGX_HTTP_RLM_PROTO_NAME_MAX,
                                     &res->kind)
           != NGX_OK)
    {
        *why = "a result with a malformed name or kind";
        return NGX_ERROR;
    }

    v = json_object_get(msg, "value");
    if (v) {
        if (!json_is_string(v)) {
            *why = "a result whose value is not a string";
            return NGX_ERROR;
        }

        res->value.data = (u_char *) json_string_value(v);
        res->value.len = json_string_length(v);
        res->has_value = 1;
    }

    if (ngx_http_rlm_proto_answer(json_object_get(msg, "answer"), caps, res)
        != NGX_OK)
    {
        *why = "a result with a malformed answer";
        return NGX_ERROR;
    }

    if (ngx_http_rlm_proto_state(json_object_get(msg, "state_delta"), caps,
                                 res)
        != NGX_OK)
    {
        *why = "a result with a malformed state_delta";
        return NGX_ERROR;
    }

    /* what the host keeps of the output: stdout first, then stderr */

    total = res->out.len + res->err.len;

    if (total > caps->output_max) {
        ngx_http_rlm_proto_cut(&res->out, caps->output_max);
        ngx_http_rlm_proto_cut(&res->err, caps->output_max - res->out.len);

        res->output_truncated = 1;

        if (res->status == NGX_HTTP_RLM_CELL_OK) {
            res->status = NGX_HTTP_RLM_CELL_TRUNCATED;
        }
    }

    res->frame = json_incref(msg);

    return NGX_OK;
}


/* a string field, absent or null as empty; 0 < max: cut to max bytes */

static ngx_int_t
ngx_http_rlm_proto_string(json_t *obj, const char *key, size_t max,
    ngx_str_t *dst)
{
    json_t  *v;

    v = json_object_get(obj, key);

    if (v == NULL || json_is_null(v)) {
        ngx_str_null(dst);
        return NGX_OK;
    }

    if (!json_is_string(v)) {
        return NGX_ERROR;
    }

    dst->data = (u_char *) json_string_value(v);
    dst->len = json_string_length(v);

    if (max) {
        ngx_http_rlm_proto_cut(dst, max);
    }

    return NGX_OK;
}


/* null, or {"ename", "evalue", "traceback"}: strings, each capped */

static ngx_int_t
ngx_http_rlm_proto_error(json_t *v, ngx_http_rlm_result_t *res)
{
    if (v == NULL || json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)
        || ngx_http_rlm_proto_string(v, "ename",
                                     NGX_HTTP_RLM_PROTO_ENAME_MAX,
                                     &res->ename)
           != NGX_OK
        || ngx_http_rlm_proto_string(v, "evalue",
                                     NGX_HTTP_RLM_PROTO_EVALUE_MAX,
                                     &res->evalue)
           != NGX_OK
        || ngx_http_rlm_proto_string(v, "traceback",
                                     NGX_HTTP_RLM_PROTO_TRACEBACK_MAX,
                                     &res->traceback)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    res->has_error = 1;

    return NGX_OK;
}


/* null, or {"content": str|null, "ready": bool} */

static ngx_int_t
ngx_http_rlm_proto_answer(json_t *v, ngx_http_rlm_proto_caps_t *caps,
    ngx_http_rlm_result_t *res)
{
    json_t  *ready, *content;

    if (v == NULL || json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return NGX_ERROR;
    }

    ready = json_object_get(v, "ready");
    content = json_object_get(v, "content");

    if ((ready && !json_is_boolean(ready))
        || (content && !json_is_null(content) && !json_is_string(content)))
    {
        return NGX_ERROR;
    }

    if (!json_is_true(ready)) {
        return NGX_OK;
    }

    if (json_is_string(content)
        && json_string_length(content) > caps->answer_max)
    {
        ngx_http_rlm_proto_fail(res, "AnswerTooLarge",
                                "the answer is larger than the server "
                                "takes (rlm_answer_max); answer with less "
                                "text");
        return NGX_OK;
    }

    res->answer_ready = 1;

    if (json_is_string(content)) {
        res->answer.data = (u_char *) json_string_value(content);
        res->answer.len = json_string_length(content);

    } else {
        res->answer_null = 1;
    }

    return NGX_OK;
}


/* an object; "__deleted__", if there, a list of strings; capped in size */

static ngx_int_t
ngx_http_rlm_proto_state(json_t *v, ngx_http_rlm_proto_caps_t *caps,
    ngx_http_rlm_result_t *res)
{
    size_t   i;
    json_t  *gone, *k;

    if (v == NULL || json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return NGX_ERROR;
    }

    if (json_object_size(v) == 0) {
        res->state_delta = v;
        return NGX_OK;
    }

    gone = json_object_get(v, "__deleted__");

    if (gone) {
        if (!json_is_array(gone)) {
            return NGX_ERROR;
        }

        json_array_foreach(gone, i, k) {
            if (!json_is_string(k)) {
                return NGX_ERROR;
            }
        }
    }

    if (json_dumpb(v, NULL, 0, JSON_COMPACT) > caps->state_max) {
        ngx_http_rlm_proto_fail(res, "StateTooLarge",
                                "the changes to `state` are larger than the "
                                "server takes (rlm_state_max); keep large "
                                "values in variables");
        return NGX_OK;
    }

    res->state_delta = v;

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_proto_call(json_t *msg, ngx_http_rlm_call_t *call,
    const char **why)
{
    size_t       i;
    json_t      *id, *args, *v, *p;
    const char  *fn;
    ngx_uint_t   k;

    ngx_memzero(call, sizeof(ngx_http_rlm_call_t));

    id = json_object_get(msg, "id");
    fn = json_string_value(json_object_get(msg, "fn"));
    args = json_object_get(msg, "args");

    if (!json_is_integer(id) || fn == NULL || !json_is_object(args)) {
        *why = "a call without an integer id, a function or arguments";
        return NGX_ERROR;
    }

    call->id = json_integer_value(id);

    for (k = 0; ngx_http_rlm_call_fns[k]; k++) {
        if (ngx_strcmp(fn, ngx_http_rlm_call_fns[k]) == 0) {
            break;
        }
    }

    if (ngx_http_rlm_call_fns[k] == NULL) {
        *why = "a call of an unknown function";
        return NGX_ERROR;
    }

    call->fn = k;

    if (ngx_http_rlm_proto_string(args, "model", 0, &call->model) != NGX_OK
        || call->model.len > NGX_HTTP_RLM_PROTO_MODEL_MAX)
    {
        *why = "a call whose model is not a short string";
        return NGX_ERROR;
    }

    switch (call->fn) {

    case NGX_HTTP_RLM_CALL_TOOL:
        if (ngx_http_rlm_proto_string(args, "name",
                                      NGX_HTTP_RLM_PROTO_NAME_MAX, &call->tool)
            != NGX_OK)
        {
            *why = "a tool call whose name is not a string";
            return NGX_ERROR;
        }

        break;

    case NGX_HTTP_RLM_CALL_LLM_BATCHED:
    case NGX_HTTP_RLM_CALL_RLM_BATCHED:
        v = json_object_get(args, "prompts");

        if (!json_is_array(v)) {
            *why = "a batched call whose prompts are not a list";
            return NGX_ERROR;
        }

        json_array_foreach(v, i, p) {
            if (ngx_http_rlm_proto_prompt_ok(p) != NGX_OK) {
                *why = "a batched call with a prompt that is not a string, "
                       "list or dict";
                return NGX_ERROR;
            }
        }

        call->prompts = v;
        call->nprompts = json_array_size(v);
        call->batched = 1;
        break;

    default:
        v = json_object_get(args, "prompt");

        if (v == NULL || ngx_http_rlm_proto_prompt_ok(v) != NGX_OK) {
            *why = "a call whose prompt is not a string, list or dict";
            return NGX_ERROR;
        }

        call->prompts = v;
        call->nprompts = 1;
        break;
    }

    if (call->fn == NGX_HTTP_RLM_CALL_RLM
        || call->fn == NGX_HTTP_RLM_CALL_RLM_BATCHED)
    {
        v = json_object_get(args, "state");

        if (v && !json_is_null(v)) {
            if (!json_is_object(v)) {
                *why = "a call whose state is not a dict";
                return NGX_ERROR;
            }

            call->state = v;
        }
    }

    if (call->fn == NGX_HTTP_RLM_CALL_RLM) {
        /* rlm_query(prompt, context=...): the child's own context */

        v = json_object_get(args, "context");

        if (v && !json_is_null(v)) {
            if (ngx_http_rlm_proto_prompt_ok(v) != NGX_OK) {
                *why = "a call whose context is not a string, list or "
                       "dict";
                return NGX_ERROR;
            }

            call->context = v;
        }
    }

    call->frame = json_incref(msg);

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_proto_prompt_ok(json_t *v)
{
    return (json_is_string(v) || json_is_array(v) || json_is_object(v))
           ? NGX_OK : NGX_ERROR;
}


ngx_int_t
ngx_http_rlm_call_prompt(ngx_http_rlm_call_t *call, ngx_uint_t i,
    ngx_pool_t *pool, ngx_str_t *text)
{
    size_t   len;
    json_t  *p;

    p = call->batched ? json_array_get(call->prompts, i) : call->prompts;

    if (p == NULL) {
        return NGX_ERROR;
    }

    if (json_is_string(p)) {
        text->data = (u_char *) json_string_value(p);
        text->len = json_string_length(p);
        return NGX_OK;
    }

    len = json_dumpb(p, NULL, 0, JSON_COMPACT);

    text->data = ngx_pnalloc(pool, len ? len : 1);
    if (text->data == NULL) {
        return NGX_ERROR;
    }

    text->len = json_dumpb(p, (char *) text->data, len, JSON_COMPACT);

    return (text->len == len) ? NGX_OK : NGX_ERROR;
}


void
ngx_http_rlm_result_free(ngx_http_rlm_result_t *res)
{
    if (res->frame) {
        json_decref(res->frame);
    }

    ngx_memzero(res, sizeof(ngx_http_rlm_result_t));
}


void
ngx_http_rlm_call_free(ngx_http_rlm_call_t *call)
{
    if (call->frame) {
        json_decref(call->frame);
    }

    ngx_memzero(call, sizeof(ngx_http_rlm_call_t));
}


void
ngx_http_rlm_result_set(ngx_http_rlm_result_t *res,
    ngx_http_rlm_cell_status_e status, const char *ename, u_char *evalue,
    size_t len)
{
    ngx_http_rlm_result_free(res);

    res->status = status;
    res->has_error = 1;
    res->ename.data = (u_char *) ename;
    res->ename.len = ngx_strlen(ename);
    res->evalue.data = evalue;
    res->evalue.len = len;
}


/* the result is the cell's error now; output and effects are kept */

static void
ngx_http_rlm_proto_fail(ngx_http_rlm_result_t *res, const char *ename,
    const char *evalue)
{
    res->status = NGX_HTTP_RLM_CELL_ERROR;
    res->has_error = 1;
    res->ename.data = (u_char *) ename;
    res->ename.len = ngx_strlen(ename);
    res->evalue.data = (u_char *) evalue;
    res->evalue.len = ngx_strlen(evalue);
    ngx_str_null(&res->traceback);
    res->answer_ready = 0;
}


/* cuts s to at most max bytes, on the start of a UTF-8 character */

static void
ngx_http_rlm_proto_cut(ngx_str_t *s, size_t max)
{
    size_t  n;

    if (s->len <= max) {
        return;
    }

    n = max;

    while (n > 0 && (s->data[n] & 0xc0) == 0x80) {
        n--;
    }

    s->len = n;
}


json_t *
ngx_http_rlm_result_json(ngx_http_rlm_result_t *res)
{
    json_t  *out, *v;

    out = json_object();
    if (out == NULL) {
        return NULL;
    }

    if (res->has_error) {
        v = json_pack("{s:s%, s:s%, s:s%}",
                      "ename", res->ename.data ? (char *) res->ename.data
                                               : "",
                      res->ename.len,
                      "evalue", res->evalue.data ? (char *) res->evalue.data
                                                 : "",
                      res->evalue.len,
                      "traceback", res->traceback.data
                                   ? (char *) res->traceback.data : "",
                      res->traceback.len);

    } else {
        v = json_null();
    }

    if (json_object_set_new(out, "status", json_string(
            ngx_http_rlm_cell_status_name(res->status))) != 0
        || json_object_set_new(out, "stdout", json_stringn(
               res->out.data ? (char *) res->out.data : "", res->out.len))
           != 0
        || json_object_set_new(out, "stderr", json_stringn(
               res->err.data ? (char *) res->err.data : "", res->err.len))
           != 0
        || json_object_set_new(out, "error", v) != 0
        || json_object_set_new(out, "duration_ms",
                               json_real(res->duration_ms)) != 0)
    {
        json_decref(out);
        return NULL;
    }

    if (res->answer_ready) {
        v = json_pack("{s:o, s:b}", "content",
                      res->answer_null
                      ? json_null()
                      : json_stringn((char *) res->answer.data,
                                     res->answer.len),
                      "ready", 1);

    } else {
        v = json_null();
    }

    if (json_object_set_new(out, "answer", v) != 0) {
        json_decref(out);
        return NULL;
    }

    if (res->state_delta
        && json_object_set(out, "state_delta", res->state_delta) != 0)
    {
        json_decref(out);
        return NULL;
    }

    return out;
}


json_t *
ngx_http_rlm_proto_reply(json_int_t id, json_t *result)
{
    return json_pack("{s:s, s:I, s:b, s:O}", "op", "reply", "id", id,
                     "ok", 1, "result", result);
}


json_t *
ngx_http_rlm_proto_refusal(json_int_t id, const char *message)
{
    return json_pack("{s:s, s:I, s:b, s:s}", "op", "reply", "id", id,
                     "ok", 0, "error", message);
}


const char *
ngx_http_rlm_call_fn_name(ngx_http_rlm_call_fn_e fn)
{
    return ngx_http_rlm_call_fns[fn];
}
