
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * A cell on a session's sandbox (ngx_http_rlm_cell.h): the session's
 * turn, the exchange over the channel, the frames decoded by the typed
 * protocol layer, and the limits held from outside the sandbox.
 *
 * The sandbox's own timers (SIGALRM, RLIMIT_CPU) are only the first,
 * gentle step: code can replace the runtime that arms them.  So the host
 * keeps its own: past the cell's wall time and a grace, it has the
 * manager kill the sandbox; a cell that runs longer than a moment is
 * put under the manager's CPU watch, which kills the sandbox once the
 * cell has used its CPU time and a grace.  Either way the cell answers
 * "timeout" and the session says its sandbox is gone and why.
 */


#include "ngx_http_rlm_cell.h"


/*
 * A waiter whose turn depends on another worker's cell polls the shared
 * queue, backing off from WAIT_MIN to WAIT_MAX ms; one that only this
 * worker's cells stand before is woken when the running cell ends and
 * polls only every WAIT_LOCAL ms, as a safety net.
 */
#define NGX_HTTP_RLM_WAIT_MIN       1
#define NGX_HTTP_RLM_WAIT_MAX       4
#define NGX_HTTP_RLM_WAIT_LOCAL     1000
#define NGX_HTTP_RLM_STATUS_TRIES   50
#define NGX_HTTP_RLM_STATUS_DELAY   20

/* a cell still running after WATCH_AFTER ms is put under a CPU watch */
#define NGX_HTTP_RLM_WATCH_AFTER    1000
#define NGX_HTTP_RLM_CPU_GRACE      3000


ngx_http_rlm_call_pt  ngx_http_rlm_call_handler =
    ngx_http_rlm_cell_default_call;

static ngx_str_t  ngx_http_rlm_cell_framing =
    ngx_string("the sandbox broke the channel's framing");

/* this worker's cells waiting for their session's turn, in arrival order */
static ngx_queue_t    ngx_http_rlm_cell_waiting;


static ngx_int_t ngx_http_rlm_cell_enter(ngx_http_rlm_cell_t *cell);
static void ngx_http_rlm_cell_wait_handler(ngx_event_t *e);
static void ngx_http_rlm_cell_wake(ngx_http_rlm_session_t *s);
static ngx_int_t ngx_http_rlm_cell_run(ngx_http_rlm_cell_t *cell);
static void ngx_http_rlm_cell_watch(ngx_event_t *e);
static void ngx_http_rlm_cell_send_watch(ngx_http_rlm_cell_t *cell);
static ngx_int_t ngx_http_rlm_cell_frame(ngx_http_rlm_peer_t *p,
    json_t *msg);
static void ngx_http_rlm_cell_peer_done(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status);
static ngx_int_t ngx_http_rlm_cell_overtime(ngx_http_rlm_cell_t *cell);
static ngx_int_t ngx_http_rlm_cell_ask_status(ngx_http_rlm_cell_t *cell);
static void ngx_http_rlm_cell_ask_retry(ngx_event_t *e);
static void ngx_http_rlm_cell_ask_done(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);
static ngx_int_t ngx_http_rlm_cell_lost(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_cell_status_e status, const char *why);
static ngx_int_t ngx_http_rlm_cell_complete(ngx_http_rlm_cell_t *cell);
static void ngx_http_rlm_cell_release(ngx_http_rlm_cell_t *cell);
static void ngx_http_rlm_cell_finalize(ngx_http_rlm_cell_t *cell,
    ngx_int_t rc);
static void ngx_http_rlm_cell_cleanup(void *data);
static void ngx_http_rlm_cell_unwatch(ngx_http_rlm_cell_t *cell);
static void ngx_http_rlm_cell_abandon(ngx_http_rlm_cell_t *cell);
static ngx_uint_t ngx_http_rlm_cell_elapsed_us(ngx_http_rlm_cell_t *cell);
static ngx_int_t ngx_http_rlm_cell_error(ngx_http_rlm_cell_t *cell,
    ngx_uint_t status, const char *type, const char *code,
    const char *message);


ngx_int_t
ngx_http_rlm_cell_init(ngx_http_rlm_cell_t *cell)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(cell->request->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_rlm_cell_cleanup;
    cln->data = cell;

    if (cell->call_handler == NULL) {
        cell->call_handler = ngx_http_rlm_call_handler;
    }

    return NGX_OK;
}


void
ngx_http_rlm_cell_start(ngx_http_rlm_cell_t *cell)
{
    ngx_int_t  rc;

    rc = ngx_http_rlm_cell_enter(cell);

    if (rc != NGX_DONE) {
        ngx_http_rlm_cell_finalize(cell, rc);
    }
}


void
ngx_http_rlm_cell_cancel(ngx_http_rlm_cell_t *cell)
{
    ngx_http_rlm_cell_cleanup(cell);
    cell->finalized = 1;
}


static ngx_int_t
ngx_http_rlm_cell_enter(ngx_http_rlm_cell_t *cell)
{
    ngx_int_t                  rc;
    ngx_uint_t                 local;
    ngx_http_request_t        *r;
    ngx_http_rlm_main_conf_t  *rmcf;

    r = cell->request;
    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    rc = ngx_http_rlm_session_enter(cell->zone, cell->session,
                                    rmcf->session_queue, &cell->waiter,
                                    &local);

    switch (rc) {

    case NGX_OK:
        cell->running = 1;
        return ngx_http_rlm_cell_run(cell);

    case NGX_AGAIN:
        /*
         * The cell that ends before our turn wakes us if it runs in
         * this worker; another worker's cell is only seen by polling.
         */
        if (ngx_http_rlm_cell_waiting.next == NULL) {
            ngx_queue_init(&ngx_http_rlm_cell_waiting);
        }

        ngx_queue_insert_tail(&ngx_http_rlm_cell_waiting, &cell->wait_link);

        cell->wait_event.handler = ngx_http_rlm_cell_wait_handler;
        cell->wait_event.data = cell;
        cell->wait_event.log = r->connection->log;
        cell->wait_delay = local ? NGX_HTTP_RLM_WAIT_LOCAL
                                 : NGX_HTTP_RLM_WAIT_MIN;
        ngx_add_timer(&cell->wait_event, cell->wait_delay);
        return NGX_DONE;

    case NGX_BUSY:
        (void) ngx_atomic_fetch_add(&cell->zone->sh->stats.cells_rejected,
                                    1);

        return ngx_http_rlm_cell_error(cell, NGX_HTTP_TOO_MANY_REQUESTS,
                                       "rate_limit_error",
                                       "session_queue_full",
                                       "too many cells are waiting in this "
                                       "session (rlm_session_queue); cells "
                                       "of one session run one at a time");

    default:
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
}


static void
ngx_http_rlm_cell_wait_handler(ngx_event_t *e)
{
    ngx_int_t             rc;
    ngx_uint_t            local, timedout;
    ngx_http_rlm_cell_t  *cell;

    cell = e->data;

    if (cell->waiter == NULL) {
        return;
    }

    timedout = e->timedout;
    e->timedout = 0;

    if (ngx_http_rlm_session_poll(cell->zone, cell->session, cell->waiter,
                                  &local)
        != NGX_OK)
    {
        if (local) {
            cell->wait_delay = NGX_HTTP_RLM_WAIT_LOCAL;

        } else if (cell->wait_delay >= NGX_HTTP_RLM_WAIT_LOCAL) {
            cell->wait_delay = NGX_HTTP_RLM_WAIT_MIN;

        } else if (cell->wait_delay < NGX_HTTP_RLM_WAIT_MAX) {
            cell->wait_delay *= 2;
        }

        ngx_add_timer(&cell->wait_event, cell->wait_delay);
        return;
    }

    /* both a wake-up and the timer may have fired in this cycle */

    if (e->timer_set) {
        ngx_del_timer(e);
    }

    if (e->posted) {
        ngx_delete_posted_event(e);
    }

    (void) ngx_atomic_fetch_add(timedout
                                ? &cell->zone->sh->stats.turns_polled
                                : &cell->zone->sh->stats.turns_woken,
                                1);

    ngx_queue_remove(&cell->wait_link);
    cell->waiter = NULL;
    cell->running = 1;

    rc = ngx_http_rlm_cell_run(cell);

    if (rc != NGX_DONE) {
        ngx_http_rlm_cell_finalize(cell, rc);
    }
}


/*
 * The session's turn was given back in this worker: the first of our
 * waiters on that session polls now instead of at its next timer.
 */

static void
ngx_http_rlm_cell_wake(ngx_http_rlm_session_t *s)
{
    ngx_queue_t          *q;
    ngx_http_rlm_cell_t  *cell;

    if (ngx_http_rlm_cell_waiting.next == NULL) {
        return;
    }

    for (q = ngx_queue_head(&ngx_http_rlm_cell_waiting);
         q != ngx_queue_sentinel(&ngx_http_rlm_cell_waiting);
         q = ngx_queue_next(q))
    {
        cell = ngx_queue_data(q, ngx_http_rlm_cell_t, wait_link);

        if (cell->session == s) {
            if (!cell->wait_event.posted) {
                ngx_post_event(&cell->wait_event, &ngx_posted_events);
            }

            return;
        }
    }
}


/* the session's turn is ours: reach the sandbox */

static ngx_int_t
ngx_http_rlm_cell_run(ngx_http_rlm_cell_t *cell)
{
    ngx_uint_t            state;
    ngx_chain_t          *cl;
    ngx_http_request_t   *r;
    ngx_http_rlm_ctx_t   *ctx;
    ngx_http_rlm_peer_t  *p;

    r = cell->request;

    ctx = ngx_http_rlm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->has_sandbox_time = 1;

    (void) clock_gettime(CLOCK_MONOTONIC, &cell->started);

    cell->path.data = ngx_pnalloc(r->pool, NGX_HTTP_RLM_PATH_LEN);
    if (cell->path.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_rlm_session_copy_sandbox(cell->zone, cell->session, &cell->path,
                                      cell->sandbox, &cell->generation,
                                      &state, cell->reason);

    if (state == NGX_HTTP_RLM_SESSION_LOST) {
        return ngx_http_rlm_cell_lost(cell, NGX_HTTP_RLM_CELL_LOST,
                                      (char *) cell->reason);
    }

    if (cell->generation != cell->zone->sh->super.starts) {
        /* the manager was restarted and took its sandboxes with it */
        return ngx_http_rlm_cell_lost(cell, NGX_HTTP_RLM_CELL_LOST,
                                      "manager restarted");
    }

    p = ngx_http_rlm_peer_create(r->pool, r->connection->log, &cell->path);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p->timeout = cell->timeout;
    p->keepalive = !cell->context;
    p->frame_handler = ngx_http_rlm_cell_frame;
    p->done_handler = ngx_http_rlm_cell_peer_done;
    p->data = cell;

    if (cell->encoded) {
        p->out = cell->encoded;

    } else {
        cl = ngx_http_rlm_frame_encode(r->pool, cell->frame, cell->blob_len);
        if (cl == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        cl->next = cell->blob;
        p->out = cl;
    }

    cell->peer = p;
    cell->sent = 1;

    if (cell->session->watched) {
        /* an abandoned cell before this one left a watch: ours now */
        cell->session->watched = 0;
        ngx_http_rlm_control_unwatch(ngx_cycle->log, cell->sandbox);
    }

    if (!cell->context) {
        cell->watch_event.handler = ngx_http_rlm_cell_watch;
        cell->watch_event.data = cell;
        cell->watch_event.log = r->connection->log;
        ngx_add_timer(&cell->watch_event, NGX_HTTP_RLM_WATCH_AFTER);
    }

    if (ngx_http_rlm_peer_start(p) != NGX_OK) {
        cell->peer = NULL;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the outcome may already be there: peer_done finalized then */

    return NGX_DONE;
}


/*
 * The cell runs longer than a moment: from now on the manager counts
 * the sandbox's CPU time and kills it once the cell's CPU limit and a
 * grace are used up.  What ran before the watch is at most WATCH_AFTER
 * ms of one core, so the bound holds within that.
 */

static void
ngx_http_rlm_cell_watch(ngx_event_t *e)
{
    ngx_http_rlm_cell_t  *cell = e->data;

    if (cell->peer == NULL || cell->finalized) {
        return;
    }

    cell->watched = 1;

    ngx_http_rlm_cell_send_watch(cell);
}


/* a whole cell's CPU limit and the grace, counted by the manager */

static void
ngx_http_rlm_cell_send_watch(ngx_http_rlm_cell_t *cell)
{
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_get_module_main_conf(cell->request, ngx_http_rlm_module);

    /* the cycle's log: the control request may outlive this request */
    ngx_http_rlm_control_watch(ngx_cycle->log, cell->sandbox,
                               (ngx_msec_t) rmcf->cell_cpu_time * 1000
                               + NGX_HTTP_RLM_CPU_GRACE);
}


static void
ngx_http_rlm_cell_unwatch(ngx_http_rlm_cell_t *cell)
{
    if (cell->watch_event.timer_set) {
        ngx_del_timer(&cell->watch_event);
    }

    if (cell->watched) {
        cell->watched = 0;

        if (!cell->killed) {
            ngx_http_rlm_control_unwatch(ngx_cycle->log, cell->sandbox);
        }
    }
}


static ngx_int_t
ngx_http_rlm_cell_frame(ngx_http_rlm_peer_t *p, json_t *msg)
{
    ngx_int_t                   rc;
    const char                 *why;
    ngx_http_rlm_call_t         call;
    ngx_http_rlm_cell_t        *cell = p->data;
    ngx_http_rlm_main_conf_t   *rmcf;
    ngx_http_rlm_frame_type_e   type;
    ngx_http_rlm_proto_caps_t   caps;

    rmcf = ngx_http_get_module_main_conf(cell->request, ngx_http_rlm_module);

    caps.output_max = rmcf->output_max;
    caps.answer_max = rmcf->answer_max;
    caps.state_max = rmcf->state_max;

    why = NULL;
    rc = ngx_http_rlm_proto_decode(msg, &caps, &type, &cell->result, &call,
                                   &why);

    if (rc == NGX_OK && type == NGX_HTTP_RLM_FRAME_RESULT) {
        cell->has_result = 1;
        return NGX_OK;
    }

    if (rc == NGX_OK && !cell->context) {
        return cell->call_handler(cell, &call) == NGX_OK ? NGX_AGAIN
                                                         : NGX_ERROR;
    }

    if (rc == NGX_OK) {
        ngx_http_rlm_call_free(&call);
        why = "a call during a context load";
    }

    ngx_log_error(NGX_LOG_ERR, p->log, 0,
                  "rlm: sandbox \"%s\" sent a malformed frame: %s",
                  cell->sandbox, why);

    ngx_http_rlm_result_set(&cell->result, NGX_HTTP_RLM_CELL_SANDBOX_ERROR,
                            "ProtocolError", (u_char *) why,
                            ngx_strlen(why));
    cell->has_result = 1;

    return NGX_ERROR;
}


/*
 * The default engine: code asked for a model call and this location has
 * none, so the call fails in Python with a clear message.
 */

ngx_int_t
ngx_http_rlm_cell_default_call(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_call_t *call)
{
    return ngx_http_rlm_cell_refuse(cell, call, "model calls are not "
                                    "configured for this location");
}


/* answers a call with an error the code raises; frees the call */

ngx_int_t
ngx_http_rlm_cell_refuse(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_call_t *call, const char *message)
{
    json_t     *reply;
    ngx_int_t   rc;

    reply = ngx_http_rlm_proto_refusal(call->id, message);
    ngx_http_rlm_call_free(call);

    if (reply == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_rlm_cell_reply(cell, reply);

    json_decref(reply);

    return (rc == NGX_ERROR) ? NGX_ERROR : NGX_OK;
}


/* sends the host's answer to a call frame; usable at any later time */

ngx_int_t
ngx_http_rlm_cell_reply(ngx_http_rlm_cell_t *cell, json_t *reply)
{
    ngx_chain_t  *cl;

    if (cell->peer == NULL || cell->peer->finished) {
        return NGX_DECLINED;
    }

    cl = ngx_http_rlm_frame_encode(cell->request->pool, reply, 0);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    return ngx_http_rlm_peer_send(cell->peer, cl);
}


/* the host-side deadline of the running cell, counted from now */

void
ngx_http_rlm_cell_extend(ngx_http_rlm_cell_t *cell, ngx_msec_t timeout)
{
    if (cell->peer && cell->peer->connection) {
        ngx_add_timer(cell->peer->connection->read, timeout);
    }
}


static void
ngx_http_rlm_cell_peer_done(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status)
{
    ngx_int_t             rc;
    ngx_http_rlm_cell_t  *cell = p->data;

    cell->cell_us = ngx_http_rlm_cell_elapsed_us(cell);
    cell->peer = NULL;

    (void) ngx_atomic_fetch_add(p->reused
                                ? &cell->zone->sh->stats.conns_reused
                                : &cell->zone->sh->stats.conns_new,
                                1);

    switch (status) {

    case NGX_HTTP_RLM_PEER_OK:
        rc = ngx_http_rlm_cell_complete(cell);
        break;

    case NGX_HTTP_RLM_PEER_UNREACHABLE:
    case NGX_HTTP_RLM_PEER_CLOSED:

        if (ngx_http_rlm_session_deleted(cell->zone, cell->session)) {
            /* DELETE released the sandbox under the running cell */
            rc = ngx_http_rlm_cell_lost(cell, NGX_HTTP_RLM_CELL_LOST,
                                        "session deleted");
            break;
        }

        if (status == NGX_HTTP_RLM_PEER_UNREACHABLE) {
            cell->sent = 0;
        }

        /* ask the manager why the sandbox is gone */

        if (ngx_http_rlm_cell_ask_status(cell) == NGX_OK) {
            return;
        }

        rc = ngx_http_rlm_cell_lost(cell, NGX_HTTP_RLM_CELL_LOST, "lost");
        break;

    case NGX_HTTP_RLM_PEER_TIMEDOUT:
        rc = ngx_http_rlm_cell_overtime(cell);
        break;

    default:
        if (cell->context) {
            ngx_http_rlm_result_free(&cell->result);
            cell->has_result = 0;
            rc = ngx_http_rlm_cell_error(cell, NGX_HTTP_BAD_GATEWAY,
                                         "server_error", "sandbox_error",
                                         "the sandbox broke the protocol");
            ngx_http_rlm_cell_release(cell);
            break;
        }

        /*
         * A malformed frame is this cell's typed result and nothing
         * more; the code that wrote it may still run: stop it.
         */

        if (cell->result.status != NGX_HTTP_RLM_CELL_SANDBOX_ERROR) {
            ngx_http_rlm_result_set(&cell->result,
                                    NGX_HTTP_RLM_CELL_SANDBOX_ERROR,
                                    "ProtocolError",
                                    ngx_http_rlm_cell_framing.data,
                                    ngx_http_rlm_cell_framing.len);
            cell->has_result = 1;
        }

        ngx_http_rlm_control_interrupt(ngx_cycle->log, cell->sandbox);

        rc = ngx_http_rlm_cell_complete(cell);
        break;
    }

    ngx_http_rlm_cell_finalize(cell, rc);
}


/*
 * The cell ran past the host's deadline: its wall time and a grace, with
 * the time spent waiting on the host's answers left out.  The sandbox's
 * own timer should have stopped it by then; it did not, so the code has
 * disarmed it.  The manager kills the sandbox, whatever the code did to
 * its signal handlers.
 */

static ngx_int_t
ngx_http_rlm_cell_overtime(ngx_http_rlm_cell_t *cell)
{
    u_char     *msg;
    ngx_log_t  *log;

    log = cell->request->connection->log;

    ngx_log_error(NGX_LOG_WARN, log, 0,
                  "rlm: sandbox \"%s\" did not answer in %M ms, killing it",
                  cell->sandbox, cell->timeout);

    cell->killed = 1;
    ngx_http_rlm_control_kill(ngx_cycle->log, cell->sandbox, "wall_limit");

    if (ngx_http_rlm_session_lost(cell->zone, cell->session, "wall_limit")) {
        ngx_http_rlm_metrics_death("wall_limit");
    }

    if (cell->context) {
        ngx_http_rlm_cell_release(cell);
        return ngx_http_rlm_cell_error(cell, NGX_HTTP_GATEWAY_TIME_OUT,
                                       "server_error", "sandbox_timeout",
                                       "the sandbox did not answer in time "
                                       "and was stopped");
    }

    msg = (u_char *) "the cell ran past its time limit and did not stop; "
                     "its sandbox was killed and the session's variables "
                     "are gone (wall_limit)";

    ngx_http_rlm_result_set(&cell->result, NGX_HTTP_RLM_CELL_TIMEOUT,
                            "TimeoutError", msg, ngx_strlen(msg));
    cell->has_result = 1;

    return ngx_http_rlm_cell_complete(cell);
}


static ngx_int_t
ngx_http_rlm_cell_ask_status(ngx_http_rlm_cell_t *cell)
{
    json_t     *req;
    ngx_int_t   rc;

    req = json_pack("{s:s, s:s}", "op", "status", "sandbox",
                    (char *) cell->sandbox);
    if (req == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_rlm_control(cell->request->pool,
                              cell->request->connection->log, req,
                              NGX_HTTP_RLM_CONTROL_TIMEOUT,
                              ngx_http_rlm_cell_ask_done, cell);
    json_decref(req);

    return rc;
}


/*
 * The channel closes as the sandbox dies, a moment before the manager
 * has reaped it and knows why: ask again a few times.
 */

static void
ngx_http_rlm_cell_ask_retry(ngx_event_t *e)
{
    ngx_http_rlm_cell_t  *cell = e->data;

    if (ngx_http_rlm_cell_ask_status(cell) != NGX_OK) {
        ngx_http_rlm_cell_finalize(cell,
            ngx_http_rlm_cell_lost(cell, NGX_HTTP_RLM_CELL_LOST, "lost"));
    }
}


static void
ngx_http_rlm_cell_ask_done(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    const char                  *reason;
    ngx_int_t                    rc;
    ngx_http_rlm_cell_t         *cell = data;
    ngx_http_rlm_cell_status_e   st;

    reason = NULL;

    if (reply && json_is_true(json_object_get(reply, "ok"))
        && json_is_true(json_object_get(reply, "alive"))
        && cell->status_tries++ < NGX_HTTP_RLM_STATUS_TRIES)
    {
        cell->wait_event.handler = ngx_http_rlm_cell_ask_retry;
        cell->wait_event.data = cell;
        cell->wait_event.log = cell->request->connection->log;
        ngx_add_timer(&cell->wait_event, NGX_HTTP_RLM_STATUS_DELAY);
        return;
    }

    if (reply == NULL) {
        reason = "manager unreachable";

    } else if (!json_is_true(json_object_get(reply, "ok"))) {
        /* the manager does not know it: it was restarted */
        reason = "manager restarted";

    } else if (json_is_true(json_object_get(reply, "alive"))) {
        reason = "crashed";

    } else {
        reason = json_string_value(json_object_get(reply, "reason"));
        if (reason == NULL) {
            reason = "crashed";
        }
    }

    /* a cell that was running when its sandbox died reports how */

    st = NGX_HTTP_RLM_CELL_LOST;

    if (cell->sent) {
        if (ngx_strcmp(reason, "oom") == 0) {
            st = NGX_HTTP_RLM_CELL_OOM;

        } else if (ngx_strcmp(reason, "wall_limit") == 0
                   || ngx_strcmp(reason, "cpu_limit") == 0)
        {
            st = NGX_HTTP_RLM_CELL_TIMEOUT;

        } else {
            st = NGX_HTTP_RLM_CELL_CRASHED;
        }
    }

    rc = ngx_http_rlm_cell_lost(cell, st, reason);

    ngx_http_rlm_cell_finalize(cell, rc);
}


/* the session has no sandbox any more: say so, as a cell result */

static ngx_int_t
ngx_http_rlm_cell_lost(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_cell_status_e status, const char *why)
{
    u_char  *msg, *last;

    if (ngx_http_rlm_session_lost(cell->zone, cell->session, why)) {
        ngx_log_error(NGX_LOG_WARN, cell->request->connection->log, 0,
                      "rlm: session lost its sandbox \"%s\": %s",
                      cell->sandbox, why);
        ngx_http_rlm_metrics_death(why);
    }

    msg = ngx_pnalloc(cell->request->pool, 160);
    if (msg == NULL) {
        ngx_http_rlm_cell_release(cell);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = ngx_snprintf(msg, 159, "the session's sandbox is gone (%s); "
                        "delete the session and create a new one", why);
    *last = '\0';

    ngx_http_rlm_result_set(&cell->result, status, "SandboxLost", msg,
                            last - msg);
    cell->has_result = 1;

    if (cell->context) {
        ngx_http_rlm_cell_release(cell);
        return ngx_http_rlm_cell_error(cell, NGX_HTTP_CONFLICT,
                                       "invalid_request_error",
                                       "sandbox_lost", (char *) msg);
    }

    return ngx_http_rlm_cell_complete(cell);
}


/* the session's books for a finished cell or context load */

static ngx_int_t
ngx_http_rlm_cell_complete(ngx_http_rlm_cell_t *cell)
{
    size_t                       bytes;
    ngx_http_rlm_ctx_t          *ctx;
    ngx_http_rlm_result_t       *res;
    ngx_http_rlm_cell_status_e   st;

    res = &cell->result;
    st = res->status;

    if (cell->context) {
        bytes = cell->blob_len;

        if (st != NGX_HTTP_RLM_CELL_OK) {
            ngx_http_rlm_cell_release(cell);

            return ngx_http_rlm_cell_error(cell, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_json",
                       res->evalue.len ? (char *) res->evalue.data
                                       : "the context could not be loaded");
        }

        (void) ngx_http_rlm_session_done(cell->zone, cell->session, 0, 0,
                                         bytes);
        cell->running = 0;
        ngx_http_rlm_cell_wake(cell->session);

        (void) ngx_atomic_fetch_add(&cell->zone->sh->stats.context_loads, 1);
        (void) ngx_atomic_fetch_add(&cell->zone->sh->stats.context_bytes,
                                    bytes);

        return NGX_OK;
    }

    cell->number = ngx_http_rlm_session_done(cell->zone, cell->session,
                                             cell->cell_us,
                                             st != NGX_HTTP_RLM_CELL_OK, 0);
    cell->running = 0;
    ngx_http_rlm_cell_wake(cell->session);

    ngx_http_rlm_metrics_cell(st, cell->cell_us);

    ctx = ngx_http_rlm_get_ctx(cell->request);

    if (ctx) {
        ctx->cell_status.data = (u_char *) ngx_http_rlm_cell_status_name(st);
        ctx->cell_status.len = ngx_strlen(ctx->cell_status.data);
    }

    return NGX_OK;
}


/* gives the session's turn back after a failure */

static void
ngx_http_rlm_cell_release(ngx_http_rlm_cell_t *cell)
{
    if (cell->running) {
        cell->running = 0;
        (void) ngx_http_rlm_session_done(cell->zone, cell->session,
                                         cell->cell_us, 1, 0);
        ngx_http_rlm_cell_wake(cell->session);
    }
}


static void
ngx_http_rlm_cell_finalize(ngx_http_rlm_cell_t *cell, ngx_int_t rc)
{
    ngx_http_rlm_ctx_t  *ctx;

    if (cell->finalized) {
        return;
    }

    cell->finalized = 1;

    ngx_http_rlm_cell_release(cell);
    ngx_http_rlm_cell_unwatch(cell);

    ctx = ngx_http_rlm_get_ctx(cell->request);
    if (ctx && ctx->has_sandbox_time) {
        /* an engine's cells add up over the completion */
        ctx->sandbox_us = (cell->api ? 0 : ctx->sandbox_us)
                          + (cell->cell_us
                             ? cell->cell_us
                             : ngx_http_rlm_cell_elapsed_us(cell));
    }

    /*
     * A subrequest's pool is its parent's: give the session back now,
     * not when a Lua handler that ran a thousand cells ends.
     */

    if (cell->waiter == NULL && cell->peer == NULL && cell->referenced) {
        cell->referenced = 0;
        ngx_http_rlm_session_put(cell->zone, cell->session);
    }

    cell->done(cell, rc);
}


static ngx_int_t
ngx_http_rlm_cell_error(ngx_http_rlm_cell_t *cell, ngx_uint_t status,
    const char *type, const char *code, const char *message)
{
    size_t  len;

    cell->err_type = type;
    cell->err_code = code;

    len = ngx_strlen(message);
    cell->err_message = ngx_pnalloc(cell->request->pool, len + 1);

    if (cell->err_message) {
        ngx_memcpy(cell->err_message, message, len + 1);
    }

    return status;
}


static void
ngx_http_rlm_cell_cleanup(void *data)
{
    ngx_http_rlm_cell_t  *cell = data;

    if (cell->wait_event.timer_set) {
        ngx_del_timer(&cell->wait_event);
    }

    if (cell->wait_event.posted) {
        ngx_delete_posted_event(&cell->wait_event);
    }

    if (cell->peer) {
        cell->peer->done_handler = NULL;
        ngx_http_rlm_peer_close(cell->peer);
        cell->peer = NULL;

        if (cell->sent && !cell->context) {
            ngx_http_rlm_cell_abandon(cell);
        }
    }

    ngx_http_rlm_cell_unwatch(cell);

    if (cell->waiter) {
        ngx_queue_remove(&cell->wait_link);
        ngx_http_rlm_session_leave(cell->zone, cell->session, cell->waiter);
        cell->waiter = NULL;

        /* we may have been the head: the next one may go now */
        ngx_http_rlm_cell_wake(cell->session);
    }

    ngx_http_rlm_cell_release(cell);

    if (cell->referenced) {
        cell->referenced = 0;
        ngx_http_rlm_session_put(cell->zone, cell->session);
    }

    json_decref(cell->frame);
    cell->frame = NULL;
    ngx_http_rlm_result_free(&cell->result);
    cell->has_result = 0;

    if (cell->encoded_free) {
        cell->encoded_free(cell->encoded_data);
        cell->encoded_free = NULL;
    }
}


/*
 * The cell still runs but nobody waits for it (client gone, completion
 * stopped).  An engine's code is interrupted: stop it, not just its
 * channel (closed first: the sandbox checks that the cell it interrupts
 * is the one whose connection went away).  An API cell runs on to its
 * end, as the API promises.  Either way its CPU time stays bounded from
 * outside: the manager watches it for a whole cell's CPU limit, until
 * the session's next cell takes the watch off.
 */

static void
ngx_http_rlm_cell_abandon(ngx_http_rlm_cell_t *cell)
{
    if (!cell->api) {
        ngx_http_rlm_control_interrupt(ngx_cycle->log, cell->sandbox);
    }

    ngx_http_rlm_cell_send_watch(cell);

    /* only the turn's holder writes it; the next one reads it after */
    cell->session->watched = 1;
    cell->watched = 0;

    if (cell->watch_event.timer_set) {
        ngx_del_timer(&cell->watch_event);
    }
}


static ngx_uint_t
ngx_http_rlm_cell_elapsed_us(ngx_http_rlm_cell_t *cell)
{
    struct timespec  now;
    int64_t          us;

    if (cell->started.tv_sec == 0 && cell->started.tv_nsec == 0) {
        return 0;
    }

    (void) clock_gettime(CLOCK_MONOTONIC, &now);

    us = (int64_t) (now.tv_sec - cell->started.tv_sec) * 1000000
         + (now.tv_nsec - cell->started.tv_nsec) / 1000;

    return us > 0 ? (ngx_uint_t) us : 0;
}
