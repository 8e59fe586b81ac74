
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The per-completion state machine (see ngx_http_rlm_loop.h).  Every
 * step that waits (the session's sandbox, a root call, a block, a
 * variable read) ends in a callback; callbacks of sandbox work only post
 * the loop's step event, so the machine never runs inside the eval code
 * that called it.  Everything a loop holds is given back by a cleanup of
 * the request's pool, however the request ends.
 */


#include "ngx_http_rlm_loop.h"
#include "ngx_http_rlm_trajectory.h"
#include "ngx_http_rlm_metrics.h"


#define NGX_HTTP_RLM_LOOP_OP_TIMEOUT   30000
#define NGX_HTTP_RLM_LOOP_MARGIN       5000


static void ngx_http_rlm_loop_cleanup(void *data);
static void ngx_http_rlm_loop_stop_work(ngx_http_rlm_loop_t *loop);
static void ngx_http_rlm_loop_post(ngx_http_rlm_loop_t *loop);
static void ngx_http_rlm_loop_step_handler(ngx_event_t *e);
static void ngx_http_rlm_loop_deadline_handler(ngx_event_t *e);
static void ngx_http_rlm_loop_stepped(ngx_http_rlm_loop_t *loop,
    ngx_int_t rc, ngx_connection_t *c);
static void ngx_http_rlm_loop_opened(ngx_http_rlm_open_t *op);
static ngx_int_t ngx_http_rlm_loop_prepare(ngx_http_rlm_loop_t *loop);
static ngx_int_t ngx_http_rlm_loop_sandbox_state(ngx_http_rlm_loop_t *loop);
static ngx_http_rlm_cell_t *ngx_http_rlm_loop_new_cell(
    ngx_http_rlm_loop_t *loop, ngx_msec_t timeout);
static ngx_int_t ngx_http_rlm_loop_sandbox(ngx_http_rlm_loop_t *loop,
    json_t *frame, u_char *blob, size_t blob_len, ngx_msec_t timeout);
static void ngx_http_rlm_loop_cell_done(ngx_http_rlm_cell_t *cell,
    ngx_int_t rc);
static ngx_int_t ngx_http_rlm_loop_take_result(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_result_t *res);
static ngx_int_t ngx_http_rlm_loop_iterate(ngx_http_rlm_loop_t *loop);
static ngx_int_t ngx_http_rlm_loop_root_call(ngx_http_rlm_loop_t *loop);
static void ngx_http_rlm_loop_root_done(ngx_http_rlm_llm_call_t *call);
static ngx_int_t ngx_http_rlm_loop_response(ngx_http_rlm_loop_t *loop);
static ngx_int_t ngx_http_rlm_loop_run_block(ngx_http_rlm_loop_t *loop);
static ngx_int_t ngx_http_rlm_loop_block_done(ngx_http_rlm_loop_t *loop);
static ngx_int_t ngx_http_rlm_loop_final_var_done(ngx_http_rlm_loop_t *loop);
static ngx_int_t ngx_http_rlm_loop_lost(ngx_http_rlm_loop_t *loop,
    ngx_uint_t block);
static ngx_int_t ngx_http_rlm_loop_next_turn(ngx_http_rlm_loop_t *loop);
static void ngx_http_rlm_loop_new_record(ngx_http_rlm_loop_t *loop,
    ngx_str_t *response);
static ngx_int_t ngx_http_rlm_loop_compact(ngx_http_rlm_loop_t *loop);
static void ngx_http_rlm_loop_compacted(ngx_http_rlm_llm_call_t *call);
static ngx_int_t ngx_http_rlm_loop_stop(ngx_http_rlm_loop_t *loop,
    const char *limit, const char *why);
static ngx_int_t ngx_http_rlm_loop_best(ngx_http_rlm_loop_t *loop,
    ngx_str_t *text, ngx_http_rlm_response_t *parsed);
static void ngx_http_rlm_loop_record(ngx_http_rlm_loop_t *loop,
    ngx_str_t *final);
static void ngx_http_rlm_loop_count_models(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_llm_call_t *call);
static ngx_int_t ngx_http_rlm_loop_finish(ngx_http_rlm_loop_t *loop,
    ngx_str_t *answer, const char *limit);
static void ngx_http_rlm_loop_fail(ngx_http_rlm_loop_t *loop,
    ngx_uint_t status, const char *type, const char *code,
    const char *message);
static void ngx_http_rlm_loop_end(ngx_http_rlm_loop_t *loop);



ngx_int_t
ngx_http_rlm_loop_start(ngx_http_rlm_loop_t *loop)
{
    u_char               id[NGX_HTTP_RLM_ID_BYTES];
    ngx_int_t            rc;
    ngx_msec_t           left;
    ngx_pool_cleanup_t  *cln;

    loop->pool = loop->request->pool;
    loop->log = loop->request->connection->log;

    ngx_queue_init(&loop->subcalls);
    ngx_queue_init(&loop->children);

    loop->step.handler = ngx_http_rlm_loop_step_handler;
    loop->step.data = loop;
    loop->step.log = loop->log;

    loop->messages = json_array();
    loop->feedback = json_array();
    if (loop->messages == NULL || loop->feedback == NULL) {
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(loop->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_rlm_loop_cleanup;
    cln->data = loop;

    loop->tree->loops++;
    loop->counted = 1;

    if (loop->parent == NULL) {
        left = ngx_http_rlm_loop_remaining(loop);

        loop->deadline.handler = ngx_http_rlm_loop_deadline_handler;
        loop->deadline.data = loop;
        loop->deadline.log = loop->log;
        ngx_add_timer(&loop->deadline, left ? left : 1);
    }

    if (loop->session) {
        ngx_http_rlm_session_format_id(loop->session->id, loop->hex);
        loop->state = NGX_HTTP_RLM_LOOP_PREPARE;
        ngx_http_rlm_loop_post(loop);
        return NGX_OK;
    }

    /* a child loop: a sandbox of its own from the pool */

    if (ngx_http_rlm_session_random_id(id, loop->log) != NGX_OK) {
        return NGX_ERROR;
    }

    loop->state = NGX_HTTP_RLM_LOOP_OPEN;
    loop->open.handler = ngx_http_rlm_loop_opened;
    loop->open.data = loop;
    loop->open.any_id = 1;

    rc = ngx_http_rlm_session_open(&loop->open, loop->pool, id,
                                   &loop->tree->owner);

    if (rc != NGX_AGAIN) {
        ngx_http_rlm_loop_fail(loop, NGX_HTTP_SERVICE_UNAVAILABLE,
                               "server_error",
                               loop->open.code ? loop->open.code
                                               : "internal_error",
                               loop->open.message
                               ? loop->open.message
                               : "no sandbox for the child RLM");
        return NGX_OK;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_loop_opened(ngx_http_rlm_open_t *op)
{
    ngx_http_rlm_loop_t  *loop = op->data;

    if (op->session == NULL) {
        ngx_http_rlm_loop_fail(loop, op->status, "server_error",
                               op->code ? op->code : "internal_error",
                               op->message ? op->message
                                           : "no sandbox for the child RLM");
        return;
    }

    loop->session = op->session;
    loop->own_session = 1;
    ngx_memcpy(loop->hex, op->hex, NGX_HTTP_RLM_ID_HEX);

    loop->state = NGX_HTTP_RLM_LOOP_PREPARE;
    ngx_http_rlm_loop_post(loop);
}


/* stops everything the loop runs; its done() is not called */

void
ngx_http_rlm_loop_cancel(ngx_http_rlm_loop_t *loop)
{
    if (loop->finished && loop->state == NGX_HTTP_RLM_LOOP_DONE
        && loop->session == NULL)
    {
        return;
    }

    loop->finished = 1;
    loop->state = NGX_HTTP_RLM_LOOP_DONE;

    if (loop->step.posted) {
        ngx_delete_posted_event(&loop->step);
    }

    if (loop->deadline.timer_set) {
        ngx_del_timer(&loop->deadline);
    }

    if (loop->open.pending) {
        loop->open.pending->caller = NULL;
        loop->open.pending = NULL;
    }

    ngx_http_rlm_loop_stop_work(loop);

    ngx_http_rlm_loop_end(loop);
}


/* the root call, the block's calls and children, the block itself */

static void
ngx_http_rlm_loop_stop_work(ngx_http_rlm_loop_t *loop)
{
    if (loop->call_running) {
        loop->call_running = 0;
        ngx_http_rlm_llm_cancel(&loop->call);
    }

    ngx_http_rlm_subcalls_cancel(loop, NULL);

    if (loop->cell) {
        ngx_http_rlm_cell_cancel(loop->cell);
        loop->cell = NULL;
    }
}


static void
ngx_http_rlm_loop_cleanup(void *data)
{
    ngx_http_rlm_loop_t  *loop = data;

    ngx_http_rlm_loop_cancel(loop);

    json_decref(loop->messages);
    json_decref(loop->feedback);
    json_decref(loop->record);
    json_decref(loop->block_calls);
    json_decref(loop->lines);
    json_decref(loop->models);
    json_decref(loop->context);
    json_decref(loop->history);
    json_decref(loop->sampling);
    json_decref(loop->compacted);

    loop->compacted = NULL;
    loop->messages = NULL;
    loop->feedback = NULL;
    loop->record = NULL;
    loop->block_calls = NULL;
    loop->lines = NULL;
    loop->models = NULL;
    loop->context = NULL;
    loop->history = NULL;
    loop->sampling = NULL;
}


/*
 * Gives back the tree's count and the session of a child.  A child that
 * never got a session (the open failed, or it was cancelled before its
 * sandbox came) counted too, and must not hold the tree's share after.
 */

static void
ngx_http_rlm_loop_end(ngx_http_rlm_loop_t *loop)
{
    ngx_http_rlm_zone_t  *z;

    if (loop->counted) {
        loop->counted = 0;

        if (loop->tree->loops) {
            loop->tree->loops--;
        }
    }

    if (loop->session == NULL) {
        return;
    }

    z = ngx_http_rlm_zone();

    if (loop->own_session) {
        ngx_http_rlm_session_discard(z, loop->session);
        loop->own_session = 0;

    } else {
        ngx_http_rlm_session_put(z, loop->session);
    }

    loop->session = NULL;
}


static void
ngx_http_rlm_loop_post(ngx_http_rlm_loop_t *loop)
{
    if (!loop->step.posted) {
        ngx_post_event(&loop->step, &ngx_posted_events);
    }
}


static void
ngx_http_rlm_loop_deadline_handler(ngx_event_t *e)
{
    ngx_str_t             best;
    ngx_http_rlm_loop_t  *loop = e->data;

    if (loop->finished) {
        return;
    }

    ngx_log_error(NGX_LOG_INFO, loop->log, 0,
                  "rlm: completion deadline reached after %ui iterations",
                  loop->iterations);

    /* stop what runs, answer with the best text so far */
    ngx_http_rlm_loop_stop_work(loop);

    best = loop->best;

    (void) ngx_http_rlm_loop_finish(loop, &best, "timeout");
}


/*
 * The machine's one entry for sandbox outcomes: the state says what the
 * finished work was.
 */

static void
ngx_http_rlm_loop_step_handler(ngx_event_t *e)
{
    ngx_int_t               rc;
    ngx_connection_t       *c;
    ngx_http_rlm_loop_t    *loop = e->data;
    ngx_http_rlm_result_t   res;

    c = loop->request->connection;

    ngx_http_rlm_enter_handler();

    switch (loop->state) {

    case NGX_HTTP_RLM_LOOP_PREPARE:
        rc = ngx_http_rlm_loop_prepare(loop);
        break;

    case NGX_HTTP_RLM_LOOP_CELL:
        rc = ngx_http_rlm_loop_block_done(loop);
        break;

    case NGX_HTTP_RLM_LOOP_FINAL_VAR:
        rc = ngx_http_rlm_loop_final_var_done(loop);
        break;

    case NGX_HTTP_RLM_LOOP_HISTORY:
        if (ngx_http_rlm_loop_take_result(loop, &res) == NGX_OK) {
            ngx_http_rlm_result_free(&res);
        }

        loop->state = NGX_HTTP_RLM_LOOP_DONE;
        ngx_http_rlm_loop_end(loop);
        loop->done(loop);
        rc = NGX_OK;
        break;

    default:
        rc = NGX_OK;
        break;
    }

    ngx_http_rlm_loop_stepped(loop, rc, c);
}


/*
 * The end of every event handler of the loop: an internal failure ends
 * the completion with a 500, and subrequests posted meanwhile run.
 */

static void
ngx_http_rlm_loop_stepped(ngx_http_rlm_loop_t *loop, ngx_int_t rc,
    ngx_connection_t *c)
{
    if (rc == NGX_ERROR) {
        ngx_log_error(NGX_LOG_ERR, loop->log, 0,
                      "rlm: completion failed in state %d",
                      (int) loop->state);
        ngx_http_rlm_loop_fail(loop, NGX_HTTP_INTERNAL_SERVER_ERROR,
                               "server_error", "internal_error",
                               "the completion failed inside the server");
    }

    ngx_http_rlm_leave_handler();

    ngx_http_run_posted_requests(c);
}


/*
 * Before the first turn: the shared state (children), the context under
 * its name, `context_0` as an alias in the first turn of a session, and
 * the answer dict set back to not ready.
 */

static ngx_int_t
ngx_http_rlm_loop_prepare(ngx_http_rlm_loop_t *loop)
{
    char                   *text;
    char                    why[256];
    u_char                  name[32];
    json_t                 *frame;
    ngx_int_t               got;
    ngx_str_t              *body;
    ngx_uint_t              step;
    ngx_pool_cleanup_t     *cln;
    ngx_http_rlm_result_t   res;

    got = ngx_http_rlm_loop_take_result(loop, &res);

    if (loop->prepare_step > 0 && got != NGX_OK) {
        /* the sandbox is gone, or the queue is full */
        ngx_http_rlm_loop_fail(loop, loop->eval_rc >= 400
                                     ? (ngx_uint_t) loop->eval_rc
                                     : NGX_HTTP_BAD_GATEWAY,
                               "server_error", "sandbox_error",
                               "the session's sandbox could not take the "
                               "context");
        return NGX_OK;
    }

    if (got == NGX_OK && loop->prepare_step == 2 && loop->context_json.data
        && res.status == NGX_HTTP_RLM_CELL_ERROR)
    {
        /* the context's JSON was first read by the sandbox's parser */

        ngx_snprintf((u_char *) why, sizeof(why) - 1,
                     "the context is not valid JSON: %V%Z", &res.evalue);
        ngx_http_rlm_result_free(&res);

        ngx_http_rlm_loop_fail(loop, NGX_HTTP_BAD_REQUEST,
                               "invalid_request_error", "invalid_json", why);
        return NGX_OK;
    }

    if (got == NGX_OK && res.status != NGX_HTTP_RLM_CELL_OK) {
        ngx_http_rlm_result_free(&res);
        ngx_http_rlm_loop_fail(loop, NGX_HTTP_BAD_GATEWAY, "server_error",
                               "sandbox_lost",
                               "the session's sandbox is gone; start a "
                               "new session");
        return NGX_OK;
    }

    if (got == NGX_OK) {
        ngx_http_rlm_result_free(&res);
    }

    for ( ;; ) {
        step = loop->prepare_step++;

        switch (step) {

        case 0:
            if (loop->parent == NULL
                || json_object_size(loop->tree->state) == 0)
            {
                continue;
            }

            return ngx_http_rlm_loop_sandbox_state(loop);

        case 1:
            if (loop->turn == 0) {
                ngx_sprintf(name, "context%Z");

            } else {
                ngx_sprintf(name, "context_%uL%Z", loop->turn);
            }

            /* a body kept as JSON or as text goes as the sandbox's blob */

            body = loop->context_json.data ? &loop->context_json
                                           : &loop->context_text;

            if (body->data) {
                frame = json_pack("{s:s, s:s, s:s}", "op", "load_context",
                                  "name", (char *) name, "format",
                                  body == &loop->context_json ? "json"
                                                              : "text");

                return ngx_http_rlm_loop_sandbox(loop, frame, body->data,
                                                 body->len,
                                                 NGX_HTTP_RLM_LOOP_OP_TIMEOUT);
            }

            if (json_is_string(loop->context)) {
                frame = json_pack("{s:s, s:s, s:s}", "op", "load_context",
                                  "name", (char *) name, "format", "text");
                if (frame == NULL) {
                    return NGX_ERROR;
                }

                return ngx_http_rlm_loop_sandbox(loop, frame,
                           (u_char *) json_string_value(loop->context),
                           json_string_length(loop->context),
                           NGX_HTTP_RLM_LOOP_OP_TIMEOUT);
            }

            text = json_dumps(loop->context, JSON_COMPACT|JSON_ENCODE_ANY);
            if (text == NULL) {
                return NGX_ERROR;
            }

            /* the frame's chain points into text until it is sent */

            cln = ngx_pool_cleanup_add(loop->pool, 0);
            if (cln == NULL) {
                free(text);
                return NGX_ERROR;
            }

            cln->handler = free;
            cln->data = text;

            frame = json_pack("{s:s, s:s, s:s}", "op", "load_context",
                              "name", (char *) name, "format", "json");

            return ngx_http_rlm_loop_sandbox(loop, frame, (u_char *) text,
                                             ngx_strlen(text),
                                             NGX_HTTP_RLM_LOOP_OP_TIMEOUT);
        case 2:
            if (loop->parent) {
                continue;
            }

            /*
             * An answer left ready by an earlier completion (or cell) of
             * the session would hide this one's: set it back.
             */

            frame = json_pack("{s:s, s:s, s:I}", "op", "exec",
                              "code", loop->turn
                                      ? "answer.update(content='', "
                                        "ready=False)"
                                      : "context_0 = context\n"
                                        "answer.update(content='', "
                                        "ready=False)",
                              "timeout_ms",
                              (json_int_t) NGX_HTTP_RLM_LOOP_OP_TIMEOUT);
            return ngx_http_rlm_loop_sandbox(loop, frame, NULL, 0,
                                             NGX_HTTP_RLM_LOOP_OP_TIMEOUT);

        default:
            break;
        }

        break;
    }

    /* the first turn */

    body = loop->system_prompt.len ? &loop->system_prompt
                                    : &loop->conf->system_prompt;

    if (json_array_append_new(loop->messages,
            json_pack("{s:s, s:s%}", "role", "system", "content",
                      body->data, body->len))
        != 0
        || json_array_append_new(loop->messages,
                                 ngx_http_rlm_prompt_first(loop))
           != 0)
    {
        return NGX_ERROR;
    }

    return ngx_http_rlm_loop_iterate(loop);
}


/* a cell, context load or variable read on the loop's session */

static ngx_int_t
ngx_http_rlm_loop_sandbox(ngx_http_rlm_loop_t *loop, json_t *frame,
    u_char *blob, size_t blob_len, ngx_msec_t timeout)
{
    ngx_buf_t            *b;
    ngx_chain_t          *cl;
    ngx_http_rlm_cell_t  *cell;

    if (frame == NULL) {
        return NGX_ERROR;
    }

    cell = ngx_http_rlm_loop_new_cell(loop, timeout);
    if (cell == NULL) {
        json_decref(frame);
        return NGX_ERROR;
    }

    cell->frame = frame;

    if (blob_len) {
        b = ngx_calloc_buf(loop->pool);
        cl = ngx_alloc_chain_link(loop->pool);
        if (b == NULL || cl == NULL) {
            return NGX_ERROR;
        }

        b->pos = blob;
        b->last = blob + blob_len;
        b->memory = 1;
        cl->buf = b;
        cl->next = NULL;

        cell->blob = cl;
        cell->blob_len = blob_len;
        cell->context = 1;
    }

    loop->cell = cell;

    ngx_http_rlm_cell_start(cell);

    return NGX_OK;
}


/* a child's sandbox starts from the tree's `state`, encoded once */

static ngx_int_t
ngx_http_rlm_loop_sandbox_state(ngx_http_rlm_loop_t *loop)
{
    ngx_http_rlm_cell_t  *cell;

    cell = ngx_http_rlm_loop_new_cell(loop, NGX_HTTP_RLM_LOOP_OP_TIMEOUT);
    if (cell == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_rlm_state_frame(loop, cell) != NGX_OK) {
        ngx_http_rlm_cell_cancel(cell);
        return NGX_ERROR;
    }

    loop->cell = cell;

    ngx_http_rlm_cell_start(cell);

    return NGX_OK;
}


static ngx_http_rlm_cell_t *
ngx_http_rlm_loop_new_cell(ngx_http_rlm_loop_t *loop, ngx_msec_t timeout)
{
    ngx_http_rlm_cell_t  *cell;

    cell = ngx_pcalloc(loop->pool, sizeof(ngx_http_rlm_cell_t));
    if (cell == NULL) {
        return NULL;
    }

    cell->request = loop->request;
    cell->zone = ngx_http_rlm_zone();
    cell->session = loop->session;
    cell->timeout = timeout;
    cell->done = ngx_http_rlm_loop_cell_done;
    cell->call_handler = ngx_http_rlm_subcall_handler;
    cell->data = loop;

    if (ngx_http_rlm_cell_init(cell) != NGX_OK) {
        return NULL;
    }

    return cell;
}


static void
ngx_http_rlm_loop_cell_done(ngx_http_rlm_cell_t *cell, ngx_int_t rc)
{
    ngx_http_rlm_loop_t  *loop = cell->data;

    if (loop->cell != cell) {
        return;
    }

    loop->eval_rc = rc;
    ngx_http_rlm_loop_post(loop);
}


/*
 * The finished sandbox work's result, moved into res (the caller's to
 * free): NGX_OK, or NGX_DECLINED when there is none.
 */

static ngx_int_t
ngx_http_rlm_loop_take_result(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_result_t *res)
{
    ngx_int_t             rc;
    ngx_http_rlm_cell_t  *cell;

    cell = loop->cell;
    if (cell == NULL) {
        return NGX_DECLINED;
    }

    loop->cell = NULL;

    rc = NGX_DECLINED;

    if (cell->has_result) {
        *res = cell->result;
        ngx_memzero(&cell->result, sizeof(ngx_http_rlm_result_t));
        rc = NGX_OK;
    }

    ngx_http_rlm_cell_cancel(cell);

    return rc;
}


/* a new turn: out of turns, one last plain call */

static ngx_int_t
ngx_http_rlm_loop_iterate(ngx_http_rlm_loop_t *loop)
{
    if (loop->iterations >= loop->max_iterations) {
        if (json_array_append_new(loop->messages,
                                  ngx_http_rlm_prompt_last(loop)) != 0)
        {
            return NGX_ERROR;
        }

        loop->state = NGX_HTTP_RLM_LOOP_LAST;

    } else {
        loop->state = NGX_HTTP_RLM_LOOP_ROOT;
    }

    if (loop->progress) {
        loop->progress(loop, loop->state == NGX_HTTP_RLM_LOOP_LAST
                             ? "last call" : "iteration");
    }

    loop->iteration_start = ngx_current_msec;

    return ngx_http_rlm_loop_root_call(loop);
}


static ngx_int_t
ngx_http_rlm_loop_root_call(ngx_http_rlm_loop_t *loop)
{
    json_t      *req;
    ngx_int_t    rc;
    const char  *k;
    json_t      *v;

    req = json_object();
    if (req == NULL) {
        return NGX_ERROR;
    }

    if (loop->sampling) {
        json_object_foreach(loop->sampling, k, v) {
            json_object_set(req, k, v);
        }
    }

    if (loop->root_model.len) {
        json_object_set_new(req, "model",
                            json_stringn((char *) loop->root_model.data,
                                         loop->root_model.len));
    }

    json_object_set(req, "messages", loop->messages);

    loop->call_running = 1;

    rc = ngx_http_rlm_loop_start_call(loop, &loop->call, req,
                                      ngx_http_rlm_loop_root_done, loop);
    json_decref(req);

    if (rc != NGX_OK) {
        loop->call_running = 0;
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* a model call of the loop, under the tree's cap and deadline */

ngx_int_t
ngx_http_rlm_loop_start_call(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_llm_call_t *call, json_t *req,
    ngx_http_rlm_llm_done_pt done, void *data)
{
    ngx_memzero(call, sizeof(ngx_http_rlm_llm_call_t));

    call->provider = loop->provider;
    call->group = &loop->tree->group;
    call->pool = loop->pool;
    call->log = loop->log;
    call->deadline = loop->tree->deadline;
    call->done = done;
    call->data = data;

    return ngx_http_rlm_llm_start(call, req);
}


static void
ngx_http_rlm_loop_root_done(ngx_http_rlm_llm_call_t *call)
{
    ngx_int_t             rc;
    ngx_uint_t            status;
    ngx_connection_t     *c;
    ngx_http_rlm_loop_t  *loop = call->data;

    loop->call_running = 0;
    c = loop->request->connection;

    ngx_http_rlm_enter_handler();

    ngx_http_rlm_loop_count(loop, call);

    if (call->error != NGX_HTTP_RLM_LLM_OK) {

        if (ngx_http_rlm_loop_remaining(loop) == 0) {
            rc = ngx_http_rlm_loop_finish(loop, &loop->best, "timeout");

        } else if (loop->state == NGX_HTTP_RLM_LOOP_LAST
                   && loop->last_limit)
        {
            /* a limit had stopped the loop: it still answers */

            ngx_log_error(NGX_LOG_ERR, loop->log, 0,
                          "rlm: the last plain call failed: %s: %V",
                          ngx_http_rlm_llm_error_name(call->error),
                          &call->message);

            rc = ngx_http_rlm_loop_finish(loop, &loop->best,
                                          loop->last_limit);

        } else {
            status = (call->error == NGX_HTTP_RLM_LLM_ERR_TIMEOUT)
                     ? NGX_HTTP_GATEWAY_TIME_OUT : NGX_HTTP_BAD_GATEWAY;

            ngx_log_error(NGX_LOG_ERR, loop->log, 0,
                          "rlm: root model call failed: %s: %V",
                          ngx_http_rlm_llm_error_name(call->error),
                          &call->message);

            ngx_http_rlm_loop_fail(loop, status, "upstream_error",
                                   ngx_http_rlm_llm_error_name(call->error),
                                   (char *) call->message.data);
            rc = NGX_OK;
        }

    } else if (loop->state == NGX_HTTP_RLM_LOOP_LAST) {
        loop->iterations++;

        /* the plain call is one more line of the trajectory */
        ngx_http_rlm_loop_new_record(loop, &call->content);

        /* code in the plain call's answer is not an answer */

        ngx_http_rlm_parse_response(call->content.data, call->content.len,
                                    &loop->parsed);

        if (ngx_http_rlm_loop_best(loop, &call->content, &loop->parsed)
            != NGX_OK)
        {
            rc = NGX_ERROR;

        } else {
            rc = ngx_http_rlm_loop_finish(loop, &loop->best,
                                          loop->last_limit
                                          ? loop->last_limit
                                          : "max_iterations");
        }

    } else {
        rc = ngx_http_rlm_loop_response(loop);
    }

    ngx_http_rlm_loop_stepped(loop, rc, c);
}


/* the root model answered a turn: run its blocks, or see if it is done */

static ngx_int_t
ngx_http_rlm_loop_response(ngx_http_rlm_loop_t *loop)
{
    u_char                     name[128];
    json_t                    *frame;
    ngx_str_t                 *text, value;
    ngx_http_rlm_main_conf_t  *rmcf;

    text = &loop->call.content;

    if (ngx_http_rlm_loop_str(loop, &loop->response, (char *) text->data,
                              text->len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    loop->iterations++;

    /* the trajectory line: the prompt as sent, the answer to it */
    ngx_http_rlm_loop_new_record(loop, &loop->response);

    if (json_array_append_new(loop->messages,
            json_pack("{s:s, s:s%}", "role", "assistant", "content",
                      (char *) loop->response.data, loop->response.len))
        != 0)
    {
        return NGX_ERROR;
    }

    ngx_http_rlm_parse_response(loop->response.data, loop->response.len,
                                &loop->parsed);

    if (ngx_http_rlm_loop_best(loop, &loop->response, &loop->parsed)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (loop->tree->max_tokens
        && loop->tree->completion_tokens >= loop->tree->max_tokens)
    {
        return ngx_http_rlm_loop_finish(loop, &loop->best, "max_tokens");
    }

    if (loop->tree->max_cost > 0
        && loop->tree->cost >= loop->tree->max_cost)
    {
        return ngx_http_rlm_loop_finish(loop, &loop->best, "max_cost");
    }

    json_array_clear(loop->feedback);

    if (loop->parsed.nblocks) {
        loop->block = 0;
        return ngx_http_rlm_loop_run_block(loop);
    }

    if (loop->parsed.unterminated) {
        json_array_append_new(loop->feedback, json_string(
            "Your ```repl block was not closed with ``` (the response may "
            "have been cut off), so nothing ran. Write shorter blocks and "
            "close every one."));
        return ngx_http_rlm_loop_next_turn(loop);
    }

    if (loop->conf->final_markers
        && loop->parsed.final == NGX_HTTP_RLM_FINAL_TEXT)
    {
        value.data = (u_char *) loop->parsed.final_value.data;
        value.len = loop->parsed.final_value.len;

        while (value.len && (value.data[0] == ' ' || value.data[0] == '\n'
                             || value.data[0] == '\r'
                             || value.data[0] == '\t'))
        {
            value.data++;
            value.len--;
        }

        while (value.len && (value.data[value.len - 1] == ' '
                             || value.data[value.len - 1] == '\n'
                             || value.data[value.len - 1] == '\r'
                             || value.data[value.len - 1] == '\t'))
        {
            value.len--;
        }

        return ngx_http_rlm_loop_finish(loop, &value, NULL);
    }

    if (loop->conf->final_markers
        && loop->parsed.final == NGX_HTTP_RLM_FINAL_VAR
        && loop->parsed.final_value.len < sizeof(name))
    {
        ngx_memcpy(name, loop->parsed.final_value.data,
                   loop->parsed.final_value.len);
        name[loop->parsed.final_value.len] = '\0';

        loop->state = NGX_HTTP_RLM_LOOP_FINAL_VAR;

        /*
         * No more than an answer may hold, and a little over it: the
         * sandbox cuts on a character boundary (at most 3 bytes
         * less), so a value over the cap still arrives over it.
         */

        rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                                   ngx_http_rlm_module);

        frame = json_pack("{s:s, s:s, s:I}", "op", "get_var",
                          "name", (char *) name,
                          "max_bytes", (json_int_t) rmcf->answer_max + 4);

        return ngx_http_rlm_loop_sandbox(loop, frame, NULL, 0,
                                         NGX_HTTP_RLM_LOOP_OP_TIMEOUT);
    }

    json_array_append_new(loop->feedback, json_string(
        "You wrote no ```repl block, so nothing ran. Write code in a "
        "```repl block to make progress, and set answer[\"content\"] and "
        "answer[\"ready\"] = True when you are done."));

    return ngx_http_rlm_loop_next_turn(loop);
}


static ngx_int_t
ngx_http_rlm_loop_run_block(ngx_http_rlm_loop_t *loop)
{
    json_t                    *frame;
    ngx_msec_t                 wall, left;
    ngx_http_rlm_slice_t      *b;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    b = &loop->parsed.blocks[loop->block];

    wall = rmcf->cell_timeout;
    left = ngx_http_rlm_loop_remaining(loop);

    if (left && left < wall) {
        wall = left;
    }

    json_decref(loop->block_calls);
    loop->block_calls = loop->record ? json_array() : NULL;

    loop->state = NGX_HTTP_RLM_LOOP_CELL;

    frame = json_pack("{s:s, s:s%, s:I}", "op", "exec",
                      "code", (char *) b->data, b->len,
                      "timeout_ms", (json_int_t) wall);

    return ngx_http_rlm_loop_sandbox(loop, frame, NULL, 0,
                                     wall + NGX_HTTP_RLM_LOOP_MARGIN);
}


static ngx_int_t
ngx_http_rlm_loop_block_done(ngx_http_rlm_loop_t *loop)
{
    char                    what[96];
    json_t                 *out, *rec, *err;
    ngx_int_t               rc;
    ngx_str_t               text;
    const char             *status;
    ngx_http_rlm_cell_t    *cell;
    ngx_http_rlm_result_t   res;

    cell = loop->cell;

    /* calls of the block that were not answered die with it */
    ngx_http_rlm_subcalls_cancel(loop, cell);

    if (ngx_http_rlm_loop_take_result(loop, &res) != NGX_OK) {
        ngx_http_rlm_result_set(&res, NGX_HTTP_RLM_CELL_CRASHED,
                                "SandboxError",
                                cell->err_message
                                ? cell->err_message
                                : (u_char *) "the sandbox did not return "
                                             "a result",
                                cell->err_message
                                ? ngx_strlen(cell->err_message)
                                : sizeof("the sandbox did not return "
                                         "a result") - 1);
    }

    loop->cells++;

    status = ngx_http_rlm_cell_status_name(res.status);

    if (res.status == NGX_HTTP_RLM_CELL_OK) {
        loop->error_cells = 0;

    } else {
        loop->error_cells++;
    }

    if (ngx_http_rlm_state_merge(loop, res.state_delta) != NGX_OK) {
        res.status = NGX_HTTP_RLM_CELL_ERROR;
        status = ngx_http_rlm_cell_status_name(res.status);
        res.has_error = 1;
        ngx_str_set(&res.ename, "StateTooLarge");
        ngx_str_set(&res.evalue, "the shared `state` would be larger than "
                                 "the server takes (rlm_state_max); the "
                                 "changes of this block were not shared");
        ngx_str_null(&res.traceback);
        res.answer_ready = 0;
    }

    out = ngx_http_rlm_prompt_block_output(loop, loop->block + 1, &res);
    if (out == NULL) {
        ngx_http_rlm_result_free(&res);
        return NGX_ERROR;
    }

    json_array_append_new(loop->feedback, out);

    if (loop->record) {
        err = res.has_error
              ? json_pack("{s:s%, s:s%, s:s%}",
                          "ename", res.ename.data ? (char *) res.ename.data
                                                  : "", res.ename.len,
                          "evalue", res.evalue.data
                                    ? (char *) res.evalue.data : "",
                          res.evalue.len,
                          "traceback", res.traceback.data
                                       ? (char *) res.traceback.data : "",
                          res.traceback.len)
              : json_null();

        rec = json_pack("{s:s%, s:{s:s, s:s%, s:s%, s:o, s:f, s:O}}",
                        "code",
                        (char *) loop->parsed.blocks[loop->block].data,
                        loop->parsed.blocks[loop->block].len,
                        "result", "status", status,
                        "stdout", res.out.data ? (char *) res.out.data : "",
                        res.out.len,
                        "stderr", res.err.data ? (char *) res.err.data : "",
                        res.err.len,
                        "error", err,
                        "execution_time", res.duration_ms / 1000.0,
                        "rlm_calls", loop->block_calls);
        if (rec) {
            /* the answer this block set, as the reference's REPLResult */
            json_object_set_new(json_object_get(rec, "result"),
                                "final_answer",
                                (res.answer_ready && !res.answer_null)
                                ? json_stringn((char *) res.answer.data,
                                               res.answer.len)
                                : json_null());
            json_array_append_new(json_object_get(loop->record,
                                                  "code_blocks"), rec);
        }
    }

    if (loop->progress) {
        ngx_snprintf((u_char *) what, sizeof(what) - 1,
                     "cell %ui.%ui %s %.1f ms%Z", loop->iterations,
                     loop->block + 1, status, res.duration_ms);
        loop->progress(loop, what);
    }

    if (ngx_http_rlm_loop_lost(loop, loop->block + 1) == NGX_OK) {
        ngx_http_rlm_result_free(&res);
        return NGX_OK;
    }

    if (res.answer_ready) {
        if (res.answer_null) {
            ngx_str_set(&text, "");
            rc = NGX_OK;

        } else {
            rc = ngx_http_rlm_loop_str(loop, &text, (char *) res.answer.data,
                                       res.answer.len);
        }

        ngx_http_rlm_result_free(&res);

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }

        return ngx_http_rlm_loop_finish(loop, &text, NULL);
    }

    ngx_http_rlm_result_free(&res);

    if (loop->error_cells >= loop->conf->max_error_cells) {
        return ngx_http_rlm_loop_stop(loop, "max_error_cells",
                                      "Too many blocks in a row failed, so "
                                      "the loop stopped.");
    }

    if (ngx_http_rlm_loop_remaining(loop) == 0) {
        return ngx_http_rlm_loop_finish(loop, &loop->best, "timeout");
    }

    if (++loop->block < loop->parsed.nblocks) {
        return ngx_http_rlm_loop_run_block(loop);
    }

    if (loop->parsed.dropped) {
        json_array_append_new(loop->feedback, json_string(
            "Only the first 64 ```repl blocks of your response ran."));
    }

    return ngx_http_rlm_loop_next_turn(loop);
}


/*
 * A sandbox that died took the session's variables with it: every later
 * block would fail the same way, so the loop ends at once with
 * sandbox_lost rather than ask the model again.  NGX_OK: it ended.
 */

static ngx_int_t
ngx_http_rlm_loop_lost(ngx_http_rlm_loop_t *loop, ngx_uint_t block)
{
    u_char  *p, msg[160];
    u_char   reason[NGX_HTTP_RLM_REASON_LEN];

    if (loop->session == NULL
        || !ngx_http_rlm_session_is_lost(ngx_http_rlm_zone(), loop->session,
                                         reason, sizeof(reason)))
    {
        return NGX_DECLINED;
    }

    p = ngx_snprintf(msg, sizeof(msg) - 1,
                     "the session's sandbox is gone (%s) in turn %ui",
                     reason, loop->iterations);

    if (block) {
        p = ngx_snprintf(p, msg + sizeof(msg) - 1 - p, ", block %ui", block);
    }

    p = ngx_snprintf(p, msg + sizeof(msg) - 1 - p,
                     "; start a new session");
    *p = '\0';

    ngx_http_rlm_loop_fail(loop, NGX_HTTP_BAD_GATEWAY, "server_error",
                           "sandbox_lost", (char *) msg);

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_loop_final_var_done(ngx_http_rlm_loop_t *loop)
{
    char                       msg[256];
    ngx_int_t                  rc;
    ngx_str_t                  text;
    ngx_http_rlm_result_t      res;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    if (ngx_http_rlm_loop_take_result(loop, &res) == NGX_OK) {

        if (res.status == NGX_HTTP_RLM_CELL_OK && res.has_value
            && res.value.len > rmcf->answer_max)
        {
            /* the answer dict's cap holds for the marker's variable too */

            ngx_http_rlm_result_free(&res);

            ngx_snprintf((u_char *) msg, sizeof(msg) - 1,
                         "FINAL_VAR(%*s): the value is larger than the "
                         "server takes (rlm_answer_max); answer with "
                         "less text.%Z",
                         loop->parsed.final_value.len,
                         loop->parsed.final_value.data);

            json_array_append_new(loop->feedback, json_string(msg));

            return ngx_http_rlm_loop_next_turn(loop);
        }

        if (res.status == NGX_HTTP_RLM_CELL_OK && res.has_value) {
            rc = ngx_http_rlm_loop_str(loop, &text, (char *) res.value.data,
                                       res.value.len);
            ngx_http_rlm_result_free(&res);

            if (rc != NGX_OK) {
                return NGX_ERROR;
            }

            return ngx_http_rlm_loop_finish(loop, &text, NULL);
        }

        ngx_http_rlm_result_free(&res);
    }

    if (ngx_http_rlm_loop_lost(loop, 0) == NGX_OK) {
        return NGX_OK;
    }

    /* a missing variable does not end the loop */

    ngx_snprintf((u_char *) msg, sizeof(msg) - 1,
                 "FINAL_VAR(%*s): there is no such variable in the "
                 "interpreter. Create it in a ```repl block first, or set "
                 "answer[\"content\"] and answer[\"ready\"] = True.%Z",
                 loop->parsed.final_value.len,
                 loop->parsed.final_value.data);

    json_array_append_new(loop->feedback, json_string(msg));

    return ngx_http_rlm_loop_next_turn(loop);
}


static ngx_int_t
ngx_http_rlm_loop_next_turn(ngx_http_rlm_loop_t *loop)
{
    ngx_http_rlm_loop_record(loop, NULL);

    if (json_array_append_new(loop->messages,
                              ngx_http_rlm_prompt_turn(loop, loop->feedback))
        != 0)
    {
        return NGX_ERROR;
    }

    if (loop->tree->compaction
        && loop->call.prompt_tokens + loop->call.completion_tokens
           >= loop->tree->compaction
        && loop->iterations < loop->max_iterations
        && json_array_size(loop->messages) >= 6)
    {
        return ngx_http_rlm_loop_compact(loop);
    }

    return ngx_http_rlm_loop_iterate(loop);
}


/*
 * Starts the trajectory line of a turn: the prompt as sent, the root
 * model's answer and the tokens of that one call.  A root loop writes
 * its lines to the file, a child keeps them for its parent's line.
 */

static void
ngx_http_rlm_loop_new_record(ngx_http_rlm_loop_t *loop, ngx_str_t *response)
{
    json_t  *usage;

    json_decref(loop->record);
    loop->record = NULL;

    if (loop->trajectory == NULL && loop->lines == NULL) {
        return;
    }

    usage = loop->call.has_usage
            ? json_pack("{s:I, s:I, s:I}",
                        "prompt_tokens", (json_int_t) loop->call.prompt_tokens,
                        "completion_tokens",
                        (json_int_t) loop->call.completion_tokens,
                        "total_tokens",
                        (json_int_t) (loop->call.prompt_tokens
                                      + loop->call.completion_tokens))
            : json_null();

    loop->record = json_pack("{s:I, s:o, s:s%, s:[], s:o}",
                             "iteration", (json_int_t) loop->iterations,
                             "prompt", json_copy(loop->messages),
                             "response", (char *) response->data,
                             response->len, "code_blocks", "usage", usage);
}


/*
 * The root's last call passed the compaction threshold (tokens of its
 * prompt and answer): the sub model summarises the history between the
 * first user message and the last response, and the summary stands in
 * for it.  A failed summary leaves the history as it was.
 */

static ngx_int_t
ngx_http_rlm_loop_compact(ngx_http_rlm_loop_t *loop)
{
    json_t     *req;
    ngx_int_t   rc;

    req = json_pack("{s:o}", "messages",
                    ngx_http_rlm_prompt_compact(loop, 2,
                        json_array_size(loop->messages) - 2));
    if (req == NULL) {
        return NGX_ERROR;
    }

    if (loop->sub_model.len) {
        json_object_set_new(req, "model",
                            json_stringn((char *) loop->sub_model.data,
                                         loop->sub_model.len));
    }

    loop->state = NGX_HTTP_RLM_LOOP_COMPACT;
    loop->call_running = 1;

    if (loop->progress) {
        loop->progress(loop, "compaction");
    }

    json_decref(loop->compacted);
    loop->compacted = json_pack("{s:I, s:I}",
                                "tokens_before",
                                (json_int_t) (loop->call.prompt_tokens
                                              + loop->call.completion_tokens),
                                "messages_before",
                                (json_int_t) json_array_size(loop->messages));

    rc = ngx_http_rlm_loop_start_call(loop, &loop->call, req,
                                      ngx_http_rlm_loop_compacted, loop);
    json_decref(req);

    if (rc != NGX_OK) {
        loop->call_running = 0;
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_loop_compacted(ngx_http_rlm_llm_call_t *call)
{
    size_t                n;
    json_t               *kept, *summary;
    ngx_int_t             rc;
    ngx_str_t             text;
    ngx_connection_t     *c;
    ngx_http_rlm_loop_t  *loop = call->data;

    loop->call_running = 0;
    c = loop->request->connection;

    ngx_http_rlm_enter_handler();

    ngx_http_rlm_loop_count(loop, call);

    n = json_array_size(loop->messages);
    text = call->content;

    if (call->error != NGX_HTTP_RLM_LLM_OK || text.len == 0) {
        ngx_log_error(NGX_LOG_WARN, loop->log, 0,
                      "rlm: compaction failed, the history stays: %s",
                      ngx_http_rlm_llm_error_name(call->error));

        json_decref(loop->compacted);
        loop->compacted = NULL;

        rc = ngx_http_rlm_loop_iterate(loop);
        ngx_http_rlm_loop_stepped(loop, rc, c);
        return;
    }

    /* system, first user message, summary, last response, this turn */

    summary = ngx_http_rlm_prompt_summary(loop, &text);
    kept = json_array();

    if (summary == NULL || kept == NULL
        || json_array_append(kept, json_array_get(loop->messages, 0)) != 0
        || json_array_append(kept, json_array_get(loop->messages, 1)) != 0
        || json_array_append_new(kept, summary) != 0
        || json_array_append(kept, json_array_get(loop->messages, n - 2))
           != 0
        || json_array_append(kept, json_array_get(loop->messages, n - 1))
           != 0)
    {
        json_decref(kept);
        ngx_http_rlm_loop_stepped(loop, NGX_ERROR, c);
        return;
    }

    json_decref(loop->messages);
    loop->messages = kept;
    loop->compactions++;

    if (loop->compacted) {
        json_object_set_new(loop->compacted, "messages_after",
                            json_integer(json_array_size(kept)));
        json_object_set_new(loop->compacted, "summary",
                            json_stringn((char *) text.data, text.len));
        json_object_set_new(loop->compacted, "prompt_tokens",
                            json_integer(call->prompt_tokens));
        json_object_set_new(loop->compacted, "completion_tokens",
                            json_integer(call->completion_tokens));
    }

    rc = ngx_http_rlm_loop_iterate(loop);

    ngx_http_rlm_loop_stepped(loop, rc, c);
}


/*
 * A limit stopped the loop while there is time left: the turn is
 * recorded and one last plain call asks for the answer, as after the
 * last turn; its text (never its code) is the answer.
 */

static ngx_int_t
ngx_http_rlm_loop_stop(ngx_http_rlm_loop_t *loop, const char *limit,
    const char *why)
{
    ngx_http_rlm_loop_record(loop, NULL);

    if (json_array_append_new(loop->messages,
                              ngx_http_rlm_prompt_stopped(loop,
                                                          loop->feedback,
                                                          why))
        != 0)
    {
        return NGX_ERROR;
    }

    loop->last_limit = limit;
    loop->state = NGX_HTTP_RLM_LOOP_LAST;

    if (loop->progress) {
        loop->progress(loop, "last call");
    }

    loop->iteration_start = ngx_current_msec;

    return ngx_http_rlm_loop_root_call(loop);
}


/*
 * The best answer so far after a response: all of it when it has no
 * repl block, else its text outside the blocks if there is any; a reply
 * that is only code leaves the best answer as it was.
 */

static ngx_int_t
ngx_http_rlm_loop_best(ngx_http_rlm_loop_t *loop, ngx_str_t *text,
    ngx_http_rlm_response_t *parsed)
{
    u_char  *p;
    size_t   len;

    if (parsed->nblocks == 0 && parsed->dropped == 0
        && !parsed->unterminated)
    {
        loop->best = *text;
        return NGX_OK;
    }

    p = ngx_pnalloc(loop->pool, text->len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    len = ngx_http_rlm_parse_prose(text->data, text->len, p);

    if (len) {
        p[len] = '\0';
        loop->best.data = p;
        loop->best.len = len;
    }

    return NGX_OK;
}


/* the trajectory line of the turn that just ended, with its answer */

static void
ngx_http_rlm_loop_record(ngx_http_rlm_loop_t *loop, ngx_str_t *final)
{
    if (loop->record == NULL) {
        return;
    }

    json_object_set_new(loop->record, "iteration_time",
        json_real((double) (ngx_current_msec - loop->iteration_start)
                  / 1000.0));

    json_object_set_new(loop->record, "final_answer",
                        final ? json_stringn((char *) final->data,
                                             final->len)
                              : json_null());

    /* the prompt of this iteration was compacted before it was sent */

    if (loop->compacted
        && json_object_get(loop->compacted, "summary") != NULL)
    {
        json_object_set_new(loop->record, "compaction", loop->compacted);
        loop->compacted = NULL;
    }

    if (loop->trajectory) {
        (void) ngx_http_rlm_trajectory_iteration(loop->trajectory,
                                                 loop->record);

    } else if (loop->lines) {
        (void) json_array_append(loop->lines, loop->record);
    }

    json_decref(loop->record);
    loop->record = NULL;
}


/*
 * The loop has its answer (limit NULL) or hit a limit; the root loop of
 * a conversation saves its messages as history_N before it reports.
 */

static ngx_int_t
ngx_http_rlm_loop_finish(ngx_http_rlm_loop_t *loop, ngx_str_t *answer,
    const char *limit)
{
    char                *text;
    u_char               name[32];
    json_t              *frame;
    ngx_pool_cleanup_t  *cln;

    if (loop->finished) {
        return NGX_OK;
    }

    loop->finished = 1;

    if (loop->deadline.timer_set) {
        ngx_del_timer(&loop->deadline);
    }

    if (answer != &loop->answer
        && ngx_http_rlm_loop_str(loop, &loop->answer, (char *) answer->data,
                                 answer->len)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    loop->limit = limit;
    loop->finish_reason = limit ? "length" : "stop";

    ngx_http_rlm_loop_record(loop, &loop->answer);

    if (limit && loop->tree->limit == NULL) {
        loop->tree->limit = limit;
    }

    if (loop->parent || limit == NULL || ngx_strcmp(limit, "timeout") != 0)
    {
        /* keep the turn's messages for the next completion */

        if (loop->parent == NULL && loop->session
            && loop->cell == NULL)
        {
            ngx_sprintf(name, "history_%uL%Z", loop->turn);

            text = json_dumps(loop->messages, JSON_COMPACT);
            cln = ngx_pool_cleanup_add(loop->pool, 0);

            if (text == NULL || cln == NULL) {
                free(text);
                return NGX_ERROR;
            }

            cln->handler = free;
            cln->data = text;

            frame = json_pack("{s:s, s:s, s:s}", "op", "load_context",
                              "name", (char *) name, "format", "json");

            loop->state = NGX_HTTP_RLM_LOOP_HISTORY;

            if (ngx_http_rlm_loop_sandbox(loop, frame, (u_char *) text,
                                          ngx_strlen(text),
                                          NGX_HTTP_RLM_LOOP_OP_TIMEOUT)
                == NGX_OK)
            {
                return NGX_OK;
            }
        }
    }

    loop->state = NGX_HTTP_RLM_LOOP_DONE;
    ngx_http_rlm_loop_end(loop);
    loop->done(loop);

    return NGX_OK;
}


static void
ngx_http_rlm_loop_fail(ngx_http_rlm_loop_t *loop, ngx_uint_t status,
    const char *type, const char *code, const char *message)
{
    size_t  len;

    if (loop->finished) {
        return;
    }

    loop->error_status = status ? status : NGX_HTTP_INTERNAL_SERVER_ERROR;
    loop->error_type = type;
    loop->error_code = code;

    len = ngx_strlen(message);
    loop->error_message = ngx_pnalloc(loop->pool, len + 1);
    if (loop->error_message) {
        ngx_memcpy(loop->error_message, message, len + 1);
    }

    ngx_http_rlm_loop_record(loop, NULL);

    ngx_http_rlm_loop_cancel(loop);

    loop->done(loop);
}


/* tokens of a finished call, into the tree's sums and the model's row */

void
ngx_http_rlm_loop_count(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_llm_call_t *call)
{
    double                 cost;
    json_t                *row;
    uint64_t               pt, ct;
    ngx_str_t             *model;
    ngx_http_rlm_tree_t   *tree;
    ngx_http_rlm_price_t  *price;
    char                   key[256];

    tree = loop->tree;
    tree->calls++;

    ngx_http_rlm_loop_count_models(loop, call);
    ngx_http_rlm_metrics_model_call(call);

    /* a call without usage counts in its model's row, with no tokens */

    pt = call->has_usage ? call->prompt_tokens : 0;
    ct = call->has_usage ? call->completion_tokens : 0;

    tree->prompt_tokens += pt;
    tree->completion_tokens += ct;

    model = call->model.len ? &call->model : &call->provider->model;

    price = ngx_http_rlm_cost_price(tree->prices, model);
    cost = ngx_http_rlm_cost_of(price, pt, ct);
    tree->cost += cost;

    ngx_snprintf((u_char *) key, sizeof(key) - 1, "%*s%Z",
                 ngx_min(model->len, sizeof(key) - 2), model->data);

    row = json_object_get(tree->models, key);

    if (row == NULL) {
        row = json_pack("{s:I, s:I, s:I, s:I}", "calls", (json_int_t) 0,
                        "prompt_tokens", (json_int_t) 0,
                        "completion_tokens", (json_int_t) 0,
                        "total_tokens", (json_int_t) 0);
        if (row == NULL || json_object_set_new(tree->models, key, row) != 0)
        {
            return;
        }

        if (tree->prices) {
            json_object_set_new(row, "cost", json_real(0));
        }
    }

    if (tree->prices) {
        json_object_set_new(row, "cost",
            json_real(json_real_value(json_object_get(row, "cost"))
                      + cost));
    }

#define ngx_http_rlm_loop_add(field, n)                                       \
    json_object_set_new(row, field,                                           \
        json_integer(json_integer_value(json_object_get(row, field))          \
                     + (json_int_t) (n)))

    ngx_http_rlm_loop_add("calls", 1);
    ngx_http_rlm_loop_add("prompt_tokens", pt);
    ngx_http_rlm_loop_add("completion_tokens", ct);
    ngx_http_rlm_loop_add("total_tokens", pt + ct);

#undef ngx_http_rlm_loop_add
}


/*
 * The call counts for every child loop it is under, in the shape of the
 * reference's UsageSummary: a child's trajectory entry reports what the
 * child and its own sub-calls used.  Kept only while a trajectory is
 * written (the children then have their lines).
 */

static void
ngx_http_rlm_loop_count_models(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_llm_call_t *call)
{
    char                 key[256];
    json_t              *row;
    ngx_str_t           *model;
    ngx_http_rlm_loop_t  *l;

    model = call->model.len ? &call->model : &call->provider->model;

    ngx_snprintf((u_char *) key, sizeof(key) - 1, "%*s%Z",
                 ngx_min(model->len, sizeof(key) - 2), model->data);

    for (l = loop; l; l = l->parent) {

        if (l->lines == NULL) {
            continue;
        }

        if (l->models == NULL) {
            l->models = json_object();
            if (l->models == NULL) {
                continue;
            }
        }

        row = json_object_get(l->models, key);

        if (row == NULL) {
            row = json_pack("{s:I, s:I, s:I}", "total_calls", (json_int_t) 0,
                            "total_input_tokens", (json_int_t) 0,
                            "total_output_tokens", (json_int_t) 0);
            if (row == NULL || json_object_set_new(l->models, key, row) != 0)
            {
                continue;
            }
        }

#define ngx_http_rlm_loop_add(field, n)                                       \
    json_object_set_new(row, field,                                           \
        json_integer(json_integer_value(json_object_get(row, field))          \
                     + (json_int_t) (n)))

        ngx_http_rlm_loop_add("total_calls", 1);

        if (call->has_usage) {
            ngx_http_rlm_loop_add("total_input_tokens", call->prompt_tokens);
            ngx_http_rlm_loop_add("total_output_tokens",
                                  call->completion_tokens);
        }

#undef ngx_http_rlm_loop_add
    }
}

/* usage: the tokens, and the cost when prices are configured */

json_t *
ngx_http_rlm_loop_usage(ngx_http_rlm_tree_t *tree)
{
    json_t  *u;

    u = json_pack("{s:I, s:I, s:I}",
                  "prompt_tokens", (json_int_t) tree->prompt_tokens,
                  "completion_tokens", (json_int_t) tree->completion_tokens,
                  "total_tokens",
                  (json_int_t) (tree->prompt_tokens
                                + tree->completion_tokens));

    if (u && tree->prices) {
        json_object_set_new(u, "cost", json_real(tree->cost));
    }

    return u;
}


ngx_msec_t
ngx_http_rlm_loop_remaining(ngx_http_rlm_loop_t *loop)
{
    ngx_msec_int_t  left;

    left = (ngx_msec_int_t) (loop->tree->deadline - ngx_current_msec);

    return left > 0 ? (ngx_msec_t) left : 0;
}

ngx_int_t
ngx_http_rlm_loop_str(ngx_http_rlm_loop_t *loop, ngx_str_t *dst,
    const char *src, size_t len)
{
    dst->data = ngx_pnalloc(loop->pool, len + 1);
    if (dst->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(dst->data, src, len);
    dst->data[len] = '\0';
    dst->len = len;

    return NGX_OK;
}
