
/*
 * Stands in for the module's header when ngx_http_rlm_proto.c is built
 * alone for the fuzzer (t/unit/unit.mk copies both next to each other):
 * the few nginx types and macros the protocol layer uses, in plain C.
 */


#ifndef _NGX_HTTP_RLM_MODULE_H_INCLUDED_
#define _NGX_HTTP_RLM_MODULE_H_INCLUDED_


#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>


typedef intptr_t        ngx_int_t;
typedef uintptr_t       ngx_uint_t;
typedef unsigned char   u_char;

typedef struct {
    size_t      len;
    u_char     *data;
} ngx_str_t;

/* a pool that is never freed item by item: the fuzzer frees it whole */
typedef struct ngx_pool_s  ngx_pool_t;

void *ngx_pnalloc(ngx_pool_t *pool, size_t size);

#define NGX_OK          0
#define NGX_ERROR      -1
#define NGX_DECLINED   -5

#define ngx_memzero(buf, n)       (void) memset(buf, 0, n)
#define ngx_strcmp(s1, s2)        strcmp((const char *) s1, (const char *) s2)
#define ngx_strlen(s)             strlen((const char *) s)
#define ngx_str_null(str)         (str)->len = 0; (str)->data = NULL
#define ngx_min(a, b)             ((a < b) ? (a) : (b))


typedef enum {
    NGX_HTTP_RLM_CELL_OK = 0,
    NGX_HTTP_RLM_CELL_ERROR,
    NGX_HTTP_RLM_CELL_TIMEOUT,
    NGX_HTTP_RLM_CELL_OOM,
    NGX_HTTP_RLM_CELL_TRUNCATED,
    NGX_HTTP_RLM_CELL_CRASHED,
    NGX_HTTP_RLM_CELL_LOST,
    NGX_HTTP_RLM_CELL_SANDBOX_ERROR,
    NGX_HTTP_RLM_CELL_NSTATUS
} ngx_http_rlm_cell_status_e;

const char *ngx_http_rlm_cell_status_name(ngx_http_rlm_cell_status_e st);


#endif /* _NGX_HTTP_RLM_MODULE_H_INCLUDED_ */
