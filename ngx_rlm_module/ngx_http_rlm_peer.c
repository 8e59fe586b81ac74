
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * A non-blocking exchange of frames with a unix socket peer (the
 * manager's control socket or a sandbox's channel), driven by the
 * worker's event loop.  The peer connects, writes its queued frames
 * (memory and file buffers, so a context body on disk goes out with
 * sendfile), and hands every frame it reads to frame_handler until that
 * says the exchange is over.  done_handler runs exactly once.
 *
 * A peer with keepalive set leaves its socket, after a clean exchange,
 * in a small per-worker cache of idle connections keyed by socket path;
 * the next peer to that path takes it instead of connecting.  An idle
 * socket that becomes readable (the sandbox closed it or died) is
 * dropped from the cache.
 */


#include <sys/un.h>

#include "ngx_http_rlm_module.h"


#define NGX_HTTP_RLM_PEER_BUF        16384
#define NGX_HTTP_RLM_PEER_RETRY      5
#define NGX_HTTP_RLM_IDLE_MAX        256


typedef struct {
    ngx_queue_t                 queue;
    ngx_connection_t           *connection;
    size_t                      len;
    u_char                      path[NGX_HTTP_RLM_PATH_LEN];
} ngx_http_rlm_idle_t;


static ngx_int_t ngx_http_rlm_peer_connect(ngx_http_rlm_peer_t *p);
static void ngx_http_rlm_peer_retry_handler(ngx_event_t *ev);
static void ngx_http_rlm_peer_write_handler(ngx_event_t *wev);
static void ngx_http_rlm_peer_read_handler(ngx_event_t *rev);
static ngx_int_t ngx_http_rlm_peer_flush(ngx_http_rlm_peer_t *p);
static void ngx_http_rlm_peer_finish(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status);
static void ngx_http_rlm_peer_cleanup(void *data);
static ngx_int_t ngx_http_rlm_peer_take(ngx_http_rlm_peer_t *p);
static void ngx_http_rlm_peer_keep(ngx_http_rlm_peer_t *p);
static void ngx_http_rlm_idle_drop(ngx_http_rlm_idle_t *idle);
static ngx_int_t ngx_http_rlm_idle_alive(ngx_connection_t *c);
static void ngx_http_rlm_idle_handler(ngx_event_t *ev);
static void ngx_http_rlm_idle_init(void);
static ngx_int_t ngx_http_rlm_peer_connected(ngx_http_rlm_peer_t *p,
    ngx_int_t rc);


/* this worker's idle sandbox connections, most recently used first */
static ngx_http_rlm_idle_t  ngx_http_rlm_idle[NGX_HTTP_RLM_IDLE_MAX];
static ngx_queue_t          ngx_http_rlm_idle_used;
static ngx_queue_t          ngx_http_rlm_idle_free;
static ngx_uint_t           ngx_http_rlm_idle_n;


ngx_http_rlm_peer_t *
ngx_http_rlm_peer_create(ngx_pool_t *pool, ngx_log_t *log, ngx_str_t *path)
{
    ngx_pool_cleanup_t   *cln;
    ngx_http_rlm_peer_t  *p;

    p = ngx_pcalloc(pool, sizeof(ngx_http_rlm_peer_t));
    if (p == NULL) {
        return NULL;
    }

    p->pool = pool;
    p->log = log;
    p->path = *path;
    p->timeout = NGX_HTTP_RLM_CONTROL_TIMEOUT;

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    /* a peer never outlives its pool: its socket and timers go with it */

    cln->handler = ngx_http_rlm_peer_cleanup;
    cln->data = p;

    return p;
}


/*
 * Starts the exchange with whatever is queued in p->out.  Returns NGX_OK
 * when it is under way; the outcome always arrives through done_handler
 * except when NGX_ERROR is returned here.
 */

ngx_int_t
ngx_http_rlm_peer_start(ngx_http_rlm_peer_t *p)
{
    ngx_int_t  rc;

    p->connect_deadline = ngx_current_msec + p->timeout;

    if (p->keepalive && ngx_http_rlm_peer_take(p) == NGX_OK) {
        return NGX_OK;
    }

    rc = ngx_http_rlm_peer_connect(p);

    return ngx_http_rlm_peer_connected(p, rc);
}


/* what a connect attempt means for the exchange */

static ngx_int_t
ngx_http_rlm_peer_connected(ngx_http_rlm_peer_t *p, ngx_int_t rc)
{
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_UNREACHABLE);
        return NGX_OK;
    }

    if (rc == NGX_BUSY) {
        /* the listener's backlog is full; try again shortly */

        p->retry.handler = ngx_http_rlm_peer_retry_handler;
        p->retry.data = p;
        p->retry.log = p->log;
        ngx_add_timer(&p->retry, NGX_HTTP_RLM_PEER_RETRY);
        return NGX_OK;
    }

    return NGX_OK;
}


/* queues frames; they are written as soon as the socket takes them */

ngx_int_t
ngx_http_rlm_peer_send(ngx_http_rlm_peer_t *p, ngx_chain_t *cl)
{
    ngx_chain_t  **ll;

    for (ll = &p->out; *ll; ll = &(*ll)->next) { /* void */ }

    *ll = cl;

    if (p->connected && !p->finished) {
        return ngx_http_rlm_peer_flush(p);
    }

    return NGX_OK;
}


void
ngx_http_rlm_peer_close(ngx_http_rlm_peer_t *p)
{
    p->finished = 1;

    if (p->retry.timer_set) {
        ngx_del_timer(&p->retry);
    }

    if (p->connection) {
        ngx_close_connection(p->connection);
        p->connection = NULL;
    }

    if (p->in && p->in->start) {
        ngx_free(p->in->start);
        p->in->start = NULL;
    }

    ngx_http_rlm_frame_decoder_reset(&p->decoder);
}


static ngx_int_t
ngx_http_rlm_peer_connect(ngx_http_rlm_peer_t *p)
{
    int                  rc;
    ngx_err_t            err;
    ngx_socket_t         s;
    ngx_event_t         *rev, *wev;
    ngx_connection_t    *c;
    struct sockaddr_un   sun;

    if (p->path.len == 0 || p->path.len >= sizeof(sun.sun_path)) {
        return NGX_DECLINED;
    }

    ngx_memzero(&sun, sizeof(struct sockaddr_un));
    sun.sun_family = AF_UNIX;
    ngx_memcpy(sun.sun_path, p->path.data, p->path.len);

    s = ngx_socket(AF_UNIX, SOCK_STREAM, 0);
    if (s == (ngx_socket_t) -1) {
        ngx_log_error(NGX_LOG_ALERT, p->log, ngx_socket_errno,
                      ngx_socket_n " failed");
        return NGX_ERROR;
    }

    if (ngx_nonblocking(s) == -1) {
        ngx_log_error(NGX_LOG_ALERT, p->log, ngx_socket_errno,
                      ngx_nonblocking_n " failed");
        ngx_close_socket(s);
        return NGX_ERROR;
    }

    (void) fcntl(s, F_SETFD, FD_CLOEXEC);

    rc = connect(s, (struct sockaddr *) &sun, sizeof(struct sockaddr_un));

    if (rc == -1) {
        err = ngx_socket_errno;

        if (err == NGX_EAGAIN) {
            /* Linux says EAGAIN for a unix socket whose backlog is full */
            ngx_close_socket(s);
            return NGX_BUSY;
        }

        if (err != NGX_EINPROGRESS) {
            ngx_log_debug2(NGX_LOG_DEBUG_HTTP, p->log, err,
                           "rlm: connect() to %V failed (%d)", &p->path,
                           err);
            ngx_close_socket(s);
            return NGX_DECLINED;
        }
    }

    c = ngx_get_connection(s, p->log);
    if (c == NULL) {
        ngx_close_socket(s);
        return NGX_ERROR;
    }

    c->type = SOCK_STREAM;
    c->recv = ngx_recv;
    c->send = ngx_send;
    c->recv_chain = ngx_recv_chain;
    c->send_chain = ngx_send_chain;
    c->sendfile = 1;
    c->log_error = NGX_ERROR_ERR;
    c->pool = p->pool;
    c->data = p;

    c->tcp_nopush = NGX_TCP_NOPUSH_DISABLED;
    c->tcp_nodelay = NGX_TCP_NODELAY_DISABLED;

    rev = c->read;
    wev = c->write;
    rev->log = p->log;
    wev->log = p->log;
    rev->handler = ngx_http_rlm_peer_read_handler;
    wev->handler = ngx_http_rlm_peer_write_handler;

    c->number = ngx_atomic_fetch_add(ngx_connection_counter, 1);

    p->connection = c;

    if (ngx_add_conn) {
        if (ngx_add_conn(c) == NGX_ERROR) {
            return NGX_ERROR;
        }

    } else {
        if (ngx_add_event(rev, NGX_READ_EVENT, NGX_CLEAR_EVENT) != NGX_OK) {
            return NGX_ERROR;
        }

        if (ngx_add_event(wev, NGX_WRITE_EVENT, NGX_CLEAR_EVENT) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    ngx_add_timer(rev, p->timeout);

    if (rc == -1) {
        /* in progress: the write event says when it is done */
        return NGX_AGAIN;
    }

    p->connected = 1;
    wev->ready = 1;

    if (ngx_http_rlm_peer_flush(p) != NGX_OK) {
        return NGX_OK;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_peer_retry_handler(ngx_event_t *ev)
{
    ngx_int_t             rc;
    ngx_http_rlm_peer_t  *p;

    p = ev->data;

    if (p->finished) {
        return;
    }

    if ((ngx_msec_int_t) (ngx_current_msec - p->connect_deadline) >= 0) {
        ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_TIMEDOUT);
        return;
    }

    rc = ngx_http_rlm_peer_connect(p);

    switch (rc) {

    case NGX_BUSY:
        ngx_add_timer(&p->retry, NGX_HTTP_RLM_PEER_RETRY);
        return;

    case NGX_DECLINED:
        ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_UNREACHABLE);
        return;

    case NGX_ERROR:
        ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
        return;

    default:
        return;
    }
}


static void
ngx_http_rlm_peer_write_handler(ngx_event_t *wev)
{
    int                   err;
    socklen_t             len;
    ngx_connection_t     *c;
    ngx_http_rlm_peer_t  *p;

    c = wev->data;
    p = c->data;

    if (p->finished) {
        return;
    }

    if (!p->connected) {
        err = 0;
        len = sizeof(int);

        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len)
            == -1)
        {
            err = ngx_socket_errno;
        }

        if (err) {
            ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_UNREACHABLE);
            return;
        }

        p->connected = 1;
    }

    (void) ngx_http_rlm_peer_flush(p);
}


/* NGX_OK: written or waiting for the socket; NGX_ERROR: finished */

static ngx_int_t
ngx_http_rlm_peer_flush(ngx_http_rlm_peer_t *p)
{
    ngx_chain_t       *cl;
    ngx_connection_t  *c;

    c = p->connection;

    while (p->out) {

        /* drop links already written, send_chain skips empty buffers */

        if (ngx_buf_size(p->out->buf) == 0) {
            p->out = p->out->next;
            continue;
        }

        cl = c->send_chain(c, p->out, 0);

        if (cl == NGX_CHAIN_ERROR && p->reused && c->sent == p->sent_before) {
            /*
             * The cached socket was closed by the sandbox before it took
             * a byte of this exchange: connect afresh, as if never kept.
             */
            ngx_close_connection(c);
            p->connection = NULL;
            p->connected = 0;
            p->reused = 0;
            p->keepalive = 0;

            if (ngx_http_rlm_peer_connected(p, ngx_http_rlm_peer_connect(p))
                != NGX_OK)
            {
                ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
            }

            return p->finished ? NGX_ERROR : NGX_OK;
        }

        if (cl == NGX_CHAIN_ERROR) {
            ngx_http_rlm_peer_finish(p, c->read->eof || c->write->error
                                        ? NGX_HTTP_RLM_PEER_CLOSED
                                        : NGX_HTTP_RLM_PEER_ERROR);
            return NGX_ERROR;
        }

        p->out = cl;

        if (cl && !c->write->ready) {
            break;
        }
    }

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_peer_read_handler(ngx_event_t *rev)
{
    u_char               *pos;
    ssize_t               n;
    json_t               *msg;
    ngx_int_t             rc;
    json_error_t          jerr;
    ngx_connection_t     *c;
    ngx_http_rlm_peer_t  *p;

    c = rev->data;
    p = c->data;

    if (p->finished) {
        return;
    }

    if (rev->timedout) {
        ngx_log_error(NGX_LOG_ERR, p->log, NGX_ETIMEDOUT,
                      "rlm: %V timed out", &p->path);
        ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_TIMEDOUT);
        return;
    }

    if (p->in == NULL) {
        /*
         * Off the pool: a Lua handler may run a thousand cells as
         * subrequests of one request, all sharing its pool.
         */

        p->in = ngx_calloc_buf(p->pool);
        if (p->in == NULL) {
            ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
            return;
        }

        p->in->start = ngx_alloc(NGX_HTTP_RLM_PEER_BUF, p->log);
        if (p->in->start == NULL) {
            ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
            return;
        }

        p->in->end = p->in->start + NGX_HTTP_RLM_PEER_BUF;
    }

    for ( ;; ) {
        p->in->pos = p->in->start;
        p->in->last = p->in->start;

        n = c->recv(c, p->in->last, p->in->end - p->in->last);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == 0 || n == NGX_ERROR) {
            ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_CLOSED);
            return;
        }

        p->in->last += n;
        pos = p->in->pos;

        while (pos < p->in->last) {

            rc = ngx_http_rlm_frame_decode(&p->decoder, &pos, p->in->last,
                                           p->log);

            if (rc == NGX_AGAIN) {
                break;
            }

            if (rc == NGX_ERROR) {
                ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
                return;
            }

            msg = json_loadb((char *) p->decoder.json, p->decoder.json_len,
                             0, &jerr);

            ngx_http_rlm_frame_decoder_reset(&p->decoder);

            if (msg == NULL || !json_is_object(msg)) {
                ngx_log_error(NGX_LOG_ERR, p->log, 0,
                              "rlm: %V sent a frame that is not a JSON "
                              "object: %s", &p->path,
                              msg ? "not an object" : jerr.text);
                json_decref(msg);
                ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
                return;
            }

            rc = p->frame_handler(p, msg);
            json_decref(msg);

            if (p->finished) {
                return;
            }

            if (rc == NGX_OK) {
                if (p->keepalive && pos == p->in->last && p->out == NULL) {
                    ngx_http_rlm_peer_keep(p);
                }

                ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_OK);
                return;
            }

            if (rc == NGX_ERROR) {
                ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
                return;
            }
        }
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_http_rlm_peer_finish(p, NGX_HTTP_RLM_PEER_ERROR);
    }
}


static void
ngx_http_rlm_peer_finish(ngx_http_rlm_peer_t *p,
    ngx_http_rlm_peer_status_e status)
{
    if (p->finished) {
        return;
    }

    ngx_http_rlm_peer_close(p);

    if (p->done_handler) {
        p->done_handler(p, status);
    }
}


static void
ngx_http_rlm_peer_cleanup(void *data)
{
    ngx_http_rlm_peer_t  *p = data;

    /* the pool goes away: nothing may call back into it */

    p->done_handler = NULL;
    ngx_http_rlm_peer_close(p);
}


static void
ngx_http_rlm_idle_init(void)
{
    ngx_uint_t  i;

    if (ngx_http_rlm_idle_used.next) {
        return;
    }

    ngx_queue_init(&ngx_http_rlm_idle_used);
    ngx_queue_init(&ngx_http_rlm_idle_free);

    for (i = 0; i < NGX_HTTP_RLM_IDLE_MAX; i++) {
        ngx_queue_insert_tail(&ngx_http_rlm_idle_free,
                              &ngx_http_rlm_idle[i].queue);
    }
}


/* an idle socket to p's path, if the cache has one still open */

static ngx_int_t
ngx_http_rlm_peer_take(ngx_http_rlm_peer_t *p)
{
    ngx_queue_t          *q;
    ngx_connection_t     *c;
    ngx_http_rlm_idle_t  *idle;

    ngx_http_rlm_idle_init();

    for (q = ngx_queue_head(&ngx_http_rlm_idle_used);
         q != ngx_queue_sentinel(&ngx_http_rlm_idle_used);
         q = ngx_queue_next(q))
    {
        idle = ngx_queue_data(q, ngx_http_rlm_idle_t, queue);

        if (idle->len == p->path.len
            && ngx_memcmp(idle->path, p->path.data, p->path.len) == 0)
        {
            break;
        }
    }

    if (q == ngx_queue_sentinel(&ngx_http_rlm_idle_used)) {
        return NGX_DECLINED;
    }

    c = idle->connection;

    if (ngx_http_rlm_idle_alive(c) != NGX_OK) {
        ngx_http_rlm_idle_drop(idle);
        return NGX_DECLINED;
    }

    ngx_queue_remove(&idle->queue);
    ngx_queue_insert_head(&ngx_http_rlm_idle_free, &idle->queue);
    idle->connection = NULL;
    ngx_http_rlm_idle_n--;

    c->idle = 0;
    c->data = p;
    c->pool = p->pool;
    c->log = p->log;
    c->read->log = p->log;
    c->write->log = p->log;
    c->read->handler = ngx_http_rlm_peer_read_handler;
    c->write->handler = ngx_http_rlm_peer_write_handler;

    p->connection = c;
    p->connected = 1;
    p->reused = 1;
    p->sent_before = c->sent;

    ngx_add_timer(c->read, p->timeout);

    c->write->ready = 1;

    (void) ngx_http_rlm_peer_flush(p);

    return NGX_OK;
}


/* the exchange ended cleanly: cache the socket instead of closing it */

static void
ngx_http_rlm_peer_keep(ngx_http_rlm_peer_t *p)
{
    ngx_queue_t          *q;
    ngx_connection_t     *c;
    ngx_http_rlm_idle_t  *idle;

    /*
     * a worker that is leaving closed its idle connections already
     * (ngx_close_idle_connections()) and must not gather new ones, as
     * nginx's own upstream keepalive cache does not
     */

    if (ngx_cycle->connection_n < 4 || ngx_exiting || ngx_terminate) {
        return;
    }

    ngx_http_rlm_idle_init();

    c = p->connection;

    if (ngx_queue_empty(&ngx_http_rlm_idle_free)
        || ngx_http_rlm_idle_n >= ngx_cycle->connection_n / 4)
    {
        /*
         * full, or a quarter of worker_connections already idles here:
         * the least recently used one goes
         */
        q = ngx_queue_last(&ngx_http_rlm_idle_used);
        ngx_http_rlm_idle_drop(ngx_queue_data(q, ngx_http_rlm_idle_t, queue));
    }

    q = ngx_queue_head(&ngx_http_rlm_idle_free);
    ngx_queue_remove(q);
    idle = ngx_queue_data(q, ngx_http_rlm_idle_t, queue);

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    idle->connection = c;
    idle->len = p->path.len;
    ngx_memcpy(idle->path, p->path.data, p->path.len);

    c->idle = 1;
    c->data = idle;
    c->pool = NULL;
    c->log = ngx_cycle->log;
    c->read->log = ngx_cycle->log;
    c->write->log = ngx_cycle->log;
    c->read->handler = ngx_http_rlm_idle_handler;
    c->write->handler = ngx_http_rlm_idle_handler;

    ngx_queue_insert_head(&ngx_http_rlm_idle_used, &idle->queue);
    ngx_http_rlm_idle_n++;

    p->connection = NULL;
}


/* at worker exit: every cached connection is closed */

void
ngx_http_rlm_peer_close_idle(void)
{
    ngx_queue_t  *q;

    if (ngx_http_rlm_idle_used.next == NULL) {
        return;
    }

    while (!ngx_queue_empty(&ngx_http_rlm_idle_used)) {
        q = ngx_queue_head(&ngx_http_rlm_idle_used);
        ngx_http_rlm_idle_drop(ngx_queue_data(q, ngx_http_rlm_idle_t, queue));
    }
}


static void
ngx_http_rlm_idle_drop(ngx_http_rlm_idle_t *idle)
{
    ngx_queue_remove(&idle->queue);
    ngx_queue_insert_tail(&ngx_http_rlm_idle_free, &idle->queue);
    ngx_http_rlm_idle_n--;

    if (idle->connection) {
        ngx_close_connection(idle->connection);
        idle->connection = NULL;
    }
}


/* NGX_OK: nothing to read on an idle socket, so the sandbox still has it */

static ngx_int_t
ngx_http_rlm_idle_alive(ngx_connection_t *c)
{
    u_char   buf;
    ssize_t  n;

    if (c->close || c->read->eof || c->read->error) {
        return NGX_DECLINED;
    }

    n = recv(c->fd, &buf, 1, MSG_PEEK);

    if (n == -1 && ngx_socket_errno == NGX_EAGAIN) {
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/* an event on an idle socket: end of file, or the worker is leaving */

static void
ngx_http_rlm_idle_handler(ngx_event_t *ev)
{
    ngx_connection_t     *c;
    ngx_http_rlm_idle_t  *idle;

    c = ev->data;
    idle = c->data;

    if (!c->close && !ev->write && ngx_http_rlm_idle_alive(c) == NGX_OK) {
        return;
    }

    if (ev->write && !c->close) {
        return;
    }

    ngx_http_rlm_idle_drop(idle);
}
