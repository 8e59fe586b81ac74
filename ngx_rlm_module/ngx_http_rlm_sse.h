
/*
 * ngx_rlm: incremental parser for server-sent events (text/event-stream).
 *
 * Bytes arrive in arbitrary pieces; each complete event's data (its
 * "data:" lines joined with "\n") is handed to the handler.  Lines end in
 * LF, CRLF or CR, also when the CR and the LF arrive in different pieces.
 * Comments and the fields event, id and retry are ignored: OpenAI-style
 * streams carry everything in data.  Plain C with malloc, so the unit
 * tests and the fuzzer use it without nginx.
 */


#ifndef _NGX_HTTP_RLM_SSE_H_INCLUDED_
#define _NGX_HTTP_RLM_SSE_H_INCLUDED_


#include <stddef.h>


#define NGX_HTTP_RLM_SSE_OK         0
#define NGX_HTTP_RLM_SSE_ERROR     -1      /* too large or out of memory */
#define NGX_HTTP_RLM_SSE_STOP      -2      /* the handler asked to stop */


/* returns 0 to go on, anything else stops the parser */
typedef int (*ngx_http_rlm_sse_handler_pt)(void *ctx, const unsigned char *data,
    size_t len);


typedef struct {
    unsigned char                *line;     /* the line being read */
    size_t                        line_len;
    size_t                        line_size;

    unsigned char                *data;     /* the event being assembled */
    size_t                        data_len;
    size_t                        data_size;

    size_t                        max;      /* bound on line and event */

    ngx_http_rlm_sse_handler_pt   handler;
    void                         *ctx;

    unsigned                      has_data:1;
    unsigned                      after_cr:1;
    unsigned                      stopped:1;
} ngx_http_rlm_sse_t;


void ngx_http_rlm_sse_init(ngx_http_rlm_sse_t *p, size_t max,
    ngx_http_rlm_sse_handler_pt handler, void *ctx);
int ngx_http_rlm_sse_feed(ngx_http_rlm_sse_t *p, const unsigned char *buf,
    size_t len);
int ngx_http_rlm_sse_finish(ngx_http_rlm_sse_t *p);
void ngx_http_rlm_sse_free(ngx_http_rlm_sse_t *p);


#endif /* _NGX_HTTP_RLM_SSE_H_INCLUDED_ */
