
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Calls from a running block (the "call" frames of the sandbox channel):
 * llm_query and llm_query_batched become model calls on the sub model,
 * rlm_query and rlm_query_batched child loops while the depth allows
 * (plain model calls at the maximum depth).  Every prompt of a call runs
 * at once under the tree's cap; the reply frame goes back when all have
 * answered.  A block that ends or a loop that stops cancels its calls.
 */


#include "ngx_http_rlm_loop.h"


#define NGX_HTTP_RLM_SUBCALL_MARGIN    5000
#define NGX_HTTP_RLM_QUERY_MAX         4000


typedef struct ngx_http_rlm_subcall_s  ngx_http_rlm_subcall_t;

/* one prompt of a sub-call: a model call or a child loop */
typedef struct {
    ngx_http_rlm_subcall_t     *subcall;
    ngx_uint_t                  index;
    ngx_http_rlm_llm_call_t     call;
    ngx_http_rlm_loop_t        *child;
    ngx_str_t                   prompt;
    ngx_msec_t                  started;
    unsigned                    running:1;
} ngx_http_rlm_subitem_t;


/* a "call" frame from a running block, until it is answered */
struct ngx_http_rlm_subcall_s {
    ngx_queue_t                 link;
    ngx_http_rlm_loop_t        *loop;
    ngx_http_rlm_eval_t        *ev;
    json_t                     *id;
    const char                 *fn;
    ngx_str_t                   model;
    ngx_uint_t                  n;
    ngx_uint_t                  pending;
    ngx_http_rlm_subitem_t     *items;
    json_t                     *results;
    unsigned                    batched:1;
};


static ngx_int_t ngx_http_rlm_subcall_start_item(ngx_http_rlm_subcall_t *sc,
    ngx_http_rlm_subitem_t *it, ngx_uint_t child);
static void ngx_http_rlm_subcall_llm_done(ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_subcall_child_done(ngx_http_rlm_loop_t *child);
static void ngx_http_rlm_subcall_item_done(ngx_http_rlm_subitem_t *it,
    ngx_uint_t ok, ngx_str_t *text, ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_subcall_answer(ngx_http_rlm_subcall_t *sc);
static void ngx_http_rlm_subcall_cancel(ngx_http_rlm_subcall_t *sc);
static ngx_int_t ngx_http_rlm_subcall_refuse(ngx_http_rlm_eval_t *ev,
    json_t *id, const char *message);


/*
 * A "call" frame from a running block.  Model calls go to the sub model
 * under the tree's cap; rlm_query starts child loops while depth allows,
 * and is a plain model call at the maximum depth.
 */

ngx_int_t
ngx_http_rlm_subcall_handler(ngx_http_rlm_eval_t *ev, json_t *call)
{
    size_t                   i;
    json_t                  *id, *args, *prompts, *p, *model;
    ngx_uint_t               n, child;
    const char              *fn;
    ngx_msec_t               left;
    ngx_http_rlm_loop_t     *loop;
    ngx_http_rlm_subcall_t  *sc;

    loop = ev->engine_data;

    id = json_object_get(call, "id");
    fn = json_string_value(json_object_get(call, "fn"));
    args = json_object_get(call, "args");

    if (fn == NULL || !json_is_object(args)) {
        return ngx_http_rlm_subcall_refuse(ev, id, "malformed call");
    }

    if (ngx_strcmp(fn, "tool") == 0) {
        return ngx_http_rlm_subcall_refuse(ev, id, "no tools are "
                                           "configured for this location");
    }

    child = 0;

    /* fn points into the frame, which goes away: keep our own name */

    if (ngx_strcmp(fn, "llm_query") == 0
        || ngx_strcmp(fn, "rlm_query") == 0)
    {
        fn = (fn[0] == 'l') ? "llm_query" : "rlm_query";
        n = 1;
        prompts = NULL;

    } else if (ngx_strcmp(fn, "llm_query_batched") == 0
               || ngx_strcmp(fn, "rlm_query_batched") == 0)
    {
        fn = (fn[0] == 'l') ? "llm_query_batched" : "rlm_query_batched";

        prompts = json_object_get(args, "prompts");
        if (!json_is_array(prompts)) {
            return ngx_http_rlm_subcall_refuse(ev, id,
                                               "prompts must be a list");
        }

        n = json_array_size(prompts);

    } else {
        return ngx_http_rlm_subcall_refuse(ev, id, "unknown function");
    }

    if (ngx_strncmp(fn, "rlm_", 4) == 0 && loop->depth < loop->max_depth) {
        child = 1;

        /* the block's own changes to `state` so far, for the children */
        ngx_http_rlm_loop_merge_state(loop->tree,
                                      json_object_get(args, "state"));
    }

    sc = ngx_pcalloc(loop->pool, sizeof(ngx_http_rlm_subcall_t));
    if (sc == NULL) {
        return NGX_ERROR;
    }

    sc->items = ngx_pcalloc(loop->pool,
                            (n ? n : 1) * sizeof(ngx_http_rlm_subitem_t));
    sc->results = json_array();
    if (sc->items == NULL || sc->results == NULL) {
        json_decref(sc->results);
        return NGX_ERROR;
    }

    sc->loop = loop;
    sc->ev = ev;
    sc->id = id ? json_incref(id) : json_null();
    sc->fn = fn;
    sc->n = n;
    sc->batched = (prompts != NULL);

    model = json_object_get(args, "model");

    if (json_is_string(model) && json_string_length(model)) {
        (void) ngx_http_rlm_loop_str(loop, &sc->model,
                                     json_string_value(model),
                                     json_string_length(model));

    } else {
        sc->model = loop->sub_model;
    }

    ngx_queue_insert_tail(&loop->subcalls, &sc->link);

    for (i = 0; i < n; i++) {
        json_array_append_new(sc->results, json_null());
    }

    /* the sandbox waits on the host: hold the cell's deadline off */

    left = ngx_http_rlm_loop_remaining(loop);
    ngx_http_rlm_eval_extend(ev, (left ? left : 1)
                                 + NGX_HTTP_RLM_SUBCALL_MARGIN);

    if (n == 0) {
        ngx_http_rlm_subcall_answer(sc);
        return NGX_OK;
    }

    sc->pending = n;

    for (i = 0; i < n; i++) {
        p = prompts ? json_array_get(prompts, i)
                    : json_object_get(args, "prompt");

        sc->items[i].subcall = sc;
        sc->items[i].index = i;

        if (json_is_string(p)) {
            (void) ngx_http_rlm_loop_str(loop, &sc->items[i].prompt,
                                         json_string_value(p),
                                         json_string_length(p));

        } else {
            char  *dump = json_dumps(p, JSON_COMPACT|JSON_ENCODE_ANY);

            if (dump) {
                (void) ngx_http_rlm_loop_str(loop, &sc->items[i].prompt,
                                             dump, ngx_strlen(dump));
                free(dump);
            }
        }

        if (ngx_http_rlm_subcall_start_item(sc, &sc->items[i], child)
            != NGX_OK)
        {
            ngx_str_t  err = ngx_string("the call could not be started");

            ngx_http_rlm_subcall_item_done(&sc->items[i], 0, &err, NULL);

            if (sc->pending == 0) {
                /* answered already */
                return NGX_OK;
            }
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_subcall_start_item(ngx_http_rlm_subcall_t *sc,
    ngx_http_rlm_subitem_t *it, ngx_uint_t child)
{
    json_t               *req;
    ngx_int_t             rc;
    ngx_str_t            *pr;
    ngx_http_rlm_loop_t  *loop, *ch;

    loop = sc->loop;
    pr = &it->prompt;
    it->started = ngx_current_msec;

    if (pr->data == NULL) {
        return NGX_ERROR;
    }

    if (child) {
        ch = ngx_pcalloc(loop->pool, sizeof(ngx_http_rlm_loop_t));
        if (ch == NULL) {
            return NGX_ERROR;
        }

        ch->request = loop->request;
        ch->conf = loop->conf;
        ch->tree = loop->tree;
        ch->parent = loop;
        ch->provider = loop->provider;
        ch->root_model = sc->model;
        ch->sub_model = loop->sub_model;
        ch->sampling = loop->sampling ? json_incref(loop->sampling) : NULL;
        ch->depth = loop->depth + 1;
        ch->max_iterations = loop->max_iterations;
        ch->max_depth = loop->max_depth;
        ch->query.data = pr->data;
        ch->query.len = ngx_min(pr->len, NGX_HTTP_RLM_QUERY_MAX);
        ch->context = json_stringn((char *) pr->data, pr->len);
        ch->done = ngx_http_rlm_subcall_child_done;
        ch->progress = loop->progress;
        ch->data = loop->data;
        ch->child_of = it;

        it->child = ch;
        it->running = 1;

        if (ngx_http_rlm_loop_start(ch) != NGX_OK) {
            it->running = 0;
            it->child = NULL;
            ngx_http_rlm_loop_cancel(ch);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    req = json_pack("{s:[{s:s, s:s%}]}", "messages", "role", "user",
                    "content", (char *) pr->data, pr->len);
    if (req == NULL) {
        return NGX_ERROR;
    }

    if (sc->model.len) {
        json_object_set_new(req, "model",
                            json_stringn((char *) sc->model.data,
                                         sc->model.len));
    }

    it->running = 1;

    rc = ngx_http_rlm_loop_start_call(loop, &it->call, req,
                                      ngx_http_rlm_subcall_llm_done, it);
    json_decref(req);

    if (rc != NGX_OK) {
        it->running = 0;
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_subcall_llm_done(ngx_http_rlm_llm_call_t *call)
{
    ngx_str_t                err;
    ngx_connection_t        *c;
    ngx_http_rlm_subitem_t  *it = call->data;

    it->running = 0;
    c = it->subcall->loop->request->connection;

    ngx_http_rlm_enter_handler();

    ngx_http_rlm_loop_count(it->subcall->loop, call);

    if (call->error == NGX_HTTP_RLM_LLM_OK) {
        ngx_http_rlm_subcall_item_done(it, 1, &call->content, call);

    } else {
        err = call->message;
        ngx_http_rlm_subcall_item_done(it, 0, &err, call);
    }

    ngx_http_rlm_leave_handler();

    ngx_http_run_posted_requests(c);
}


static void
ngx_http_rlm_subcall_child_done(ngx_http_rlm_loop_t *child)
{
    ngx_str_t                err;
    ngx_http_rlm_subitem_t  *it = child->child_of;

    it->running = 0;

    if (child->error_status) {
        err.data = child->error_message ? child->error_message
                                        : (u_char *) "the child RLM failed";
        err.len = ngx_strlen(err.data);
        ngx_http_rlm_subcall_item_done(it, 0, &err, NULL);
        return;
    }

    ngx_http_rlm_subcall_item_done(it, 1, &child->answer, NULL);
}


static void
ngx_http_rlm_subcall_item_done(ngx_http_rlm_subitem_t *it, ngx_uint_t ok,
    ngx_str_t *text, ngx_http_rlm_llm_call_t *call)
{
    json_t                  *item, *rec;
    ngx_http_rlm_loop_t     *loop;
    ngx_http_rlm_subcall_t  *sc;

    sc = it->subcall;
    loop = sc->loop;

    if (ok) {
        item = json_pack("{s:b, s:s%}", "ok", 1, "result",
                         (char *) text->data, text->len);

    } else {
        item = json_pack("{s:b, s:s%}", "ok", 0, "error",
                         (char *) text->data, text->len);
    }

    json_array_set_new(sc->results, it->index,
                       item ? item : json_null());

    if (loop->block_calls && sc->ev == loop->cell) {
        rec = json_pack("{s:s, s:s%, s:s%, s:s%, s:I, s:I, s:f}",
                        "fn", sc->fn,
                        "model", sc->model.len ? (char *) sc->model.data
                                               : "",
                        sc->model.len,
                        "prompt", it->prompt.data ? (char *) it->prompt.data
                                                  : "",
                        it->prompt.len,
                        "response", (char *) text->data, text->len,
                        "prompt_tokens",
                        (json_int_t) (call ? call->prompt_tokens : 0),
                        "completion_tokens",
                        (json_int_t) (call ? call->completion_tokens : 0),
                        "execution_time",
                        (double) (ngx_current_msec - it->started) / 1000.0);
        if (rec) {
            json_array_append_new(loop->block_calls, rec);
        }
    }

    if (--sc->pending == 0) {
        ngx_http_rlm_subcall_answer(sc);
    }
}


/* all prompts answered: the reply frame, and the sub-call is over */

static void
ngx_http_rlm_subcall_answer(ngx_http_rlm_subcall_t *sc)
{
    json_t               *reply, *first, *keys, *v;
    const char           *k;
    ngx_http_rlm_loop_t  *loop;

    loop = sc->loop;

    if (sc->batched) {
        reply = json_pack("{s:s, s:O, s:b, s:O}", "op", "reply",
                          "id", sc->id, "ok", 1, "result", sc->results);

    } else {
        first = json_array_get(sc->results, 0);

        if (json_is_true(json_object_get(first, "ok"))) {
            reply = json_pack("{s:s, s:O, s:b, s:O}", "op", "reply",
                              "id", sc->id, "ok", 1,
                              "result", json_object_get(first, "result"));

        } else {
            /* every failed item carries its error message */
            reply = json_pack("{s:s, s:O, s:b, s:O?}", "op", "reply",
                              "id", sc->id, "ok", 0,
                              "error", json_object_get(first, "error"));
        }
    }

    /* children may have changed the shared dict */

    if (reply && ngx_strncmp(sc->fn, "rlm_", 4) == 0) {
        if (json_object_size(loop->tree->state)) {
            json_object_set(reply, "state", loop->tree->state);
        }

        if (json_object_size(loop->tree->deleted)) {
            keys = json_array();

            json_object_foreach(loop->tree->deleted, k, v) {
                json_array_append_new(keys, json_string(k));
            }

            json_object_set_new(reply, "deleted", keys);
        }
    }

    ngx_queue_remove(&sc->link);

    if (reply) {
        (void) ngx_http_rlm_eval_reply(sc->ev, reply);
        json_decref(reply);
    }

    json_decref(sc->results);
    json_decref(sc->id);
    sc->results = NULL;
    sc->id = NULL;
}


static void
ngx_http_rlm_subcall_cancel(ngx_http_rlm_subcall_t *sc)
{
    ngx_uint_t               i;
    ngx_http_rlm_subitem_t  *it;

    ngx_queue_remove(&sc->link);

    for (i = 0; i < sc->n; i++) {
        it = &sc->items[i];

        if (!it->running) {
            continue;
        }

        it->running = 0;

        if (it->child) {
            ngx_http_rlm_loop_cancel(it->child);

        } else {
            ngx_http_rlm_llm_cancel(&it->call);
        }
    }

    json_decref(sc->results);
    json_decref(sc->id);
    sc->results = NULL;
    sc->id = NULL;
}


static ngx_int_t
ngx_http_rlm_subcall_refuse(ngx_http_rlm_eval_t *ev, json_t *id,
    const char *message)
{
    json_t     *reply;
    ngx_int_t   rc;

    reply = json_pack("{s:s, s:O, s:b, s:s}", "op", "reply",
                      "id", id ? id : json_null(), "ok", 0,
                      "error", message);
    if (reply == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_rlm_eval_reply(ev, reply);
    json_decref(reply);

    return (rc == NGX_ERROR) ? NGX_ERROR : NGX_OK;
}


/* the sub-calls of one block (ev), or all of the loop's (NULL) */

void
ngx_http_rlm_subcalls_cancel(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_eval_t *ev)
{
    ngx_queue_t             *q;
    ngx_http_rlm_subcall_t  *sc;

    q = ngx_queue_head(&loop->subcalls);

    while (q != ngx_queue_sentinel(&loop->subcalls)) {
        sc = ngx_queue_data(q, ngx_http_rlm_subcall_t, link);
        q = ngx_queue_next(q);

        if (ev == NULL || sc->ev == ev) {
            ngx_http_rlm_subcall_cancel(sc);
        }
    }
}
