
/*
 * ngx_rlm: libcurl's multi interface driven by the nginx event loop.
 *
 * libcurl tells us which sockets it wants watched (socket callback) and
 * when it next needs a timeout (timer callback); we tell it what happened
 * with curl_multi_socket_action() and collect finished transfers with
 * curl_multi_info_read() after every call.  Nothing here blocks.
 *
 * Level-triggered events.  nginx registers its own sockets edge-triggered
 * (EPOLLET, EV_CLEAR), which suits code that reads until EAGAIN.  libcurl
 * does not promise that: it may read one buffer and return with data still
 * queued in the kernel, and an edge-triggered registration would then never
 * fire again for that data.  So every curl socket is added with
 * NGX_LEVEL_EVENT (epoll without EPOLLET, kqueue without EV_CLEAR; select
 * and poll are level-triggered anyway): the event keeps firing while data
 * is pending, and libcurl, which asks only for what it needs, switches
 * write interest off as soon as it has nothing to send.  The same flag is
 * passed when one direction is deleted, because epoll rewrites the whole
 * registration of the descriptor.  Event ports (Solaris, one-shot) are not
 * supported.
 *
 * Descriptors.  CURL_POLL_REMOVE cannot be the moment nginx lets go of a
 * socket: libcurl may close a socket first and report its removal
 * afterwards, and epoll_ctl() then fails with EBADF on the closed
 * descriptor (an alert for each of hundreds of calls cancelled at once),
 * or worse, acts on another socket that got the same number.  So sockets
 * are opened by our open socket callback, which makes the nginx
 * connection together with the descriptor, and closed by our close socket
 * callback, which unwatches the descriptor while it is still open and
 * closes both with ngx_close_connection(); CURL_POLL_REMOVE only stops
 * watching.  A connection lives as long as its socket, in libcurl's
 * keep-alive cache too.
 *
 * libcurl does not always call the close callback: 7.88 closes sockets
 * that are still connecting (a transfer removed or timed out before its
 * connect completed) itself, and reports CURL_POLL_REMOVE after the close.
 * The kernel has then dropped the epoll registration with the descriptor,
 * and nginx's records of it must be updated without a system call on the
 * number.  That is why everything is looked up by descriptor in a table
 * of this worker, never through a pointer libcurl keeps, and why an entry
 * is trusted only while fstat() finds the same socket (inode) under its
 * number.  Sockets libcurl makes without the open callback (the threaded
 * resolver's wake-up pair) get a connection while they are watched, given
 * back without closing.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_rlm_curl.h"


/* what the worker knows about one descriptor of libcurl's */

typedef struct {
    ngx_connection_t           *connection;
    ngx_file_uniq_t             uniq;       /* which socket has the number */
    unsigned                    owned:1;    /* opened here, closed here */
    unsigned                    watched:1;
} ngx_http_rlm_curl_sock_t;


typedef struct {
    CURLM                      *multi;
    ngx_event_t                 timer;
    ngx_queue_t                 jobs;
    ngx_log_t                  *log;
    ngx_http_rlm_curl_sock_t   *socks;      /* indexed by descriptor */
    ngx_uint_t                  nsocks;
    ngx_http_rlm_curl_stats_t   stats;
} ngx_http_rlm_curl_worker_t;


static int ngx_http_rlm_curl_socket_cb(CURL *easy, curl_socket_t s, int what,
    void *userp, void *socketp);
static curl_socket_t ngx_http_rlm_curl_open_cb(void *clientp,
    curlsocktype purpose, struct curl_sockaddr *addr);
static int ngx_http_rlm_curl_close_cb(void *clientp, curl_socket_t s);
static ngx_http_rlm_curl_sock_t *ngx_http_rlm_curl_sock(
    ngx_http_rlm_curl_worker_t *w, curl_socket_t s, ngx_uint_t create);
static ngx_http_rlm_curl_sock_t *ngx_http_rlm_curl_lookup(
    ngx_http_rlm_curl_worker_t *w, curl_socket_t s);
static ngx_int_t ngx_http_rlm_curl_connection(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk, curl_socket_t s, ngx_uint_t owned);
static ngx_uint_t ngx_http_rlm_curl_same(ngx_http_rlm_curl_sock_t *sk,
    curl_socket_t s);
static void ngx_http_rlm_curl_sock_gone(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk);
static void ngx_http_rlm_curl_forget(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk, ngx_uint_t closed);
static void ngx_http_rlm_curl_close(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk);
static int ngx_http_rlm_curl_timer_cb(CURLM *multi, long timeout_ms,
    void *userp);
static void ngx_http_rlm_curl_event_handler(ngx_event_t *ev);
static void ngx_http_rlm_curl_timer_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_rlm_curl_watch(ngx_event_t *ev, ngx_int_t event,
    ngx_uint_t on);
static void ngx_http_rlm_curl_unwatch(ngx_connection_t *c);
static void ngx_http_rlm_curl_collect(void);


/* per worker: set up in init_process, so never shared between processes */
static ngx_http_rlm_curl_worker_t  *ngx_http_rlm_curl_worker;


ngx_int_t
ngx_http_rlm_curl_init_process(ngx_cycle_t *cycle)
{
    ngx_http_rlm_curl_worker_t  *w;

    if (ngx_http_rlm_curl_worker != NULL) {
        return NGX_OK;
    }

    if (ngx_event_flags & NGX_USE_EVENTPORT_EVENT) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "rlm: model calls do not support event ports, "
                      "use the \"poll\" or \"select\" method");
        return NGX_ERROR;
    }

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "rlm: curl_global_init() failed");
        return NGX_ERROR;
    }

    w = ngx_pcalloc(cycle->pool, sizeof(ngx_http_rlm_curl_worker_t));
    if (w == NULL) {
        return NGX_ERROR;
    }

    w->multi = curl_multi_init();
    if (w->multi == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "rlm: curl_multi_init() failed");
        return NGX_ERROR;
    }

    w->log = cycle->log;
    ngx_queue_init(&w->jobs);

    w->timer.handler = ngx_http_rlm_curl_timer_handler;
    w->timer.log = cycle->log;
    w->timer.data = w;

    curl_multi_setopt(w->multi, CURLMOPT_SOCKETFUNCTION,
                      ngx_http_rlm_curl_socket_cb);
    curl_multi_setopt(w->multi, CURLMOPT_SOCKETDATA, w);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERFUNCTION,
                      ngx_http_rlm_curl_timer_cb);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERDATA, w);

    /*
     * Idle connections stay in the multi's cache for keep-alive reuse by
     * later calls to the same provider; the cache may grow with the
     * number of concurrent calls.
     */
    curl_multi_setopt(w->multi, CURLMOPT_MAXCONNECTS, 256L);

    ngx_http_rlm_curl_worker = w;

    return NGX_OK;
}


void
ngx_http_rlm_curl_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                   i;
    ngx_queue_t                 *q;
    ngx_http_rlm_curl_sock_t    *sk;
    ngx_http_rlm_curl_job_t     *job;
    ngx_http_rlm_curl_worker_t  *w;

    w = ngx_http_rlm_curl_worker;
    if (w == NULL) {
        return;
    }

    /* requests still waiting are being torn down with the worker */

    while (!ngx_queue_empty(&w->jobs)) {
        q = ngx_queue_head(&w->jobs);
        job = ngx_queue_data(q, ngx_http_rlm_curl_job_t, queue);
        ngx_http_rlm_curl_cancel(job);
    }

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    /*
     * libcurl closes its cached connections through the close socket
     * callback, which closes their nginx connections: nginx would
     * otherwise complain about sockets left open at exit.
     */
    curl_multi_cleanup(w->multi);
    curl_global_cleanup();

    /* anything libcurl did not close is closed here */

    for (i = 0; i < w->nsocks; i++) {
        sk = &w->socks[i];

        if (sk->connection == NULL) {
            continue;
        }

        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                       "rlm: curl socket %ui left at exit", i);

        if (!ngx_http_rlm_curl_same(sk, i)) {
            ngx_http_rlm_curl_forget(w, sk, 1);

        } else if (sk->owned) {
            ngx_http_rlm_curl_close(w, sk);

        } else {
            ngx_http_rlm_curl_forget(w, sk, 0);
        }
    }

    ngx_free(w->socks);
    w->socks = NULL;
    w->nsocks = 0;

    ngx_http_rlm_curl_worker = NULL;
}


ngx_int_t
ngx_http_rlm_curl_start(ngx_http_rlm_curl_job_t *job)
{
    CURLMcode                    rc;
    ngx_http_rlm_curl_worker_t  *w;

    w = ngx_http_rlm_curl_worker;
    if (w == NULL || job->active) {
        return NGX_ERROR;
    }

    curl_easy_setopt(job->easy, CURLOPT_PRIVATE, job);

    /* no SIGALRM-based DNS timeouts in a process with nginx's handlers */
    curl_easy_setopt(job->easy, CURLOPT_NOSIGNAL, 1L);

    /*
     * libcurl keeps these in the connection, which may outlive the easy
     * handle in the cache: the data is the worker's, not the job's.
     */
    curl_easy_setopt(job->easy, CURLOPT_OPENSOCKETFUNCTION,
                     ngx_http_rlm_curl_open_cb);
    curl_easy_setopt(job->easy, CURLOPT_OPENSOCKETDATA, w);
    curl_easy_setopt(job->easy, CURLOPT_CLOSESOCKETFUNCTION,
                     ngx_http_rlm_curl_close_cb);
    curl_easy_setopt(job->easy, CURLOPT_CLOSESOCKETDATA, w);

    /* counted first: the timer callback below looks at it */
    w->stats.active++;

    rc = curl_multi_add_handle(w->multi, job->easy);
    if (rc != CURLM_OK) {
        w->stats.active--;
        ngx_log_error(NGX_LOG_ERR, job->log, 0,
                      "rlm: curl_multi_add_handle() failed: %s",
                      curl_multi_strerror(rc));
        return NGX_ERROR;
    }

    /* libcurl now asks for a 0 ms timeout: the transfer starts from there */

    job->active = 1;
    ngx_queue_insert_tail(&w->jobs, &job->queue);

    w->stats.started++;

    return NGX_OK;
}


void
ngx_http_rlm_curl_cancel(ngx_http_rlm_curl_job_t *job)
{
    ngx_http_rlm_curl_worker_t  *w;

    w = ngx_http_rlm_curl_worker;
    if (w == NULL || !job->active) {
        return;
    }

    /* may close the transfer's sockets and report CURL_POLL_REMOVE */
    curl_multi_remove_handle(w->multi, job->easy);

    job->active = 0;
    ngx_queue_remove(&job->queue);

    w->stats.active--;
    w->stats.cancelled++;
}


ngx_http_rlm_curl_stats_t *
ngx_http_rlm_curl_stats(void)
{
    static ngx_http_rlm_curl_stats_t  none;

    if (ngx_http_rlm_curl_worker == NULL) {
        return &none;
    }

    return &ngx_http_rlm_curl_worker->stats;
}


static int
ngx_http_rlm_curl_socket_cb(CURL *easy, curl_socket_t s, int what,
    void *userp, void *socketp)
{
    ngx_http_rlm_curl_worker_t *w = userp;

    ngx_connection_t          *c;
    ngx_http_rlm_curl_sock_t  *sk;

    sk = ngx_http_rlm_curl_lookup(w, s);

    if (what == CURL_POLL_REMOVE) {

        /*
         * libcurl stops using the socket: it parks it in its cache, or is
         * about to close it, or has closed it already, in which case the
         * lookup found nothing left to do.
         */

        if (sk == NULL) {
            return 0;
        }

        if (!sk->owned) {
            ngx_http_rlm_curl_forget(w, sk, 0);
            return 0;
        }

        ngx_http_rlm_curl_unwatch(sk->connection);

        if (sk->watched) {
            sk->watched = 0;
            w->stats.sockets--;
        }

        return 0;
    }

    if (sk == NULL) {
        /* not opened by the open callback: a socket of libcurl's own */

        sk = ngx_http_rlm_curl_sock(w, s, 1);

        if (sk == NULL
            || ngx_http_rlm_curl_connection(w, sk, s, 0) != NGX_OK)
        {
            return -1;
        }
    }

    c = sk->connection;

    if (!sk->watched) {
        sk->watched = 1;
        w->stats.sockets++;
    }

    if (ngx_http_rlm_curl_watch(c->read, NGX_READ_EVENT,
                                what & CURL_POLL_IN)
        != NGX_OK
        || ngx_http_rlm_curl_watch(c->write, NGX_WRITE_EVENT,
                                   what & CURL_POLL_OUT)
           != NGX_OK)
    {
        return -1;
    }

    return 0;
}


static curl_socket_t
ngx_http_rlm_curl_open_cb(void *clientp, curlsocktype purpose,
    struct curl_sockaddr *addr)
{
    ngx_http_rlm_curl_worker_t *w = clientp;

    ngx_socket_t               s;
    ngx_http_rlm_curl_sock_t  *sk;

    s = ngx_socket(addr->family, addr->socktype, addr->protocol);

    if (s == (ngx_socket_t) -1) {
        ngx_log_error(NGX_LOG_ALERT, w->log, ngx_socket_errno,
                      "rlm: socket() failed");
        return CURL_SOCKET_BAD;
    }

    sk = ngx_http_rlm_curl_sock(w, s, 1);
    if (sk == NULL) {
        goto failed;
    }

    if (sk->connection) {
        /* the number was free: whatever had it is gone, unannounced */
        ngx_http_rlm_curl_forget(w, sk, 1);
    }

    if (ngx_http_rlm_curl_connection(w, sk, s, 1) != NGX_OK) {
        goto failed;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, w->log, 0,
                   "rlm: curl socket %d opened", s);

    return s;

failed:

    if (ngx_close_socket(s) == -1) {
        ngx_log_error(NGX_LOG_ALERT, w->log, ngx_socket_errno,
                      ngx_close_socket_n " failed");
    }

    return CURL_SOCKET_BAD;
}


static int
ngx_http_rlm_curl_close_cb(void *clientp, curl_socket_t s)
{
    ngx_http_rlm_curl_worker_t *w = clientp;

    ngx_http_rlm_curl_sock_t  *sk;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, w->log, 0,
                   "rlm: curl socket %d closed", s);

    /* the number is open, and libcurl opens its sockets through us */

    sk = ngx_http_rlm_curl_sock(w, s, 0);

    if (sk != NULL && sk->connection != NULL && sk->owned) {
        ngx_http_rlm_curl_close(w, sk);
        return 0;
    }

    /* not one of ours: nothing in nginx may refer to it any more */

    if (sk != NULL && sk->connection != NULL) {
        ngx_http_rlm_curl_forget(w, sk, 0);
    }

    if (ngx_close_socket(s) == -1) {
        ngx_log_error(NGX_LOG_ALERT, w->log, ngx_socket_errno,
                      ngx_close_socket_n " %d failed", s);
        return 1;
    }

    return 0;
}


/* the table entry of descriptor s, made room for if create is set */

static ngx_http_rlm_curl_sock_t *
ngx_http_rlm_curl_sock(ngx_http_rlm_curl_worker_t *w, curl_socket_t s,
    ngx_uint_t create)
{
    ngx_uint_t                 n;
    ngx_http_rlm_curl_sock_t  *socks;

    if (s < 0) {
        return NULL;
    }

    if ((ngx_uint_t) s < w->nsocks) {
        return &w->socks[s];
    }

    if (!create) {
        return NULL;
    }

    n = ngx_max(w->nsocks * 2, 64);

    while (n <= (ngx_uint_t) s) {
        n *= 2;
    }

    socks = ngx_alloc(n * sizeof(ngx_http_rlm_curl_sock_t), w->log);
    if (socks == NULL) {
        return NULL;
    }

    if (w->nsocks) {
        ngx_memcpy(socks, w->socks,
                   w->nsocks * sizeof(ngx_http_rlm_curl_sock_t));
    }

    ngx_memzero(&socks[w->nsocks],
                (n - w->nsocks) * sizeof(ngx_http_rlm_curl_sock_t));

    ngx_free(w->socks);

    w->socks = socks;
    w->nsocks = n;

    return &w->socks[s];
}


/*
 * The entry of descriptor s, if it has a connection and the descriptor is
 * still the socket the connection was made for; the connection of a
 * socket closed unannounced is given back on the way.
 */

static ngx_http_rlm_curl_sock_t *
ngx_http_rlm_curl_lookup(ngx_http_rlm_curl_worker_t *w, curl_socket_t s)
{
    ngx_http_rlm_curl_sock_t  *sk;

    sk = ngx_http_rlm_curl_sock(w, s, 0);

    if (sk == NULL || sk->connection == NULL) {
        return NULL;
    }

    if (!ngx_http_rlm_curl_same(sk, s)) {
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, w->log, 0,
                       "rlm: curl socket %d was closed unannounced", s);

        ngx_http_rlm_curl_forget(w, sk, 1);
        return NULL;
    }

    return sk;
}


static ngx_int_t
ngx_http_rlm_curl_connection(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk, curl_socket_t s, ngx_uint_t owned)
{
    ngx_file_info_t    fi;
    ngx_connection_t  *c;

    if (ngx_fd_info(s, &fi) == -1) {
        ngx_log_error(NGX_LOG_ALERT, w->log, ngx_errno,
                      ngx_fd_info_n " %d failed", s);
        return NGX_ERROR;
    }

    c = ngx_get_connection(s, w->log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = w;
    c->read->handler = ngx_http_rlm_curl_event_handler;
    c->write->handler = ngx_http_rlm_curl_event_handler;
    c->read->log = w->log;
    c->write->log = w->log;

    sk->connection = c;
    sk->uniq = ngx_file_uniq(&fi);
    sk->owned = owned;
    sk->watched = 0;

    w->stats.connections++;

    return NGX_OK;
}


/* whether descriptor s is still the socket its entry was made for */

static ngx_uint_t
ngx_http_rlm_curl_same(ngx_http_rlm_curl_sock_t *sk, curl_socket_t s)
{
    ngx_file_info_t  fi;

    if (ngx_fd_info(s, &fi) == -1) {
        return 0;
    }

    return ngx_file_uniq(&fi) == sk->uniq;
}


/*
 * Gives back the connection of a descriptor that is not ours to close:
 * one of libcurl's own, or one already closed ("closed"), whose events
 * the kernel has dropped; NGX_CLOSE_EVENT updates nginx's records of them
 * without a system call on the number.
 */

static void
ngx_http_rlm_curl_forget(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk, ngx_uint_t closed)
{
    ngx_connection_t  *c;

    c = sk->connection;

    if (closed) {
        if (c->read->active) {
            ngx_del_event(c->read, NGX_READ_EVENT, NGX_CLOSE_EVENT);
        }

        if (c->write->active) {
            ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_CLOSE_EVENT);
        }
    }

    ngx_http_rlm_curl_unwatch(c);

    /*
     * ngx_free_connection() keeps the descriptor; nginx's exit check looks
     * for connections with fd != -1, so mark this one as unused, after
     * the free, which needs the number for select's and poll's tables.
     */
    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;

    ngx_http_rlm_curl_sock_gone(w, sk);
}


/* closes one of our sockets: unwatched first, while it is still open */

static void
ngx_http_rlm_curl_close(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk)
{
    ngx_http_rlm_curl_unwatch(sk->connection);

    ngx_close_connection(sk->connection);

    ngx_http_rlm_curl_sock_gone(w, sk);
}


/* the books of a socket whose connection was just given back */

static void
ngx_http_rlm_curl_sock_gone(ngx_http_rlm_curl_worker_t *w,
    ngx_http_rlm_curl_sock_t *sk)
{
    if (sk->watched) {
        w->stats.sockets--;
    }

    w->stats.connections--;

    sk->connection = NULL;
    sk->owned = 0;
    sk->watched = 0;
}


static ngx_int_t
ngx_http_rlm_curl_watch(ngx_event_t *ev, ngx_int_t event, ngx_uint_t on)
{
    if (on && !ev->active) {
        return ngx_add_event(ev, event, NGX_LEVEL_EVENT);
    }

    if (!on && ev->active) {
        return ngx_del_event(ev, event, NGX_LEVEL_EVENT);
    }

    return NGX_OK;
}


static void
ngx_http_rlm_curl_unwatch(ngx_connection_t *c)
{
    if (c->read->active) {
        ngx_del_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT);
    }

    if (c->write->active) {
        ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_LEVEL_EVENT);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }
}


static void
ngx_http_rlm_curl_event_handler(ngx_event_t *ev)
{
    int                          running;
    ngx_socket_t                 fd;
    ngx_connection_t            *c;
    ngx_http_rlm_curl_worker_t  *w;

    c = ev->data;
    w = c->data;

    /* the connection may be released during the call: keep what we need */
    fd = c->fd;

    curl_multi_socket_action(w->multi, fd,
                             ev->write ? CURL_CSELECT_OUT : CURL_CSELECT_IN,
                             &running);

    ngx_http_rlm_curl_collect();
}


static int
ngx_http_rlm_curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    ngx_http_rlm_curl_worker_t *w = userp;

    /*
     * Always delete first: ngx_add_timer() keeps an armed timer that is
     * within 300 ms of the new deadline, and a transfer that must start
     * now would otherwise wait for the old one.
     */

    if (w->timer.timer_set) {
        ngx_del_timer(&w->timer);
    }

    if (timeout_ms < 0) {
        return 0;
    }

    /*
     * While transfers run, the timer keeps a gracefully exiting worker
     * alive until they finish; an idle multi must not hold it back.
     */
    w->timer.cancelable = (w->stats.active == 0);

    ngx_add_timer(&w->timer, (ngx_msec_t) timeout_ms);

    return 0;
}


static void
ngx_http_rlm_curl_timer_handler(ngx_event_t *ev)
{
    int                          running;
    ngx_http_rlm_curl_worker_t  *w;

    w = ev->data;

    curl_multi_socket_action(w->multi, CURL_SOCKET_TIMEOUT, 0, &running);

    ngx_http_rlm_curl_collect();
}


static void
ngx_http_rlm_curl_collect(void)
{
    int                          left;
    CURL                        *easy;
    CURLMsg                     *msg;
    CURLcode                     result;
    ngx_http_rlm_curl_job_t     *job;
    ngx_http_rlm_curl_worker_t  *w;

    w = ngx_http_rlm_curl_worker;

    /*
     * Handlers run outside libcurl's callbacks, so they may start new
     * transfers or cancel other ones; a cancelled handle's messages are
     * dropped by curl_multi_remove_handle().
     */

    while (w != NULL
           && (msg = curl_multi_info_read(w->multi, &left)) != NULL)
    {
        if (msg->msg != CURLMSG_DONE) {
            continue;
        }

        easy = msg->easy_handle;
        result = msg->data.result;

        job = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &job);

        curl_multi_remove_handle(w->multi, easy);

        if (job == NULL || !job->active) {
            continue;
        }

        job->active = 0;
        ngx_queue_remove(&job->queue);

        w->stats.active--;
        w->stats.completed++;

        job->handler(job, result);

        w = ngx_http_rlm_curl_worker;
    }
}
