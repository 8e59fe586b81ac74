
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
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_rlm_curl.h"


typedef struct {
    CURLM                      *multi;
    ngx_event_t                 timer;
    ngx_queue_t                 jobs;
    ngx_log_t                  *log;
    ngx_http_rlm_curl_stats_t   stats;
} ngx_http_rlm_curl_worker_t;


static int ngx_http_rlm_curl_socket_cb(CURL *easy, curl_socket_t s, int what,
    void *userp, void *socketp);
static int ngx_http_rlm_curl_timer_cb(CURLM *multi, long timeout_ms,
    void *userp);
static void ngx_http_rlm_curl_event_handler(ngx_event_t *ev);
static void ngx_http_rlm_curl_timer_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_rlm_curl_watch(ngx_event_t *ev, ngx_int_t event,
    ngx_uint_t on);
static void ngx_http_rlm_curl_release(ngx_connection_t *c);
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
    ngx_queue_t                 *q;
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
     * Closing the cached connections makes libcurl report CURL_POLL_REMOVE
     * for any socket still watched, which releases its nginx connection:
     * nginx would otherwise complain about sockets left open at exit.
     */
    curl_multi_cleanup(w->multi);
    curl_global_cleanup();

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

    /* may call the socket callback with CURL_POLL_REMOVE */
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

    ngx_connection_t  *c;

    c = socketp;

    if (what == CURL_POLL_REMOVE) {

        /*
         * libcurl is done with the socket for now: it is about to close
         * it, or it parks the connection in its cache, where nobody
         * watches it until a later transfer picks it up again.
         */

        if (c != NULL) {
            curl_multi_assign(w->multi, s, NULL);
            ngx_http_rlm_curl_release(c);
        }

        return 0;
    }

    if (c == NULL) {
        c = ngx_get_connection(s, w->log);
        if (c == NULL) {
            return -1;
        }

        c->data = w;
        c->read->handler = ngx_http_rlm_curl_event_handler;
        c->write->handler = ngx_http_rlm_curl_event_handler;
        c->read->log = w->log;
        c->write->log = w->log;

        curl_multi_assign(w->multi, s, c);
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
ngx_http_rlm_curl_release(ngx_connection_t *c)
{
    ngx_http_rlm_curl_worker_t *w = c->data;

    /* the socket belongs to libcurl: unwatch it, never close it here */

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

    /*
     * ngx_free_connection() keeps the descriptor; nginx's exit check looks
     * for connections with fd != -1, so mark this one as unused.
     */
    c->fd = (ngx_socket_t) -1;
    ngx_free_connection(c);

    w->stats.sockets--;
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
