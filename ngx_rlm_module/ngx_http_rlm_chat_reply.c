
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The answer to POST /v1/chat/completions: chat.completion with usage and
 * the "rlm" field, or for "stream": true the role chunk, progress
 * comments and keep-alives while the loop works, the answer, the finish
 * chunk, the usage chunk when asked and [DONE]; errors in OpenAI's
 * envelope, or as an error event once a stream has begun.
 */


#include "ngx_http_rlm_chat.h"
#include "ngx_http_rlm_metrics.h"


static ngx_int_t ngx_http_rlm_chat_answer(ngx_http_rlm_chat_t *chat);
static json_t *ngx_http_rlm_chat_extension(ngx_http_rlm_chat_t *chat);
static json_t *ngx_http_rlm_chat_chunk(ngx_http_rlm_chat_t *chat);


/* "system_fingerprint": the server build that answered */
#define NGX_HTTP_RLM_FINGERPRINT  "ngx_rlm-" NGX_HTTP_RLM_VERSION


void
ngx_http_rlm_chat_done(ngx_http_rlm_loop_t *loop)
{
    ngx_int_t             rc;
    json_t               *ev;
    ngx_http_request_t   *r;
    ngx_http_rlm_ctx_t   *ctx;
    ngx_http_rlm_chat_t  *chat = loop->data;

    r = chat->request;

    if (chat->keepalive.timer_set) {
        ngx_del_timer(&chat->keepalive);
    }

    ctx = ngx_http_rlm_get_ctx(r);
    if (ctx) {
        ctx->has_completion = 1;
        ctx->iterations = loop->iterations;
        ctx->tokens = chat->tree.prompt_tokens + chat->tree.completion_tokens;
        ctx->cost = chat->tree.cost;
    }

    ngx_http_rlm_metrics_completion(r, &chat->model,
                                    loop->error_status
                                    ? NGX_HTTP_RLM_OUTCOME_ERROR
                                    : loop->limit
                                    ? NGX_HTTP_RLM_OUTCOME_LENGTH
                                    : NGX_HTTP_RLM_OUTCOME_STOP,
                                    loop->iterations);

    if (loop->error_status == 0) {
        rc = ngx_http_rlm_chat_answer(chat);

    } else if (!chat->header_sent) {
        rc = ngx_http_rlm_chat_headers(chat, 0);

        if (rc == NGX_OK) {
            rc = ngx_http_rlm_send_error(r, loop->error_status,
                                         loop->error_type, loop->error_code,
                                         loop->error_message
                                         ? (char *) loop->error_message
                                         : "the completion failed");
        }

    } else {
        ev = json_pack("{s:{s:s, s:s, s:s, s:n}}", "error",
                       "message", loop->error_message
                                  ? (char *) loop->error_message
                                  : "the completion failed",
                       "type", loop->error_type,
                       "code", loop->error_code, "param");

        rc = ngx_http_rlm_send_sse(chat->request, ev, NULL, 0);
        json_decref(ev);

        if (rc != NGX_ERROR) {
            rc = ngx_http_rlm_send_sse(chat->request, NULL, NULL, 1);
        }
    }

    ngx_http_rlm_finalize(r, rc);
}


static ngx_int_t
ngx_http_rlm_chat_answer(ngx_http_rlm_chat_t *chat)
{
    json_t               *doc, *ev, *choice;
    ngx_int_t             rc;
    ngx_http_request_t   *r;
    ngx_http_rlm_loop_t  *loop;

    r = chat->request;
    loop = &chat->loop;

    if (!chat->stream) {
        doc = json_pack("{s:s%, s:s, s:I, s:s%, s:s, s:[{s:i, s:{s:s, s:s%,"
                        " s:n}, s:n, s:s}], s:o, s:o}",
                        "id", chat->id.data, chat->id.len,
                        "object", "chat.completion",
                        "created", (json_int_t) chat->created,
                        "model", chat->model.data, chat->model.len,
                        "system_fingerprint", NGX_HTTP_RLM_FINGERPRINT,
                        "choices", "index", 0, "message",
                        "role", "assistant",
                        "content", loop->answer.data, loop->answer.len,
                        "refusal", "logprobs",
                        "finish_reason", loop->finish_reason,
                        "usage", ngx_http_rlm_loop_usage(&chat->tree),
                        "rlm", ngx_http_rlm_chat_extension(chat));
        if (doc == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (ngx_http_rlm_chat_headers(chat, 0) != NGX_OK) {
            json_decref(doc);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, doc);
        json_decref(doc);
        return rc;
    }

    /* the answer, the finish reason, usage if asked, [DONE] */

    ev = ngx_http_rlm_chat_chunk(chat);
    if (ev == NULL) {
        return NGX_ERROR;
    }

    choice = json_array_get(json_object_get(ev, "choices"), 0);
    json_object_set_new(json_object_get(choice, "delta"), "content",
                        json_stringn((char *) loop->answer.data,
                                     loop->answer.len));

    rc = ngx_http_rlm_send_sse(chat->request, ev, NULL, 0);
    json_decref(ev);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    ev = ngx_http_rlm_chat_chunk(chat);
    if (ev == NULL) {
        return NGX_ERROR;
    }

    choice = json_array_get(json_object_get(ev, "choices"), 0);
    json_object_set_new(choice, "finish_reason",
                        json_string(loop->finish_reason));
    json_object_set_new(ev, "rlm", ngx_http_rlm_chat_extension(chat));

    rc = ngx_http_rlm_send_sse(chat->request, ev, NULL, 0);
    json_decref(ev);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (chat->include_usage) {
        ev = ngx_http_rlm_chat_chunk(chat);
        if (ev == NULL) {
            return NGX_ERROR;
        }

        json_object_set_new(ev, "choices", json_array());
        json_object_set_new(ev, "usage",
                            ngx_http_rlm_loop_usage(&chat->tree));

        rc = ngx_http_rlm_send_sse(chat->request, ev, NULL, 0);
        json_decref(ev);

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }
    }

    return ngx_http_rlm_send_sse(chat->request, NULL, NULL, 1);
}


/* the "rlm" field: session, turns, the limit hit, usage per model */

static json_t *
ngx_http_rlm_chat_extension(ngx_http_rlm_chat_t *chat)
{
    json_t               *o;
    ngx_http_rlm_loop_t  *loop;

    loop = &chat->loop;

    o = json_pack("{s:s%, s:I, s:I, s:I, s:s?, s:O, s:I}",
                  "session", loop->hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                  "turn", (json_int_t) loop->turn,
                  "iterations", (json_int_t) loop->iterations,
                  "cells", (json_int_t) loop->cells,
                  "limit", loop->limit,
                  "usage_by_model", chat->tree.models,
                  "calls", (json_int_t) chat->tree.calls);

    if (o && loop->limit == NULL) {
        json_object_set_new(o, "limit", json_null());
    }

    if (o && loop->compactions) {
        json_object_set_new(o, "compactions",
                            json_integer(loop->compactions));
    }

    if (o && chat->tree.prices) {
        json_object_set_new(o, "cost", json_real(chat->tree.cost));
    }

    return o ? o : json_null();
}


/*
 * A chunk as OpenAI sends it: logprobs null in the choice and, when the
 * client asked for a usage chunk, "usage": null in every chunk before it.
 */

static json_t *
ngx_http_rlm_chat_chunk(ngx_http_rlm_chat_t *chat)
{
    json_t  *ev;

    ev = json_pack("{s:s%, s:s, s:I, s:s%, s:s, s:[{s:i, s:{}, s:n, s:n}]}",
                   "id", chat->id.data, chat->id.len,
                   "object", "chat.completion.chunk",
                   "created", (json_int_t) chat->created,
                   "model", chat->model.data, chat->model.len,
                   "system_fingerprint", NGX_HTTP_RLM_FINGERPRINT,
                   "choices", "index", 0, "delta", "logprobs",
                   "finish_reason");

    if (ev && chat->include_usage) {
        json_object_set_new(ev, "usage", json_null());
    }

    return ev;
}


/*
 * Response headers: the session id (and cookie when the client used
 * one); for a stream, the status line and the first chunk go out now.
 */

ngx_int_t
ngx_http_rlm_chat_headers(ngx_http_rlm_chat_t *chat, ngx_uint_t stream)
{
    u_char              *cookie;
    json_t              *ev, *choice;
    ngx_int_t            rc;
    ngx_http_request_t  *r;
    ngx_http_rlm_ctx_t  *ctx;

    r = chat->request;
    ctx = ngx_http_rlm_get_ctx(r);

    if (ctx && ctx->has_session) {
        cookie = ngx_pnalloc(r->pool, NGX_HTTP_RLM_ID_HEX + 1);
        if (cookie == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(cookie, ctx->session_id, NGX_HTTP_RLM_ID_HEX);
        cookie[NGX_HTTP_RLM_ID_HEX] = '\0';

        if (ngx_http_rlm_set_header(r, "X-RLM-Session-Id", (char *) cookie)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (chat->from_cookie) {
            cookie = ngx_pnalloc(r->pool, sizeof("rlm_session=; Path=/; "
                                                 "HttpOnly; SameSite=Strict")
                                          + NGX_HTTP_RLM_ID_HEX);
            if (cookie == NULL) {
                return NGX_ERROR;
            }

            ngx_sprintf(cookie, "rlm_session=%*s; Path=/; HttpOnly; "
                        "SameSite=Strict%Z", (size_t) NGX_HTTP_RLM_ID_HEX,
                        ctx->session_id);

            if (ngx_http_rlm_set_header(r, "Set-Cookie", (char *) cookie)
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }
    }

    if (!stream) {
        return NGX_OK;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (ngx_http_rlm_set_header(r, "Cache-Control", "no-cache") != NGX_OK
        || ngx_http_rlm_set_header(r, "X-Accel-Buffering", "no") != NGX_OK)
    {
        return NGX_ERROR;
    }

    chat->header_sent = 1;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK) {
        return NGX_ERROR;
    }

    ev = ngx_http_rlm_chat_chunk(chat);
    if (ev == NULL) {
        return NGX_ERROR;
    }

    choice = json_array_get(json_object_get(ev, "choices"), 0);
    json_object_set_new(json_object_get(choice, "delta"), "role",
                        json_string("assistant"));
    json_object_set_new(json_object_get(choice, "delta"), "content",
                        json_string(""));
    json_object_set_new(json_object_get(choice, "delta"), "refusal",
                        json_null());

    rc = ngx_http_rlm_send_sse(chat->request, ev, NULL, 0);
    json_decref(ev);

    return (rc == NGX_ERROR) ? NGX_ERROR : NGX_OK;
}


/* a progress comment while the loop works: ": rlm iteration 2" */

void
ngx_http_rlm_chat_progress(ngx_http_rlm_loop_t *loop, const char *what)
{
    u_char                line[160];
    ngx_http_rlm_chat_t  *chat = loop->data;

    if (!chat->header_sent) {
        return;
    }

    if (ngx_strcmp(what, "iteration") == 0) {
        ngx_snprintf(line, sizeof(line) - 1, "rlm depth %ui iteration %ui%Z",
                     loop->depth, loop->iterations + 1);

    } else {
        ngx_snprintf(line, sizeof(line) - 1, "rlm depth %ui %s%Z",
                     loop->depth, what);
    }

    (void) ngx_http_rlm_send_sse(chat->request, NULL, (char *) line, 0);

    if (chat->keepalive.timer_set) {
        ngx_add_timer(&chat->keepalive, NGX_HTTP_RLM_CHAT_KEEPALIVE);
    }
}


void
ngx_http_rlm_chat_keepalive(ngx_event_t *e)
{
    ngx_http_rlm_chat_t  *chat = e->data;

    if (ngx_http_rlm_send_sse(chat->request, NULL, "keep-alive", 0)
        == NGX_ERROR)
    {
        return;
    }

    ngx_add_timer(e, NGX_HTTP_RLM_CHAT_KEEPALIVE);
}
