
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * What model calls cost (see ngx_http_rlm_cost.h).
 */


#include "ngx_http_rlm_cost.h"


#define NGX_HTTP_RLM_COST_PRICE_MAX   1e9


static ngx_int_t ngx_http_rlm_cost_number(u_char *p, size_t len,
    double *out);


ngx_int_t
ngx_http_rlm_cost_prices(ngx_pool_t *pool, ngx_str_t *text,
    ngx_array_t **prices)
{
    u_char                *p, *last, *start;
    ngx_str_t              word[3];
    ngx_uint_t             n;
    ngx_http_rlm_price_t  *price;

    *prices = NULL;

    p = text->data;
    last = p + text->len;
    n = 0;

    for ( ;; ) {
        while (p < last && (*p == ' ' || *p == '\t' || *p == '\n'
                            || *p == ','))
        {
            p++;
        }

        if (p == last) {
            break;
        }

        start = p;

        while (p < last && *p != ' ' && *p != '\t' && *p != '\n'
               && *p != ',')
        {
            p++;
        }

        word[n].data = start;
        word[n].len = p - start;

        if (++n < 3) {
            continue;
        }

        n = 0;

        if (*prices == NULL) {
            *prices = ngx_array_create(pool, 4,
                                       sizeof(ngx_http_rlm_price_t));
            if (*prices == NULL) {
                return NGX_ERROR;
            }
        }

        price = ngx_array_push(*prices);
        if (price == NULL) {
            return NGX_ERROR;
        }

        price->model = word[0];

        if (ngx_http_rlm_cost_number(word[1].data, word[1].len,
                                     &price->prompt)
            != NGX_OK
            || ngx_http_rlm_cost_number(word[2].data, word[2].len,
                                        &price->completion)
               != NGX_OK)
        {
            return NGX_DECLINED;
        }
    }

    return n ? NGX_DECLINED : NGX_OK;
}


/* a price: a decimal number >= 0, digits and at most one point */

static ngx_int_t
ngx_http_rlm_cost_number(u_char *p, size_t len, double *out)
{
    double      v, scale;
    ngx_uint_t  point, digits;

    v = 0;
    scale = 1;
    point = 0;
    digits = 0;

    for ( /* void */ ; len; p++, len--) {
        if (*p == '.' && !point) {
            point = 1;
            continue;
        }

        if (*p < '0' || *p > '9') {
            return NGX_DECLINED;
        }

        digits++;

        if (point) {
            scale /= 10;
            v += (*p - '0') * scale;

        } else {
            v = v * 10 + (*p - '0');
        }

        if (v > NGX_HTTP_RLM_COST_PRICE_MAX) {
            return NGX_DECLINED;
        }
    }

    if (digits == 0) {
        return NGX_DECLINED;
    }

    *out = v;

    return NGX_OK;
}


ngx_http_rlm_price_t *
ngx_http_rlm_cost_price(ngx_array_t *prices, ngx_str_t *model)
{
    ngx_uint_t             i;
    ngx_http_rlm_price_t  *price;

    if (prices == NULL) {
        return NULL;
    }

    price = prices->elts;

    for (i = 0; i < prices->nelts; i++) {
        if (price[i].model.len == model->len
            && ngx_strncmp(price[i].model.data, model->data, model->len) == 0)
        {
            return &price[i];
        }
    }

    return NULL;
}


double
ngx_http_rlm_cost_of(ngx_http_rlm_price_t *price, uint64_t prompt,
    uint64_t completion)
{
    if (price == NULL) {
        return 0;
    }

    return ((double) prompt * price->prompt
            + (double) completion * price->completion) / 1e6;
}
