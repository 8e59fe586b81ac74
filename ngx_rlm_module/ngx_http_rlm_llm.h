
/*
 * ngx_rlm: chat completion calls to OpenAI-compatible providers.
 *
 * A provider is declared in nginx.conf (rlm_provider).  A call takes an
 * OpenAI chat request as a jansson object, runs it on the worker's curl
 * multi (plain JSON or SSE upstream), retries 429/5xx/connection failures
 * with exponential backoff and jitter honouring Retry-After, and reports
 * the assistant text, finish reason and usage, or a classified error.
 */


#ifndef _NGX_HTTP_RLM_LLM_H_INCLUDED_
#define _NGX_HTTP_RLM_LLM_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <jansson.h>

#include "ngx_http_rlm_curl.h"
#include "ngx_http_rlm_sse.h"


typedef struct {
    ngx_str_t                   name;
    ngx_str_t                   url;            /* base URL, as SDKs take */
    ngx_str_t                   endpoint;       /* url/chat/completions\0 */
    ngx_str_t                   auth;           /* header line\0 or empty */
    ngx_str_t                   key;            /* for redaction only */
    ngx_str_t                   model;          /* default model */

    ngx_msec_t                  timeout;        /* per attempt */
    ngx_msec_t                  connect_timeout;
    ngx_uint_t                  retries;        /* after the first try */
    ngx_msec_t                  backoff;        /* first retry delay */
    ngx_msec_t                  backoff_max;
    ngx_msec_t                  retry_after_max;
    ngx_uint_t                  max_concurrent; /* per worker */
    size_t                      max_response;

    /* per worker state, initialised in init_process */
    ngx_uint_t                  active;
    ngx_queue_t                 waiting;
} ngx_http_rlm_provider_t;


typedef enum {
    NGX_HTTP_RLM_LLM_OK = 0,
    NGX_HTTP_RLM_LLM_ERR_CONNECT,       /* could not reach the provider */
    NGX_HTTP_RLM_LLM_ERR_TIMEOUT,       /* per-attempt timeout or deadline */
    NGX_HTTP_RLM_LLM_ERR_RATE_LIMITED,  /* 429 after all retries */
    NGX_HTTP_RLM_LLM_ERR_STATUS,        /* other non-2xx answer */
    NGX_HTTP_RLM_LLM_ERR_MALFORMED,     /* 2xx with a body we cannot read */
    NGX_HTTP_RLM_LLM_ERR_TOO_LARGE,     /* body above max_response */
    NGX_HTTP_RLM_LLM_ERR_INTERNAL
} ngx_http_rlm_llm_error_e;


/*
 * A cap shared by a set of calls, e.g. every model call of one completion
 * and its children; max 0 means no cap.  Lives as long as its calls.
 */

typedef struct {
    ngx_uint_t                  max;
    ngx_uint_t                  active;
    ngx_queue_t                 waiting;
} ngx_http_rlm_llm_group_t;


typedef struct ngx_http_rlm_llm_call_s  ngx_http_rlm_llm_call_t;

typedef void (*ngx_http_rlm_llm_done_pt)(ngx_http_rlm_llm_call_t *call);

/*
 * Streaming only: a piece of assistant text.  Runs inside libcurl's write
 * callback, so it must not cancel the call; returning NGX_ERROR aborts it
 * and done() follows.
 */
typedef ngx_int_t (*ngx_http_rlm_llm_delta_pt)(ngx_http_rlm_llm_call_t *call,
    u_char *text, size_t len);


struct ngx_http_rlm_llm_call_s {
    /* set by the caller before ngx_http_rlm_llm_start() */
    ngx_http_rlm_provider_t    *provider;
    ngx_http_rlm_llm_group_t   *group;          /* optional shared cap */
    ngx_pool_t                 *pool;           /* results live here */
    ngx_log_t                  *log;
    ngx_uint_t                  stream;         /* ask the provider for SSE */
    ngx_msec_t                  deadline;       /* absolute, 0: none */
    ngx_http_rlm_llm_done_pt    done;
    ngx_http_rlm_llm_delta_pt   delta;
    void                       *data;

    /* results, valid in done() */
    ngx_http_rlm_llm_error_e    error;
    ngx_uint_t                  status;         /* last HTTP status */
    ngx_uint_t                  attempts;
    ngx_str_t                   asked;          /* model the request named */
    ngx_msec_t                  started;        /* ngx_current_msec */
    ngx_str_t                   message;        /* error, redacted, NUL-ended */
    ngx_str_t                   content;
    ngx_str_t                   finish_reason;
    ngx_str_t                   id;
    ngx_str_t                   model;
    uint64_t                    prompt_tokens;
    uint64_t                    completion_tokens;
    uint64_t                    total_tokens;
    unsigned                    has_usage:1;

    /* private */
    ngx_http_rlm_curl_job_t     job;
    struct curl_slist          *headers;
    char                       *body;
    u_char                     *buf;            /* raw body of the attempt */
    size_t                      len;
    size_t                      size;
    u_char                     *text;           /* streamed content */
    size_t                      text_len;
    size_t                      text_size;
    ngx_http_rlm_sse_t          sse;
    ngx_event_t                 retry;
    ngx_queue_t                 queue;          /* provider's waiting list */
    ngx_msec_t                  retry_after;    /* from the last answer */
    ngx_http_rlm_llm_error_e    stream_error;
    char                        errbuf[CURL_ERROR_SIZE];
    unsigned                    state:3;
    unsigned                    is_sse:1;       /* this attempt's body */
    unsigned                    sse_done:1;     /* [DONE] seen */
    unsigned                    delivered:1;    /* deltas passed on */
    unsigned                    has_retry_after:1;
    unsigned                    fail_pending:1;
};


ngx_int_t ngx_http_rlm_llm_start(ngx_http_rlm_llm_call_t *call,
    json_t *request);
void ngx_http_rlm_llm_cancel(ngx_http_rlm_llm_call_t *call);
void ngx_http_rlm_llm_group_init(ngx_http_rlm_llm_group_t *group,
    ngx_uint_t max);

const char *ngx_http_rlm_llm_error_name(ngx_http_rlm_llm_error_e error);

ngx_int_t ngx_http_rlm_llm_init_process(ngx_cycle_t *cycle,
    ngx_array_t *providers);

char *ngx_http_rlm_llm_parse_provider(ngx_conf_t *cf,
    ngx_http_rlm_provider_t *p);
ngx_http_rlm_provider_t *ngx_http_rlm_llm_find_provider(
    ngx_array_t *providers, ngx_str_t *name);
ngx_array_t *ngx_http_rlm_llm_providers(ngx_conf_t *cf);


#endif /* _NGX_HTTP_RLM_LLM_H_INCLUDED_ */
