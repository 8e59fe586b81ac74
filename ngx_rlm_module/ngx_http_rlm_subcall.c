
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
#include "ngx_http_rlm_metrics.h"


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
    ngx_http_rlm_cell_t        *cell;
    json_int_t                  id;
    ngx_http_rlm_call_fn_e      fn;
    ngx_str_t                   model;
    ngx_uint_t                  n;
    ngx_uint_t                  pending;
    ngx_http_rlm_subitem_t     *items;
    json_t                     *results;
    json_t                     *records;       /* the block's rlm_calls */
    size_t                      record_base;   /* slot of the 1st prompt */
    json_t                     *context;       /* rlm_query's, or NULL */
    unsigned                    batched:1;
    unsigned                    child:1;
    unsigned                    counted:1;     /* in tree->pending_calls */
};


static ngx_int_t ngx_http_rlm_subcall_start_item(ngx_http_rlm_subcall_t *sc,
    ngx_http_rlm_subitem_t *it, ngx_uint_t child);
static void ngx_http_rlm_subcall_llm_done(ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_subcall_child_done(ngx_http_rlm_loop_t *child);
static void ngx_http_rlm_subcall_item_done(ngx_http_rlm_subitem_t *it,
    ngx_uint_t ok, ngx_str_t *text, ngx_http_rlm_llm_call_t *call,
    ngx_http_rlm_loop_t *child);
static json_t *ngx_http_rlm_subcall_record(ngx_http_rlm_subitem_t *it,
    ngx_uint_t ok, ngx_str_t *text, ngx_http_rlm_llm_call_t *call,
    ngx_http_rlm_loop_t *child);
static void ngx_http_rlm_subcall_answer(ngx_http_rlm_subcall_t *sc);
static void ngx_http_rlm_subcall_cancel(ngx_http_rlm_subcall_t *sc);
static const char *ngx_http_rlm_subcall_police(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_call_t *call, ngx_uint_t child);
static ngx_int_t ngx_http_rlm_subcall_model_allowed(ngx_http_rlm_loop_t *loop,
    ngx_str_t *model);
static void ngx_http_rlm_subcall_uncount(ngx_http_rlm_subcall_t *sc,
    ngx_uint_t n);
static ngx_int_t ngx_http_rlm_subcall_with_context(ngx_http_rlm_loop_t *loop,
    json_t *context, ngx_str_t *prompt);


/*
 * A "call" frame from a running block, decoded.  Model calls go to the
 * sub model under the tree's cap; rlm_query starts child loops while
 * depth allows, and is a plain model call at the maximum depth.  Every
 * call is checked against the tree's caps and the allowed models before
 * anything starts; a refused one is an error the code sees.
 */

ngx_int_t
ngx_http_rlm_subcall_handler(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_call_t *call)
{
    ngx_int_t                rc;
    ngx_uint_t               i, n, child;
    ngx_msec_t               left;
    const char              *why;
    ngx_http_rlm_loop_t     *loop;
    ngx_http_rlm_subcall_t  *sc;

    loop = cell->data;

    if (call->fn == NGX_HTTP_RLM_CALL_TOOL) {
        return ngx_http_rlm_cell_refuse(cell, call, "no tools are "
                                           "configured for this location");
    }

    n = call->nprompts;
    child = ((call->fn == NGX_HTTP_RLM_CALL_RLM
              || call->fn == NGX_HTTP_RLM_CALL_RLM_BATCHED)
             && loop->depth < loop->max_depth);

    why = ngx_http_rlm_subcall_police(loop, call, child);
    if (why) {
        return ngx_http_rlm_cell_refuse(cell, call, why);
    }

    if (child) {
        /* the block's own changes to `state` so far, for the children */
        if (ngx_http_rlm_state_merge(loop, call->state) != NGX_OK) {
            return ngx_http_rlm_cell_refuse(cell, call,
                       "the shared `state` would be larger than the "
                       "server takes (rlm_state_max)");
        }
    }

    sc = ngx_pcalloc(loop->pool, sizeof(ngx_http_rlm_subcall_t));
    if (sc == NULL) {
        ngx_http_rlm_call_free(call);
        return NGX_ERROR;
    }

    sc->items = ngx_pcalloc(loop->pool,
                            (n ? n : 1) * sizeof(ngx_http_rlm_subitem_t));
    sc->results = json_array();
    if (sc->items == NULL || sc->results == NULL) {
        json_decref(sc->results);
        ngx_http_rlm_call_free(call);
        return NGX_ERROR;
    }

    sc->loop = loop;
    sc->cell = cell;
    sc->id = call->id;
    sc->fn = call->fn;
    sc->n = n;
    sc->batched = call->batched;
    sc->child = child;

    if (call->model.len) {
        rc = ngx_http_rlm_loop_str(loop, &sc->model,
                                   (char *) call->model.data,
                                   call->model.len);
        if (rc != NGX_OK) {
            json_decref(sc->results);
            ngx_http_rlm_call_free(call);
            return NGX_ERROR;
        }

    } else {
        sc->model = loop->sub_model;
    }

    ngx_queue_insert_tail(&loop->subcalls, &sc->link);

    for (i = 0; i < n; i++) {
        json_array_append_new(sc->results, json_null());
    }

    /*
     * The trajectory lists the calls in the order the code made them and
     * a batch in the order of its prompts, whatever order the answers
     * come in: a slot per prompt now, filled when it is answered.
     */

    if (loop->block_calls && cell == loop->cell) {
        sc->records = loop->block_calls;
        sc->record_base = json_array_size(sc->records);

        for (i = 0; i < n; i++) {
            json_array_append_new(sc->records, json_null());
        }
    }

    /* the sandbox waits on the host: hold the cell's deadline off */

    left = ngx_http_rlm_loop_remaining(loop);
    ngx_http_rlm_cell_extend(cell, (left ? left : 1)
                                   + NGX_HTTP_RLM_SUBCALL_MARGIN);

    if (n == 0) {
        ngx_http_rlm_call_free(call);
        ngx_http_rlm_subcall_answer(sc);
        return NGX_OK;
    }

    sc->pending = n;

    if (child) {
        loop->tree->children += n;

    } else {
        loop->tree->pending_calls += n;
        sc->counted = 1;
    }

    /* the prompts are copied out: the call frame can go */

    for (i = 0; i < n; i++) {
        sc->items[i].subcall = sc;
        sc->items[i].index = i;

        if (ngx_http_rlm_call_prompt(call, i, loop->pool, &sc->items[i].prompt)
            == NGX_OK)
        {
            (void) ngx_http_rlm_loop_str(loop, &sc->items[i].prompt,
                                         (char *) sc->items[i].prompt.data,
                                         sc->items[i].prompt.len);
        }
    }

    /*
     * rlm_query(prompt, context=...): a child gets the context as its
     * own; at the maximum depth the model call reads it before the
     * prompt.
     */

    if (call->context && child) {
        sc->context = json_incref(call->context);

    } else if (call->context && sc->items[0].prompt.data
               && ngx_http_rlm_subcall_with_context(loop, call->context,
                                                    &sc->items[0].prompt)
                  != NGX_OK)
    {
        sc->items[0].prompt.data = NULL;
    }

    ngx_http_rlm_call_free(call);

    for (i = 0; i < n; i++) {
        if (ngx_http_rlm_subcall_start_item(sc, &sc->items[i], child)
            != NGX_OK)
        {
            ngx_str_t  err = ngx_string("the call could not be started");

            ngx_http_rlm_subcall_item_done(&sc->items[i], 0, &err, NULL,
                                           NULL);

            if (sc->pending == 0) {
                /* answered already */
                return NGX_OK;
            }
        }
    }

    return NGX_OK;
}


/*
 * What a call may not do, whatever the code says: more prompts than a
 * batch takes, more model calls waiting than the tree may have, more
 * children than the tree may start or hold at once, a model this route
 * and tenant may not use.  NULL: the call may go.
 */

static const char *
ngx_http_rlm_subcall_police(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_call_t *call, ngx_uint_t child)
{
    ngx_uint_t                 n, share;
    ngx_http_rlm_tree_t       *tree;
    ngx_http_rlm_loop_conf_t  *conf;
    ngx_http_rlm_main_conf_t  *rmcf;

    tree = loop->tree;
    conf = loop->conf;
    n = call->nprompts;

    if (tree->max_cost > 0 && tree->cost >= tree->max_cost) {
        return "the completion's cost budget (max_cost) is spent";
    }

    if (n > conf->batch_max) {
        return "too many prompts in one batched call (rlm_batch_max); "
               "split the list";
    }

    if (call->model.len
        && ngx_http_rlm_subcall_model_allowed(loop, &call->model) != NGX_OK)
    {
        return "that model is not available to this request; leave model "
               "unset for the default sub model";
    }

    if (!child) {
        if (tree->pending_calls + n > conf->max_pending_calls) {
            return "too many model calls are waiting in this completion "
                   "(rlm_max_pending_calls); wait for some to answer";
        }

        return NULL;
    }

    if (tree->children + n > conf->max_children) {
        return "this completion may start no more child RLMs "
               "(rlm_max_children)";
    }

    /* a completion may hold only its share of the server's sessions */

    rmcf = ngx_http_get_module_main_conf(loop->request, ngx_http_rlm_module);

    share = rmcf->max_sessions * conf->sessions_share / 100;
    if (share == 0) {
        share = 1;
    }

    if (tree->loops + n > share) {
        return "this completion holds its share of the server's sessions "
               "(rlm_completion_sessions_share); run fewer child RLMs at "
               "once";
    }

    if (tree->owner_max
        && ngx_http_rlm_session_count_owner(ngx_http_rlm_zone(),
                                            &tree->owner) + n
           > tree->owner_max)
    {
        return "the tenant's session quota (max_sessions) leaves no room "
               "for these child RLMs";
    }

    return NULL;
}


/*
 * A model named by code: one of the route's allowed models (the
 * rlm_completion_code_models list), or with no list, the root or sub
 * model of the completion.
 */

static ngx_int_t
ngx_http_rlm_subcall_model_allowed(ngx_http_rlm_loop_t *loop,
    ngx_str_t *model)
{
    u_char     *p, *last, *start;
    ngx_str_t  *list;

    list = &loop->tree->code_models;

    if (list->data == NULL) {
        return ((model->len == loop->sub_model.len
                 && ngx_strncmp(model->data, loop->sub_model.data,
                                model->len) == 0)
                || (model->len == loop->root_model.len
                    && ngx_strncmp(model->data, loop->root_model.data,
                                   model->len) == 0))
               ? NGX_OK : NGX_DECLINED;
    }

    p = list->data;
    last = p + list->len;

    while (p < last) {
        while (p < last && (*p == ' ' || *p == ',')) {
            p++;
        }

        start = p;

        while (p < last && *p != ' ' && *p != ',') {
            p++;
        }

        if ((size_t) (p - start) == model->len
            && ngx_strncmp(start, model->data, model->len) == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
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

    ngx_http_rlm_metrics_subcall(&sc->model, child);

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
        /* a child's root calls are sub-calls: rlm.sub_sampling */
        ch->sampling = loop->tree->sub_sampling
                       ? json_incref(loop->tree->sub_sampling)
                       : loop->sampling ? json_incref(loop->sampling)
                                        : NULL;
        ch->depth = loop->depth + 1;
        ch->max_iterations = loop->max_iterations;
        ch->max_depth = loop->max_depth;
        ch->query.data = pr->data;
        ch->query.len = ngx_min(pr->len, NGX_HTTP_RLM_QUERY_MAX);
        ch->context = sc->context ? json_incref(sc->context)
                                  : json_stringn((char *) pr->data, pr->len);
        ch->done = ngx_http_rlm_subcall_child_done;
        ch->progress = loop->progress;
        ch->data = loop->data;
        ch->child_of = it;

        /* a child's lines go into its parent's entry for the call */
        if (loop->trajectory || loop->lines) {
            ch->lines = json_array();
        }

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

    if (loop->tree->sub_sampling) {
        json_object_update(req, loop->tree->sub_sampling);
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
        ngx_http_rlm_subcall_item_done(it, 1, &call->content, call, NULL);

    } else {
        err = call->message;
        ngx_http_rlm_subcall_item_done(it, 0, &err, call, NULL);
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
        ngx_http_rlm_subcall_item_done(it, 0, &err, NULL, child);
        return;
    }

    ngx_http_rlm_subcall_item_done(it, 1, &child->answer, NULL, child);
}


static void
ngx_http_rlm_subcall_item_done(ngx_http_rlm_subitem_t *it, ngx_uint_t ok,
    ngx_str_t *text, ngx_http_rlm_llm_call_t *call, ngx_http_rlm_loop_t *child)
{
    size_t                   slot;
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

    ngx_http_rlm_subcall_uncount(sc, 1);

    if (sc->records && sc->records == loop->block_calls
        && sc->cell == loop->cell)
    {
        rec = ngx_http_rlm_subcall_record(it, ok, text, call, child);
        slot = sc->record_base + it->index;

        if (rec && slot < json_array_size(sc->records)) {
            json_array_set_new(sc->records, slot, rec);

        } else {
            json_decref(rec);
        }
    }

    if (--sc->pending == 0) {
        ngx_http_rlm_subcall_answer(sc);
    }
}


/*
 * The trajectory's entry for one answered prompt.  A failed call has an
 * empty response and its message in "error", as in the reference.  A
 * child RLM brings what it used (itself and its own sub-calls, per
 * model) and its own iterations under "metadata".
 */

static json_t *
ngx_http_rlm_subcall_record(ngx_http_rlm_subitem_t *it, ngx_uint_t ok,
    ngx_str_t *text, ngx_http_rlm_llm_call_t *call, ngx_http_rlm_loop_t *child)
{
    void                    *iter;
    json_t                  *rec, *row, *meta, *run;
    ngx_str_t               *model;
    json_int_t               in, out;
    ngx_http_rlm_subcall_t  *sc;

    sc = it->subcall;
    model = child ? &child->root_model : &sc->model;

    in = call ? (json_int_t) call->prompt_tokens : 0;
    out = call ? (json_int_t) call->completion_tokens : 0;

    if (child && child->models) {
        in = 0;
        out = 0;

        for (iter = json_object_iter(child->models);
             iter;
             iter = json_object_iter_next(child->models, iter))
        {
            row = json_object_iter_value(iter);
            in += json_integer_value(json_object_get(row,
                                                     "total_input_tokens"));
            out += json_integer_value(json_object_get(row,
                                                      "total_output_tokens"));
        }
    }

    rec = json_pack("{s:s, s:s%, s:s%, s:s%, s:I, s:I, s:f}",
                    "fn", ngx_http_rlm_call_fn_name(sc->fn),
                    "model", model->len ? (char *) model->data : "",
                    model->len,
                    "prompt", it->prompt.data ? (char *) it->prompt.data
                                              : "",
                    it->prompt.len,
                    "response", ok ? (char *) text->data : "",
                    ok ? text->len : 0,
                    "prompt_tokens", in,
                    "completion_tokens", out,
                    "execution_time",
                    (double) (ngx_current_msec - it->started) / 1000.0);
    if (rec == NULL) {
        return NULL;
    }

    if (!ok) {
        json_object_set_new(rec, "error",
                            json_stringn((char *) text->data, text->len));
    }

    if (child == NULL) {
        return rec;
    }

    if (child->models) {
        json_object_set_new(rec, "usage_summary",
                            json_pack("{s:O}", "model_usage_summaries",
                                      child->models));
    }

    run = json_pack("{s:s%, s:I, s:I, s:s%, s:{s:s%}, s:s, s:{}, s:n,"
                    " s:s%, s:I}",
                    "root_model", model->len ? (char *) model->data : "",
                    model->len,
                    "max_depth", (json_int_t) child->max_depth,
                    "max_iterations", (json_int_t) child->max_iterations,
                    "backend", (char *) child->provider->name.data,
                    child->provider->name.len,
                    "backend_kwargs", "model_name",
                    model->len ? (char *) model->data : "", model->len,
                    "environment_type", "ngx_rlm",
                    "environment_kwargs",
                    "other_backends",
                    "sub_model",
                    child->sub_model.len ? (char *) child->sub_model.data
                                         : "",
                    child->sub_model.len,
                    "depth", (json_int_t) child->depth);

    meta = json_object();

    if (run == NULL || meta == NULL) {
        json_decref(run);
        json_decref(meta);
        return rec;
    }

    json_object_set_new(meta, "run_metadata", run);
    json_object_set_new(meta, "iterations",
                        child->lines ? json_incref(child->lines)
                                          : json_array());
    json_object_set_new(rec, "metadata", meta);

    return rec;
}


/* all prompts answered: the reply frame, and the sub-call is over */

static void
ngx_http_rlm_subcall_answer(ngx_http_rlm_subcall_t *sc)
{
    json_t               *reply, *first, *keys, *v;
    const char           *err;
    const char           *k;
    ngx_http_rlm_loop_t  *loop;

    loop = sc->loop;

    if (sc->batched) {
        reply = ngx_http_rlm_proto_reply(sc->id, sc->results);

    } else {
        first = json_array_get(sc->results, 0);

        if (json_is_true(json_object_get(first, "ok"))) {
            reply = ngx_http_rlm_proto_reply(sc->id,
                                             json_object_get(first,
                                                             "result"));

        } else {
            /* every failed item carries its error message */
            err = json_string_value(json_object_get(first, "error"));
            reply = ngx_http_rlm_proto_refusal(sc->id,
                                               err ? err : "the call failed");
        }
    }

    /* children may have changed the shared dict */

    if (reply && (sc->fn == NGX_HTTP_RLM_CALL_RLM
                  || sc->fn == NGX_HTTP_RLM_CALL_RLM_BATCHED))
    {
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

    json_decref(sc->context);
    sc->context = NULL;

    if (reply) {
        (void) ngx_http_rlm_cell_reply(sc->cell, reply);
        json_decref(reply);
    }

    json_decref(sc->results);
    sc->results = NULL;
}


static void
ngx_http_rlm_subcall_cancel(ngx_http_rlm_subcall_t *sc)
{
    ngx_uint_t               i;
    ngx_http_rlm_subitem_t  *it;

    ngx_queue_remove(&sc->link);

    ngx_http_rlm_subcall_uncount(sc, sc->pending);

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
    sc->results = NULL;
    json_decref(sc->context);
    sc->context = NULL;
}


/* model calls of sc that are no longer waiting or running */

static void
ngx_http_rlm_subcall_uncount(ngx_http_rlm_subcall_t *sc, ngx_uint_t n)
{
    ngx_http_rlm_tree_t  *tree;

    if (!sc->counted) {
        return;
    }

    tree = sc->loop->tree;
    tree->pending_calls -= ngx_min(n, tree->pending_calls);
}


/* the context's text, a blank line and the prompt, into prompt */

static ngx_int_t
ngx_http_rlm_subcall_with_context(ngx_http_rlm_loop_t *loop, json_t *context,
    ngx_str_t *prompt)
{
    char        *dump;
    u_char      *p;
    size_t       len;
    const char  *text;

    dump = NULL;

    if (json_is_string(context)) {
        text = json_string_value(context);
        len = json_string_length(context);

    } else {
        dump = json_dumps(context, JSON_COMPACT);
        if (dump == NULL) {
            return NGX_ERROR;
        }

        text = dump;
        len = ngx_strlen(dump);
    }

    p = ngx_pnalloc(loop->pool, len + 2 + prompt->len + 1);
    if (p == NULL) {
        free(dump);
        return NGX_ERROR;
    }

    ngx_memcpy(p, text, len);
    p[len] = '\n';
    p[len + 1] = '\n';
    ngx_memcpy(p + len + 2, prompt->data, prompt->len);
    p[len + 2 + prompt->len] = '\0';

    prompt->data = p;
    prompt->len += len + 2;

    free(dump);

    return NGX_OK;
}


/* the sub-calls of one block (cell), or all of the loop's (NULL) */

void
ngx_http_rlm_subcalls_cancel(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_cell_t *cell)
{
    ngx_queue_t             *q;
    ngx_http_rlm_subcall_t  *sc;

    q = ngx_queue_head(&loop->subcalls);

    while (q != ngx_queue_sentinel(&loop->subcalls)) {
        sc = ngx_queue_data(q, ngx_http_rlm_subcall_t, link);
        q = ngx_queue_next(q);

        if (cell == NULL || sc->cell == cell) {
            ngx_http_rlm_subcall_cancel(sc);
        }
    }
}
