
/*
 * ngx_rlm: what model calls cost.
 *
 * Prices come per completion as text, from rlm_completion_prices (the
 * Lua routing table sets it through $rlm_prices): "model prompt
 * completion" triples separated by spaces, prices in money per million
 * tokens, e.g. "gpt-4.1 2 8 gpt-4.1-mini 0.4 1.6".  A call of a model
 * without a price costs nothing.
 */


#ifndef _NGX_HTTP_RLM_COST_H_INCLUDED_
#define _NGX_HTTP_RLM_COST_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


typedef struct {
    ngx_str_t                   model;
    double                      prompt;        /* per 1M tokens */
    double                      completion;    /* per 1M tokens */
} ngx_http_rlm_price_t;


/* NGX_OK with *prices (NULL for empty text), or NGX_DECLINED: malformed */
ngx_int_t ngx_http_rlm_cost_prices(ngx_pool_t *pool, ngx_str_t *text,
    ngx_array_t **prices);

/* the price of model, or NULL */
ngx_http_rlm_price_t *ngx_http_rlm_cost_price(ngx_array_t *prices,
    ngx_str_t *model);

double ngx_http_rlm_cost_of(ngx_http_rlm_price_t *price, uint64_t prompt,
    uint64_t completion);


#endif /* _NGX_HTTP_RLM_COST_H_INCLUDED_ */
