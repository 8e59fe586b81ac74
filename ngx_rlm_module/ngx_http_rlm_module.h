
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Declarations shared by the module's source files.
 */


#ifndef _NGX_HTTP_RLM_MODULE_H_INCLUDED_
#define _NGX_HTTP_RLM_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#define NGX_HTTP_RLM_VERSION        "0.1.0"


/* what a location serves, set by the handler directives */
typedef enum {
    NGX_HTTP_RLM_HANDLER_NONE = 0,
    NGX_HTTP_RLM_HANDLER_HEALTH
} ngx_http_rlm_handler_e;


typedef struct {
    ngx_str_t                   sandboxd;          /* manager executable */
    ngx_str_t                   sandboxd_socket;   /* external manager */
    ngx_str_t                   runtime_dir;

    ngx_uint_t                  pool_size;
    ngx_uint_t                  max_sessions;

    time_t                      cell_cpu_time;     /* seconds */
    ngx_msec_t                  cell_timeout;
    size_t                      sandbox_memory;
    ngx_uint_t                  sandbox_pids;
    size_t                      output_max;

    time_t                      session_idle_timeout;
    ngx_uint_t                  session_queue;
} ngx_http_rlm_main_conf_t;


typedef struct {
    ngx_http_rlm_handler_e      handler;
} ngx_http_rlm_loc_conf_t;


ngx_int_t ngx_http_rlm_health_handler(ngx_http_request_t *r);

ngx_int_t ngx_http_rlm_send_json(ngx_http_request_t *r, ngx_uint_t status,
    u_char *data, size_t len);
ngx_int_t ngx_http_rlm_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, const char *message);


extern ngx_module_t  ngx_http_rlm_module;


#endif /* _NGX_HTTP_RLM_MODULE_H_INCLUDED_ */
