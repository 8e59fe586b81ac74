
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * One cell (exec), context load or variable read on a session's sandbox:
 * wait for the session's turn, exchange frames over the sandbox's
 * channel, hold the limits from outside the sandbox, and hand the typed
 * result to whoever started it (the sessions API or a completion's loop).
 * Nothing here answers HTTP.
 */


#ifndef _NGX_HTTP_RLM_CELL_H_INCLUDED_
#define _NGX_HTTP_RLM_CELL_H_INCLUDED_


#include "ngx_http_rlm_module.h"
#include "ngx_http_rlm_proto.h"


typedef struct ngx_http_rlm_cell_s  ngx_http_rlm_cell_t;

/*
 * A "call" frame from code during exec (llm_query, rlm_query, tool ...),
 * decoded.  The handler answers each call exactly once with
 * ngx_http_rlm_cell_reply() (at once, or later from its own events) and
 * returns NGX_OK; NGX_ERROR ends the cell as a protocol error.  The call
 * is the handler's: it frees it with ngx_http_rlm_call_free().  While a
 * call is outstanding the sandbox's wall clock is paused, so a handler
 * that waits long extends the host-side deadline with
 * ngx_http_rlm_cell_extend().  The default handler answers that model
 * calls are not configured.
 */
typedef ngx_int_t (*ngx_http_rlm_call_pt)(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_call_t *call);

/*
 * The outcome, exactly once: rc NGX_OK with cell->result (the sandbox's
 * own, or made up when the sandbox is gone or broke the protocol), or an
 * HTTP status with err_type, err_code and err_message (a context load
 * the sandbox refused has its result too: has_result says so).
 */
typedef void (*ngx_http_rlm_cell_done_pt)(ngx_http_rlm_cell_t *cell,
    ngx_int_t rc);


struct ngx_http_rlm_cell_s {
    /* set by the caller */
    ngx_http_request_t         *request;
    ngx_http_rlm_zone_t        *zone;
    ngx_http_rlm_session_t     *session;       /* referenced */
    json_t                     *frame;         /* exec, load_context ... */
    ngx_chain_t                *encoded;       /* or the frame, encoded */
    void                      (*encoded_free)(void *data);
    void                       *encoded_data;
    ngx_chain_t                *blob;
    size_t                      blob_len;
    ngx_msec_t                  timeout;
    ngx_http_rlm_cell_done_pt   done;
    ngx_http_rlm_call_pt        call_handler;  /* NULL: the default */
    void                       *data;          /* the caller's */

    /* outcome */
    ngx_http_rlm_result_t       result;
    const char                 *err_type;
    const char                 *err_code;
    u_char                     *err_message;
    ngx_uint_t                  cell_us;
    uint64_t                    number;        /* the session's count */

    /* private */
    ngx_http_rlm_waiter_t      *waiter;
    ngx_http_rlm_peer_t        *peer;
    ngx_event_t                 wait_event;
    ngx_msec_t                  wait_delay;
    ngx_queue_t                 wait_link;     /* this worker's waiters */
    ngx_event_t                 watch_event;   /* CPU watch from outside */
    ngx_str_t                   path;
    u_char                      sandbox[NGX_HTTP_RLM_SANDBOX_LEN + 1];
    u_char                      reason[NGX_HTTP_RLM_REASON_LEN];
    ngx_uint_t                  generation;
    struct timespec             started;
    ngx_uint_t                  status_tries;

    unsigned                    has_result:1;  /* result is filled */
    unsigned                    context:1;     /* blob: a context load */
    unsigned                    api:1;         /* the sessions API's */
    unsigned                    referenced:1;
    unsigned                    running:1;
    unsigned                    sent:1;
    unsigned                    watched:1;
    unsigned                    killed:1;
    unsigned                    finalized:1;
};


extern ngx_http_rlm_call_pt  ngx_http_rlm_call_handler;


/*
 * Registers the cell's cleanup on the request's pool: from then on
 * everything the cell holds (its place in the session's queue, its
 * turn, the session's reference, the channel, timers) is given back
 * however the request ends.
 */
ngx_int_t ngx_http_rlm_cell_init(ngx_http_rlm_cell_t *cell);

/* runs it; done() may be called before this returns */
void ngx_http_rlm_cell_start(ngx_http_rlm_cell_t *cell);

/* gives everything back early; done() is not called */
void ngx_http_rlm_cell_cancel(ngx_http_rlm_cell_t *cell);

ngx_int_t ngx_http_rlm_cell_reply(ngx_http_rlm_cell_t *cell, json_t *reply);
void ngx_http_rlm_cell_extend(ngx_http_rlm_cell_t *cell,
    ngx_msec_t timeout);

ngx_int_t ngx_http_rlm_cell_default_call(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_call_t *call);
ngx_int_t ngx_http_rlm_cell_refuse(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_call_t *call, const char *message);


#endif /* _NGX_HTTP_RLM_CELL_H_INCLUDED_ */
