
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The gateway's counters in the shared zone: what the loop, the model
 * calls and the sandbox acquires report, per model where a model is
 * known.  Each hook is one atomic add or a few; none blocks.
 */


#ifndef _NGX_HTTP_RLM_METRICS_H_INCLUDED_
#define _NGX_HTTP_RLM_METRICS_H_INCLUDED_


#include "ngx_http_rlm_module.h"
#include "ngx_http_rlm_llm.h"


/* a completion answered (or failed) after its loop ran */
void ngx_http_rlm_metrics_completion(ngx_http_request_t *r,
    ngx_str_t *model, ngx_http_rlm_outcome_e outcome,
    ngx_uint_t iterations);

/* a model call of a loop that finished, with or without an answer */
void ngx_http_rlm_metrics_model_call(ngx_http_rlm_llm_call_t *call);

/* one prompt of llm_query (child 0) or rlm_query (child 1) started */
void ngx_http_rlm_metrics_subcall(ngx_str_t *model, ngx_uint_t child);

/* the manager's answer to an acquire; NULL: no answer */
void ngx_http_rlm_metrics_acquire(json_t *reply);


#endif /* _NGX_HTTP_RLM_METRICS_H_INCLUDED_ */
