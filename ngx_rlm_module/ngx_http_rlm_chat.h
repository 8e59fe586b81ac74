
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * POST /v1/chat/completions: the state of one request, shared by the
 * request side (ngx_http_rlm_chat.c) and the answer side
 * (ngx_http_rlm_chat_reply.c).
 */


#ifndef _NGX_HTTP_RLM_CHAT_H_INCLUDED_
#define _NGX_HTTP_RLM_CHAT_H_INCLUDED_


#include "ngx_http_rlm_loop.h"


/* an SSE comment at least this often while a stream's loop works */
#define NGX_HTTP_RLM_CHAT_KEEPALIVE   10000


typedef struct {
    ngx_http_request_t         *request;
    ngx_http_rlm_loop_t         loop;
    ngx_http_rlm_tree_t         tree;
    ngx_http_rlm_open_t         open;
    ngx_str_t                   model;          /* as the client named it */
    ngx_str_t                   id;             /* chatcmpl-... */
    time_t                      created;
    ngx_event_t                 keepalive;
    ngx_uint_t                  from_cookie;
    ngx_int_t                   rc;             /* of an error answer */
    unsigned                    stream:1;
    unsigned                    include_usage:1;
    unsigned                    reset:1;        /* "reset": true */
    unsigned                    header_sent:1;
} ngx_http_rlm_chat_t;


void ngx_http_rlm_chat_done(ngx_http_rlm_loop_t *loop);
void ngx_http_rlm_chat_progress(ngx_http_rlm_loop_t *loop, const char *what);
void ngx_http_rlm_chat_keepalive(ngx_event_t *e);
ngx_int_t ngx_http_rlm_chat_headers(ngx_http_rlm_chat_t *chat,
    ngx_uint_t stream);


#endif /* _NGX_HTTP_RLM_CHAT_H_INCLUDED_ */
