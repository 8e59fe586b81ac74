
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * POST .../sessions/{id}/eval and PUT .../sessions/{id}/context: read
 * and check the body, wait for the session's turn, run the cell (or load
 * the context) over the sandbox's channel, answer with its result.
 *
 * Everything a cell holds (its place in the session's queue, its turn,
 * its reference on the session, the channel socket, timers) is given back
 * by a cleanup of the request's pool, so a request that ends in any way
 * leaves the session usable.
 */


#include "ngx_http_rlm_module.h"


/*
 * A waiter whose turn depends on another worker's cell polls the shared
 * queue, backing off from WAIT_MIN to WAIT_MAX ms; one that only this
 * worker's cells stand before is woken when the running cell ends and
 * polls only every WAIT_LOCAL ms, as a safety net.
 */
#define NGX_HTTP_RLM_WAIT_MIN       1
#define NGX_HTTP_RLM_WAIT_MAX       4
#define NGX_HTTP_RLM_WAIT_LOCAL     1000
#define NGX_HTTP_RLM_CELL_MARGIN    5000
#define NGX_HTTP_RLM_STATUS_TRIES   50
#define NGX_HTTP_RLM_STATUS_DELAY   20

#define ngx_http_rlm_ident_start(c)                                           \
    (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z') || (c) == '_')
#define ngx_http_rlm_ident_char(c)                                            \
    (ngx_http_rlm_ident_start(c) || ((c) >= '0' && (c) <= '9'))


ngx_http_rlm_call_pt  ngx_http_rlm_call_handler =
    ngx_http_rlm_eval_default_call;

/* this worker's cells waiting for their session's turn, in arrival order */
static ngx_queue_t    ngx_http_rlm_eval_waiting;


static void ngx_http_rlm_eval_body(ngx_http_request_t *r);
static void ngx_http_rlm_eval_body_run(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_eval_parse(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_context_parse(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_eval_enter(ngx_http_rlm_eval_t *ev);
static void ngx_http_rlm_eval_wait_handler(ngx_event_t *e);
static void ngx_http_rlm_eval_wake(ngx_http_rlm_session_t *s);
static ngx_int_t ngx_http_rlm_eval_run(ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_eval_frame(ngx_http_rlm_peer_t *p,
    json_t *msg);
static void ngx_http_rlm_eval_peer_done(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status);
static ngx_int_t ngx_http_rlm_eval_status(ngx_http_rlm_eval_t *ev);
static void ngx_http_rlm_eval_status_retry(ngx_event_t *e);
static void ngx_http_rlm_eval_status_done(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);
static ngx_int_t ngx_http_rlm_eval_lost(ngx_http_rlm_eval_t *ev,
    const char *status, const char *why);
static ngx_int_t ngx_http_rlm_eval_respond(ngx_http_rlm_eval_t *ev);
static void ngx_http_rlm_eval_release(ngx_http_rlm_eval_t *ev);
static void ngx_http_rlm_eval_finalize(ngx_http_rlm_eval_t *ev,
    ngx_int_t rc);
static void ngx_http_rlm_eval_cleanup(void *data);
static ngx_uint_t ngx_http_rlm_eval_elapsed_us(ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_json_content_type(ngx_http_request_t *r);
static ngx_int_t ngx_http_rlm_eval_body_json(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev, json_t **out);
static ngx_int_t ngx_http_rlm_eval_answered(ngx_http_rlm_eval_t *ev,
    ngx_int_t rc);
static ngx_int_t ngx_http_rlm_eval_error(ngx_http_rlm_eval_t *ev,
    ngx_uint_t status, const char *type, const char *code,
    const char *message);


/*
 * Entry from the router with a referenced session; the reference now
 * belongs to the eval state and its cleanup.
 */

ngx_int_t
ngx_http_rlm_eval_handler(ngx_http_request_t *r, ngx_http_rlm_session_t *s,
    ngx_uint_t context)
{
    ngx_int_t                  rc;
    ngx_pool_cleanup_t        *cln;
    ngx_http_rlm_ctx_t        *ctx;
    ngx_http_rlm_eval_t       *ev;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    ctx = ngx_http_rlm_get_ctx(r);
    ev = ngx_pcalloc(r->pool, sizeof(ngx_http_rlm_eval_t));

    if (ctx == NULL || ev == NULL) {
        ngx_http_rlm_session_put(ngx_http_rlm_zone(), s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        ngx_http_rlm_session_put(ngx_http_rlm_zone(), s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ev->request = r;
    ev->zone = ngx_http_rlm_zone();
    ev->session = s;
    ev->referenced = 1;
    ev->context = context;
    ev->call_handler = ngx_http_rlm_call_handler;

    cln->handler = ngx_http_rlm_eval_cleanup;
    cln->data = ev;

    ctx->eval = ev;

    if (r == r->main) {
        if (!context && ngx_http_rlm_json_content_type(r) != NGX_OK) {
            return ngx_http_rlm_refuse(r, NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                       "invalid_request_error",
                                       "unsupported_media_type", NULL,
                                       "the body must be JSON "
                                       "(Content-Type: application/json)");
        }

        if (r->headers_in.content_length_n
            > (off_t) (context ? rmcf->context_max_size
                               : NGX_HTTP_RLM_EVAL_BODY_MAX))
        {
            return ngx_http_rlm_refuse(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                       "invalid_request_error",
                                       "body_too_large", NULL,
                                       context ? "the context is larger "
                                                 "than rlm_context_max_size"
                                               : "the request body is too "
                                                 "large");
        }
    }

    /* a big context goes to a temp file and from there to the socket */

    if (!context) {
        r->request_body_in_single_buf = 1;
    }

    if (ngx_http_rlm_body_cap(r, context ? (off_t) rmcf->context_max_size
                                             : NGX_HTTP_RLM_EVAL_BODY_MAX)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_read_client_request_body(r, ngx_http_rlm_eval_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_eval_body(ngx_http_request_t *r)
{
    ngx_http_rlm_ctx_t   *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    ngx_http_rlm_enter_handler();
    ngx_http_rlm_eval_body_run(r, ctx->eval);
    ngx_http_rlm_leave_handler();
}


static void
ngx_http_rlm_eval_body_run(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev)
{
    ngx_int_t  rc;

    rc = ev->context ? ngx_http_rlm_context_parse(r, ev)
                     : ngx_http_rlm_eval_parse(r, ev);

    if (rc == NGX_DECLINED) {
        ngx_http_rlm_eval_finalize(ev, ev->answer_rc);
        return;
    }

    if (rc != NGX_OK) {
        ngx_http_rlm_eval_finalize(ev, rc);
        return;
    }

    rc = ngx_http_rlm_eval_enter(ev);

    if (rc == NGX_DONE) {
        return;
    }

    ngx_http_rlm_eval_finalize(ev, rc);
}


/* {"code": str, "timeout"?: seconds, "echo"?: bool} */

static ngx_int_t
ngx_http_rlm_eval_parse(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev)
{
    double                     secs;
    json_t                    *body, *code, *timeout, *echo;
    ngx_int_t                  rc;
    ngx_msec_t                 wall;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    rc = ngx_http_rlm_eval_body_json(r, ev, &body);
    if (rc != NGX_OK) {
        return rc;
    }

    code = json_object_get(body, "code");
    timeout = json_object_get(body, "timeout");
    echo = json_object_get(body, "echo");

    if (code == NULL) {
        json_decref(body);
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "missing_field", "code",
                   "\"code\" is required"));
    }

    if (!json_is_string(code)) {
        json_decref(body);
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "invalid_type", "code",
                   "\"code\" must be a string"));
    }

    wall = rmcf->cell_timeout;

    if (timeout && !json_is_null(timeout)) {
        secs = json_is_number(timeout) ? json_number_value(timeout) : -1;

        if (!(secs > 0)) {
            json_decref(body);
            return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_type", "timeout",
                       "\"timeout\" must be a positive number of seconds"));
        }

        if (secs * 1000 < (double) wall) {
            wall = (ngx_msec_t) (secs * 1000);
            if (wall == 0) {
                wall = 1;
            }
        }
    }

    if (echo && !json_is_null(echo) && !json_is_boolean(echo)) {
        json_decref(body);
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "invalid_type", "echo",
                   "\"echo\" must be a boolean"));
    }

    ev->frame = json_pack("{s:s, s:O, s:I, s:b}", "op", "exec",
                          "code", code, "timeout_ms", (json_int_t) wall,
                          "echo", json_is_true(echo));

    json_decref(body);

    if (ev->frame == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ev->timeout = wall + NGX_HTTP_RLM_CELL_MARGIN;

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_eval_body_json(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev,
    json_t **out)
{
    size_t         len;
    u_char        *data, *p;
    json_t        *body;
    ngx_buf_t     *b;
    ngx_chain_t   *cl;
    json_error_t   jerr;
    u_char         msg[256];

    *out = NULL;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_BAD_REQUEST,
                                       "invalid_request_error",
                                       "invalid_json",
                                       "the request body must be a JSON "
                                       "object"));
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        len += b->in_file ? (size_t) (b->file_last - b->file_pos)
                          : (size_t) (b->last - b->pos);
    }

    if (len > NGX_HTTP_RLM_EVAL_BODY_MAX) {
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                       "invalid_request_error",
                                       "body_too_large",
                                       "the request body is too large"));
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        data = cl->buf->pos;

    } else {
        data = ngx_pnalloc(r->pool, len ? len : 1);
        if (data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        p = data;

        for ( /* void */ ; cl; cl = cl->next) {
            b = cl->buf;

            if (b->in_file) {
                ssize_t  n;

                n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                                  b->file_pos);
                if (n != b->file_last - b->file_pos) {
                    return NGX_HTTP_INTERNAL_SERVER_ERROR;
                }

                p += n;

            } else {
                p = ngx_cpymem(p, b->pos, b->last - b->pos);
            }
        }
    }

    body = json_loadb((char *) data, len, JSON_REJECT_DUPLICATES, &jerr);

    if (body == NULL || !json_is_object(body)) {
        if (body) {
            json_decref(body);
            ngx_cpystrn(msg, (u_char *) "the request body must be a JSON "
                        "object", sizeof(msg));

        } else {
            ngx_snprintf(msg, sizeof(msg) - 1, "the request body is not "
                         "valid JSON: %s (line %d, column %d)%Z", jerr.text,
                         jerr.line, jerr.column);
        }

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "rlm: client sent a bad body: %s", msg);

        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_BAD_REQUEST,
                                       "invalid_request_error",
                                       "invalid_json", (char *) msg));
    }

    *out = body;

    return NGX_OK;
}


/* PUT .../context: the body itself is the blob of a load_context frame */

static ngx_int_t
ngx_http_rlm_context_parse(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev)
{
    size_t                     len;
    u_char                     namebuf[65];
    ngx_str_t                  format, name, *ct;
    ngx_buf_t                 *b;
    ngx_uint_t                 i;
    ngx_chain_t               *cl, *out, **ll;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    ngx_str_null(&format);

    if (ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK) {
        if (!(format.len == 4 && ngx_strncmp(format.data, "json", 4) == 0)
            && !(format.len == 4 && ngx_strncmp(format.data, "text", 4) == 0))
        {
            return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_value", "format",
                       "the \"format\" argument must be \"json\" or "
                       "\"text\""));
        }

    } else if (r != r->main) {
        ngx_str_set(&format, "json");

    } else {
        ct = r->headers_in.content_type ? &r->headers_in.content_type->value
                                        : NULL;

        if (ct && ngx_http_rlm_json_content_type(r) == NGX_OK) {
            ngx_str_set(&format, "json");

        } else if (ct && ct->len >= 5
                   && ngx_strncasecmp(ct->data, (u_char *) "text/", 5) == 0)
        {
            ngx_str_set(&format, "text");

        } else {
            return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r,
                       NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                       "invalid_request_error", "unsupported_media_type",
                       "the context must be sent as application/json or "
                       "text/* (or say ?format=json|text)"));
        }
    }

    ngx_str_set(&name, "context");

    if (ngx_http_arg(r, (u_char *) "name", 4, &name) == NGX_OK) {
        if (name.len == 0 || name.len > 64
            || !ngx_http_rlm_ident_start(name.data[0]))
        {
            goto bad_name;
        }

        for (i = 1; i < name.len; i++) {
            if (!ngx_http_rlm_ident_char(name.data[i])) {
                goto bad_name;
            }
        }
    }

    ngx_memcpy(namebuf, name.data, name.len);
    namebuf[name.len] = '\0';

    len = 0;
    out = NULL;
    ll = &out;

    if (r->request_body) {
        for (cl = r->request_body->bufs; cl; cl = cl->next) {
            b = cl->buf;
            len += b->in_file ? (size_t) (b->file_last - b->file_pos)
                              : (size_t) (b->last - b->pos);

            *ll = ngx_alloc_chain_link(r->pool);
            if (*ll == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            (*ll)->buf = b;
            (*ll)->next = NULL;
            ll = &(*ll)->next;
        }
    }

    if (len > rmcf->context_max_size) {
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                       "invalid_request_error",
                                       "body_too_large",
                                       "the context is larger than "
                                       "rlm_context_max_size"));
    }

    ev->frame = json_pack("{s:s, s:s, s:s%}", "op", "load_context",
                          "name", (char *) namebuf, "format",
                          (char *) format.data, format.len);
    if (ev->frame == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ev->blob = out;
    ev->blob_len = len;

    /* parsing 100 MB of JSON in the sandbox takes a while */
    ev->timeout = 2 * rmcf->cell_timeout + 60000;

    return NGX_OK;

bad_name:

    return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
               "invalid_request_error", "invalid_value", "name",
               "the \"name\" argument must be a Python identifier of at "
               "most 64 characters"));
}


/*
 * An error answer was sent while checking the body: remember the result
 * of sending it for the finalization.
 */

static ngx_int_t
ngx_http_rlm_eval_answered(ngx_http_rlm_eval_t *ev, ngx_int_t rc)
{
    ev->answer_rc = rc;

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_rlm_eval_enter(ngx_http_rlm_eval_t *ev)
{
    ngx_int_t                  rc;
    ngx_uint_t                 local;
    ngx_http_request_t        *r;
    ngx_http_rlm_main_conf_t  *rmcf;

    r = ev->request;
    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    rc = ngx_http_rlm_session_enter(ev->zone, ev->session,
                                    rmcf->session_queue, &ev->waiter,
                                    &local);

    switch (rc) {

    case NGX_OK:
        ev->running = 1;
        return ngx_http_rlm_eval_run(ev);

    case NGX_AGAIN:
        /*
         * The cell that ends before our turn wakes us if it runs in
         * this worker; another worker's cell is only seen by polling.
         */
        if (ngx_http_rlm_eval_waiting.next == NULL) {
            ngx_queue_init(&ngx_http_rlm_eval_waiting);
        }

        ngx_queue_insert_tail(&ngx_http_rlm_eval_waiting, &ev->wait_link);

        ev->wait_event.handler = ngx_http_rlm_eval_wait_handler;
        ev->wait_event.data = ev;
        ev->wait_event.log = r->connection->log;
        ev->wait_delay = local ? NGX_HTTP_RLM_WAIT_LOCAL
                               : NGX_HTTP_RLM_WAIT_MIN;
        ngx_add_timer(&ev->wait_event, ev->wait_delay);
        return NGX_DONE;

    case NGX_BUSY:
        (void) ngx_atomic_fetch_add(&ev->zone->sh->stats.cells_rejected, 1);

        if (ev->done == NULL
            && ngx_http_rlm_set_header(r, "Retry-After", "1") != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_rlm_eval_error(ev, NGX_HTTP_TOO_MANY_REQUESTS,
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
ngx_http_rlm_eval_wait_handler(ngx_event_t *e)
{
    ngx_int_t             rc;
    ngx_uint_t            local, timedout;
    ngx_http_rlm_eval_t  *ev;

    ev = e->data;

    if (ev->waiter == NULL) {
        return;
    }

    timedout = e->timedout;
    e->timedout = 0;

    if (ngx_http_rlm_session_poll(ev->zone, ev->session, ev->waiter, &local)
        != NGX_OK)
    {
        if (local) {
            ev->wait_delay = NGX_HTTP_RLM_WAIT_LOCAL;

        } else if (ev->wait_delay >= NGX_HTTP_RLM_WAIT_LOCAL) {
            ev->wait_delay = NGX_HTTP_RLM_WAIT_MIN;

        } else if (ev->wait_delay < NGX_HTTP_RLM_WAIT_MAX) {
            ev->wait_delay *= 2;
        }

        ngx_add_timer(&ev->wait_event, ev->wait_delay);
        return;
    }

    /* both a wake-up and the timer may have fired in this cycle */

    if (e->timer_set) {
        ngx_del_timer(e);
    }

    if (e->posted) {
        ngx_delete_posted_event(e);
    }

    (void) ngx_atomic_fetch_add(timedout ? &ev->zone->sh->stats.turns_polled
                                         : &ev->zone->sh->stats.turns_woken,
                                1);

    ngx_queue_remove(&ev->wait_link);
    ev->waiter = NULL;
    ev->running = 1;

    rc = ngx_http_rlm_eval_run(ev);

    if (rc != NGX_DONE) {
        ngx_http_rlm_eval_finalize(ev, rc);
    }
}


/*
 * The session's turn was given back in this worker: the first of our
 * waiters on that session polls now instead of at its next timer.
 */

static void
ngx_http_rlm_eval_wake(ngx_http_rlm_session_t *s)
{
    ngx_queue_t          *q;
    ngx_http_rlm_eval_t  *ev;

    if (ngx_http_rlm_eval_waiting.next == NULL) {
        return;
    }

    for (q = ngx_queue_head(&ngx_http_rlm_eval_waiting);
         q != ngx_queue_sentinel(&ngx_http_rlm_eval_waiting);
         q = ngx_queue_next(q))
    {
        ev = ngx_queue_data(q, ngx_http_rlm_eval_t, wait_link);

        if (ev->session == s) {
            if (!ev->wait_event.posted) {
                ngx_post_event(&ev->wait_event, &ngx_posted_events);
            }

            return;
        }
    }
}


/* the session's turn is ours: reach the sandbox */

static ngx_int_t
ngx_http_rlm_eval_run(ngx_http_rlm_eval_t *ev)
{
    ngx_uint_t             state;
    ngx_chain_t           *cl;
    ngx_http_request_t    *r;
    ngx_http_rlm_ctx_t    *ctx;
    ngx_http_rlm_peer_t   *p;

    r = ev->request;

    ctx = ngx_http_rlm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->has_sandbox_time = 1;

    (void) clock_gettime(CLOCK_MONOTONIC, &ev->started);

    ev->path.data = ngx_pnalloc(r->pool, NGX_HTTP_RLM_PATH_LEN);
    if (ev->path.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_rlm_session_copy_sandbox(ev->zone, ev->session, &ev->path,
                                      ev->sandbox, &ev->generation, &state,
                                      ev->reason);

    if (state == NGX_HTTP_RLM_SESSION_LOST) {
        return ngx_http_rlm_eval_lost(ev, "sandbox_lost",
                                      (char *) ev->reason);
    }

    if (ev->generation != ev->zone->sh->super.starts) {
        /* the manager was restarted and took its sandboxes with it */
        return ngx_http_rlm_eval_lost(ev, "sandbox_lost",
                                      "manager restarted");
    }

    p = ngx_http_rlm_peer_create(r->pool, r->connection->log, &ev->path);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p->timeout = ev->timeout;
    p->keepalive = !ev->context;
    p->frame_handler = ngx_http_rlm_eval_frame;
    p->done_handler = ngx_http_rlm_eval_peer_done;
    p->data = ev;

    cl = ngx_http_rlm_frame_encode(r->pool, ev->frame, ev->blob_len);
    if (cl == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cl->next = ev->blob;
    p->out = cl;

    ev->peer = p;
    ev->sent = 1;

    if (ngx_http_rlm_peer_start(p) != NGX_OK) {
        ev->peer = NULL;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the outcome may already be there: peer_done finalized then */

    return NGX_DONE;
}


static ngx_int_t
ngx_http_rlm_eval_frame(ngx_http_rlm_peer_t *p, json_t *msg)
{
    const char           *type;
    ngx_http_rlm_eval_t  *ev = p->data;

    type = json_string_value(json_object_get(msg, "type"));

    if (type && ngx_strcmp(type, "call") == 0 && !ev->context) {
        return ev->call_handler(ev, msg) == NGX_OK ? NGX_AGAIN : NGX_ERROR;
    }

    if (type && ngx_strcmp(type, "result") == 0) {
        ev->result = json_incref(msg);
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_ERR, p->log, 0,
                  "rlm: sandbox \"%s\" sent an unexpected frame",
                  ev->sandbox);

    return NGX_ERROR;
}


/*
 * The default engine: code asked for a model call and this location has
 * none, so the call fails in Python with a clear message.
 */

ngx_int_t
ngx_http_rlm_eval_default_call(ngx_http_rlm_eval_t *ev, json_t *call)
{
    json_t     *reply;
    ngx_int_t   rc;

    reply = json_pack("{s:s, s:O, s:b, s:s}", "op", "reply",
                      "id", json_object_get(call, "id")
                            ? json_object_get(call, "id") : json_null(),
                      "ok", 0,
                      "error", "model calls are not configured for this "
                               "location");
    if (reply == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_rlm_eval_reply(ev, reply);

    json_decref(reply);

    return rc;
}


/* sends the host's answer to a call frame; usable at any later time */

ngx_int_t
ngx_http_rlm_eval_reply(ngx_http_rlm_eval_t *ev, json_t *reply)
{
    ngx_chain_t  *cl;

    if (ev->peer == NULL || ev->peer->finished) {
        return NGX_DECLINED;
    }

    cl = ngx_http_rlm_frame_encode(ev->request->pool, reply, 0);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    return ngx_http_rlm_peer_send(ev->peer, cl);
}


/* the host-side deadline of the running cell, counted from now */

void
ngx_http_rlm_eval_extend(ngx_http_rlm_eval_t *ev, ngx_msec_t timeout)
{
    if (ev->peer && ev->peer->connection) {
        ngx_add_timer(ev->peer->connection->read, timeout);
    }
}


static void
ngx_http_rlm_eval_peer_done(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status)
{
    ngx_int_t             rc;
    ngx_http_rlm_eval_t  *ev = p->data;

    ev->cell_us = ngx_http_rlm_eval_elapsed_us(ev);
    ev->peer = NULL;

    (void) ngx_atomic_fetch_add(p->reused ? &ev->zone->sh->stats.conns_reused
                                          : &ev->zone->sh->stats.conns_new,
                                1);

    switch (status) {

    case NGX_HTTP_RLM_PEER_OK:
        rc = ngx_http_rlm_eval_respond(ev);
        break;

    case NGX_HTTP_RLM_PEER_UNREACHABLE:
    case NGX_HTTP_RLM_PEER_CLOSED:

        if (ngx_http_rlm_session_deleted(ev->zone, ev->session)) {
            /* DELETE released the sandbox under the running cell */
            rc = ngx_http_rlm_eval_lost(ev, "sandbox_lost",
                                        "session deleted");
            break;
        }

        if (status == NGX_HTTP_RLM_PEER_UNREACHABLE) {
            ev->sent = 0;
        }

        /* ask the manager why the sandbox is gone */

        if (ngx_http_rlm_eval_status(ev) == NGX_OK) {
            return;
        }

        rc = ngx_http_rlm_eval_lost(ev, "sandbox_lost", "lost");
        break;

    case NGX_HTTP_RLM_PEER_TIMEDOUT:
        ngx_log_error(NGX_LOG_ERR, ev->request->connection->log, 0,
                      "rlm: sandbox \"%s\" did not answer in %M ms",
                      ev->sandbox, ev->timeout);

        rc = ngx_http_rlm_eval_error(ev, NGX_HTTP_GATEWAY_TIME_OUT,
                                     "server_error", "sandbox_timeout",
                                     "the sandbox did not answer in time");
        ngx_http_rlm_eval_release(ev);
        break;

    default:
        rc = ngx_http_rlm_eval_error(ev, NGX_HTTP_BAD_GATEWAY,
                                     "server_error", "sandbox_error",
                                     "the sandbox broke the protocol");
        ngx_http_rlm_eval_release(ev);
        break;
    }

    ngx_http_rlm_eval_finalize(ev, rc);
}


static ngx_int_t
ngx_http_rlm_eval_status(ngx_http_rlm_eval_t *ev)
{
    json_t     *req;
    ngx_int_t   rc;

    req = json_pack("{s:s, s:s}", "op", "status", "sandbox",
                    (char *) ev->sandbox);
    if (req == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_rlm_control(ev->request->pool,
                              ev->request->connection->log, req,
                              NGX_HTTP_RLM_CONTROL_TIMEOUT,
                              ngx_http_rlm_eval_status_done, ev);
    json_decref(req);

    return rc;
}


/*
 * The channel closes as the sandbox dies, a moment before the manager
 * has reaped it and knows why: ask again a few times.
 */

static void
ngx_http_rlm_eval_status_retry(ngx_event_t *e)
{
    ngx_http_rlm_eval_t  *ev = e->data;

    if (ngx_http_rlm_eval_status(ev) != NGX_OK) {
        ngx_http_rlm_eval_finalize(ev,
            ngx_http_rlm_eval_lost(ev, "sandbox_lost", "lost"));
    }
}


static void
ngx_http_rlm_eval_status_done(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    const char           *reason, *cell;
    ngx_int_t             rc;
    ngx_http_rlm_eval_t  *ev = data;

    reason = NULL;

    if (reply && json_is_true(json_object_get(reply, "ok"))
        && json_is_true(json_object_get(reply, "alive"))
        && ev->status_tries++ < NGX_HTTP_RLM_STATUS_TRIES)
    {
        ev->wait_event.handler = ngx_http_rlm_eval_status_retry;
        ev->wait_event.data = ev;
        ev->wait_event.log = ev->request->connection->log;
        ngx_add_timer(&ev->wait_event, NGX_HTTP_RLM_STATUS_DELAY);
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

    cell = "sandbox_lost";

    if (ev->sent) {
        cell = (ngx_strcmp(reason, "oom") == 0) ? "oom" : "crashed";
    }

    rc = ngx_http_rlm_eval_lost(ev, cell, reason);

    ngx_http_rlm_eval_finalize(ev, rc);
}


/* the session has no sandbox any more: say so, as a cell result */

static ngx_int_t
ngx_http_rlm_eval_lost(ngx_http_rlm_eval_t *ev, const char *status,
    const char *why)
{
    u_char  msg[160];

    if (ngx_http_rlm_session_lost(ev->zone, ev->session, why)) {
        ngx_log_error(NGX_LOG_WARN, ev->request->connection->log, 0,
                      "rlm: session lost its sandbox \"%s\": %s",
                      ev->sandbox, why);
        ngx_http_rlm_metrics_death(why);
    }

    ngx_snprintf(msg, sizeof(msg) - 1, "the session's sandbox is gone (%s); "
                 "delete the session and create a new one%Z", why);

    ev->result = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s},"
                           " s:f, s:n, s:{}}",
                           "type", "result", "status", status,
                           "stdout", "", "stderr", "",
                           "error", "ename", "SandboxLost",
                           "evalue", (char *) msg, "traceback", "",
                           "duration_ms", 0.0, "answer", "state_delta");
    if (ev->result == NULL) {
        ngx_http_rlm_eval_release(ev);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ev->context) {
        ngx_http_rlm_eval_release(ev);
        return ngx_http_rlm_eval_error(ev, NGX_HTTP_CONFLICT,
                                       "invalid_request_error",
                                       "sandbox_lost", (char *) msg);
    }

    return ngx_http_rlm_eval_respond(ev);
}


static ngx_int_t
ngx_http_rlm_eval_respond(ngx_http_rlm_eval_t *ev)
{
    u_char                       hex[NGX_HTTP_RLM_ID_HEX];
    size_t                       bytes;
    json_t                      *out, *v;
    uint64_t                     cells;
    const char                  *status, *key;
    ngx_int_t                    rc;
    ngx_uint_t                   error;
    ngx_http_request_t          *r;
    ngx_http_rlm_ctx_t          *ctx;
    ngx_http_rlm_cell_status_e   st;

    r = ev->request;
    ctx = ngx_http_rlm_get_ctx(r);

    status = json_string_value(json_object_get(ev->result, "status"));
    if (status == NULL) {
        status = "error";
    }

    ngx_http_rlm_session_format_id(ev->session->id, hex);

    if (ev->context) {
        bytes = ev->blob_len;

        if (ngx_strcmp(status, "ok") != 0) {
            ngx_http_rlm_eval_release(ev);

            v = json_object_get(ev->result, "error");
            v = v ? json_object_get(v, "evalue") : NULL;

            return ngx_http_rlm_eval_error(ev, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_json",
                       json_is_string(v) ? json_string_value(v)
                                         : "the context could not be "
                                           "loaded");
        }

        (void) ngx_http_rlm_session_done(ev->zone, ev->session, 0, 0, bytes);
        ev->running = 0;
        ngx_http_rlm_eval_wake(ev->session);

        (void) ngx_atomic_fetch_add(&ev->zone->sh->stats.context_loads, 1);
        (void) ngx_atomic_fetch_add(&ev->zone->sh->stats.context_bytes,
                                    bytes);

        if (ev->done) {
            /* an engine reads ev->result itself */
            return NGX_OK;
        }

        out = json_pack("{s:s, s:s%, s:O?, s:I, s:O?}",
                        "object", "rlm.context",
                        "session", (char *) hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                        "name", json_object_get(ev->result, "name"),
                        "bytes", (json_int_t) bytes,
                        "kind", json_object_get(ev->result, "kind"));
        if (out == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, out);
        json_decref(out);
        return rc;
    }

    st = ngx_http_rlm_cell_status(status);
    error = (st != NGX_HTTP_RLM_CELL_OK);

    cells = ngx_http_rlm_session_done(ev->zone, ev->session, ev->cell_us,
                                      error, 0);
    ev->running = 0;
    ngx_http_rlm_eval_wake(ev->session);

    ngx_http_rlm_metrics_cell(st, ev->cell_us);

    if (ctx) {
        ctx->cell_status.data = (u_char *) ngx_http_rlm_cell_status_name(st);
        ctx->cell_status.len = ngx_strlen(ctx->cell_status.data);
    }

    if (ev->done) {
        return NGX_OK;
    }

    out = json_pack("{s:s, s:s%, s:I}", "object", "rlm.cell",
                    "session", (char *) hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                    "cell", (json_int_t) cells);
    if (out == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the sandbox's fields, in the API's order, with defaults */

    json_object_set_new(out, "status", json_string(status));

    key = "stdout";
    v = json_object_get(ev->result, key);
    json_object_set_new(out, key, v ? json_incref(v) : json_string(""));

    key = "stderr";
    v = json_object_get(ev->result, key);
    json_object_set_new(out, key, v ? json_incref(v) : json_string(""));

    v = json_object_get(ev->result, "error");
    json_object_set_new(out, "error", v ? json_incref(v) : json_null());

    v = json_object_get(ev->result, "duration_ms");
    json_object_set_new(out, "duration_ms",
                        v ? json_incref(v) : json_real(0));

    v = json_object_get(ev->result, "answer");
    json_object_set_new(out, "answer", v ? json_incref(v) : json_null());

    v = json_object_get(ev->result, "state_delta");
    if (v) {
        json_object_set(out, "state_delta", v);
    }

    rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, out);
    json_decref(out);

    return rc;
}


/* gives the session's turn back after a failure */

static void
ngx_http_rlm_eval_release(ngx_http_rlm_eval_t *ev)
{
    if (ev->running) {
        ev->running = 0;
        (void) ngx_http_rlm_session_done(ev->zone, ev->session, ev->cell_us,
                                         1, 0);
        ngx_http_rlm_eval_wake(ev->session);
    }
}


static void
ngx_http_rlm_eval_finalize(ngx_http_rlm_eval_t *ev, ngx_int_t rc)
{
    ngx_http_rlm_ctx_t  *ctx;

    if (ev->finalized) {
        return;
    }

    ev->finalized = 1;

    ngx_http_rlm_eval_release(ev);

    ctx = ngx_http_rlm_get_ctx(ev->request);
    if (ctx && ctx->has_sandbox_time) {
        /* an engine's cells add up over the completion */
        ctx->sandbox_us = (ev->done ? ctx->sandbox_us : 0)
                          + (ev->cell_us ? ev->cell_us
                                         : ngx_http_rlm_eval_elapsed_us(ev));
    }

    /*
     * A subrequest's pool is its parent's: give the session back now,
     * not when a Lua handler that ran a thousand cells ends.
     */

    if (ev->waiter == NULL && ev->peer == NULL && ev->referenced) {
        ev->referenced = 0;
        ngx_http_rlm_session_put(ev->zone, ev->session);
    }

    if (ev->done) {
        ev->done(ev, rc);
        return;
    }

    ngx_http_rlm_finalize(ev->request, rc);
}


/*
 * An engine's cell or context load.  The engine filled ev (request, zone,
 * session it holds a reference on, frame, blob, timeout, done, data and
 * maybe call_handler and engine_data); done() runs exactly once, possibly
 * before this returns: rc NGX_OK with ev->result (the sandbox's own
 * result frame; a lost sandbox's is made up here), or an error: rc is an
 * HTTP status and ev->err_code/err_message say why.
 * ngx_http_rlm_eval_cancel() gives everything back early; the request's
 * pool does so anyway when it goes.
 */

ngx_int_t
ngx_http_rlm_eval_start(ngx_http_rlm_eval_t *ev)
{
    ngx_int_t            rc;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(ev->request->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_rlm_eval_cleanup;
    cln->data = ev;

    if (ev->call_handler == NULL) {
        ev->call_handler = ngx_http_rlm_call_handler;
    }

    rc = ngx_http_rlm_eval_enter(ev);

    if (rc != NGX_DONE) {
        ngx_http_rlm_eval_finalize(ev, rc);
    }

    return NGX_OK;
}


void
ngx_http_rlm_eval_cancel(ngx_http_rlm_eval_t *ev)
{
    ngx_http_rlm_eval_cleanup(ev);
    ev->finalized = 1;
}


static ngx_int_t
ngx_http_rlm_eval_error(ngx_http_rlm_eval_t *ev, ngx_uint_t status,
    const char *type, const char *code, const char *message)
{
    size_t  len;

    if (ev->done == NULL) {
        return ngx_http_rlm_send_error(ev->request, status, type, code,
                                       message);
    }

    ev->err_code = code;

    len = ngx_strlen(message);
    ev->err_message = ngx_pnalloc(ev->request->pool, len + 1);

    if (ev->err_message) {
        ngx_memcpy(ev->err_message, message, len + 1);
    }

    return status;
}


static void
ngx_http_rlm_eval_cleanup(void *data)
{
    ngx_http_rlm_eval_t  *ev = data;

    if (ev->wait_event.timer_set) {
        ngx_del_timer(&ev->wait_event);
    }

    if (ev->wait_event.posted) {
        ngx_delete_posted_event(&ev->wait_event);
    }

    if (ev->peer) {
        ev->peer->done_handler = NULL;
        ngx_http_rlm_peer_close(ev->peer);
        ev->peer = NULL;

        /*
         * An engine's cell still running is abandoned (client gone,
         * deadline passed): stop the code, not just its channel.  The
         * channel is closed first: the sandbox checks that the cell it
         * interrupts is the one whose connection went away.
         */

        if (ev->done && ev->sent && !ev->context) {
            ngx_http_rlm_control_interrupt(ngx_cycle->log, ev->sandbox);
        }
    }

    if (ev->waiter) {
        ngx_queue_remove(&ev->wait_link);
        ngx_http_rlm_session_leave(ev->zone, ev->session, ev->waiter);
        ev->waiter = NULL;

        /* we may have been the head: the next one may go now */
        ngx_http_rlm_eval_wake(ev->session);
    }

    ngx_http_rlm_eval_release(ev);

    if (ev->referenced) {
        ev->referenced = 0;
        ngx_http_rlm_session_put(ev->zone, ev->session);
    }

    json_decref(ev->frame);
    json_decref(ev->result);
    ev->frame = NULL;
    ev->result = NULL;
}


static ngx_uint_t
ngx_http_rlm_eval_elapsed_us(ngx_http_rlm_eval_t *ev)
{
    struct timespec  now;
    int64_t          us;

    if (ev->started.tv_sec == 0 && ev->started.tv_nsec == 0) {
        return 0;
    }

    (void) clock_gettime(CLOCK_MONOTONIC, &now);

    us = (int64_t) (now.tv_sec - ev->started.tv_sec) * 1000000
         + (now.tv_nsec - ev->started.tv_nsec) / 1000;

    return us > 0 ? (ngx_uint_t) us : 0;
}


/* no Content-Type, or application/json, or application/...+json */

static ngx_int_t
ngx_http_rlm_json_content_type(ngx_http_request_t *r)
{
    u_char     *p, *end;
    ngx_str_t  *ct;

    if (r->headers_in.content_type == NULL) {
        return NGX_OK;
    }

    ct = &r->headers_in.content_type->value;

    end = ngx_strlchr(ct->data, ct->data + ct->len, ';');
    if (end == NULL) {
        end = ct->data + ct->len;
    }

    while (end > ct->data && end[-1] == ' ') {
        end--;
    }

    p = ct->data;

    if ((size_t) (end - p) == sizeof("application/json") - 1
        && ngx_strncasecmp(p, (u_char *) "application/json",
                           sizeof("application/json") - 1) == 0)
    {
        return NGX_OK;
    }

    if (end - p > 17
        && ngx_strncasecmp(p, (u_char *) "application/", 12) == 0
        && ngx_strncasecmp(end - 5, (u_char *) "+json", 5) == 0)
    {
        return NGX_OK;
    }

    return NGX_DECLINED;
}
