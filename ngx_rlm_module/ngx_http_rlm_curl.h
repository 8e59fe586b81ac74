
/*
 * ngx_rlm: libcurl's multi interface driven by the nginx event loop.
 *
 * One multi handle per worker.  A caller prepares an easy handle, embeds
 * an ngx_http_rlm_curl_job_t in its own state and starts the job; the
 * handler runs from the event loop once the transfer is complete.  A job
 * may be cancelled at any time before that (client abort, deadline).
 */


#ifndef _NGX_HTTP_RLM_CURL_H_INCLUDED_
#define _NGX_HTTP_RLM_CURL_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <curl/curl.h>


typedef struct ngx_http_rlm_curl_job_s  ngx_http_rlm_curl_job_t;

typedef void (*ngx_http_rlm_curl_done_pt)(ngx_http_rlm_curl_job_t *job,
    CURLcode result);


struct ngx_http_rlm_curl_job_s {
    CURL                       *easy;
    ngx_http_rlm_curl_done_pt   handler;
    void                       *data;
    ngx_log_t                  *log;
    ngx_queue_t                 queue;      /* in the worker's active list */
    unsigned                    active:1;
};


/*
 * Counters of this worker, for the status handler and the tests.
 * "connections" counts every socket libcurl has open, idle keep-alive
 * ones included; "sockets" only those it wants watched right now.
 */

typedef struct {
    ngx_uint_t                  active;      /* easy handles in the multi */
    ngx_uint_t                  sockets;     /* sockets being watched */
    ngx_uint_t                  connections; /* nginx connections held */
    ngx_uint_t                  started;
    ngx_uint_t                  completed;
    ngx_uint_t                  cancelled;
} ngx_http_rlm_curl_stats_t;


ngx_int_t ngx_http_rlm_curl_init_process(ngx_cycle_t *cycle);
void ngx_http_rlm_curl_exit_process(ngx_cycle_t *cycle);

ngx_int_t ngx_http_rlm_curl_start(ngx_http_rlm_curl_job_t *job);
void ngx_http_rlm_curl_cancel(ngx_http_rlm_curl_job_t *job);

ngx_http_rlm_curl_stats_t *ngx_http_rlm_curl_stats(void);


#endif /* _NGX_HTTP_RLM_CURL_H_INCLUDED_ */
