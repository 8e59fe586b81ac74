
/*
 * ngx_rlm: what `nginx -t` checks beyond nginx's own slots.
 */


#ifndef _NGX_HTTP_RLM_CONF_H_INCLUDED_
#define _NGX_HTTP_RLM_CONF_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/*
 * A bound checked when the directive is parsed, so that the message
 * carries the directive's file:line.  "text" says what the value must be
 * ("at least 10ms"); the message is "\"name\" must be <text>".
 */

typedef struct {
    ngx_conf_post_handler_pt  post_handler;
    off_t                     low;
    off_t                     high;
    char                     *text;
} ngx_http_rlm_conf_bounds_t;


/*
 * Where a directive was parsed, for a check that can only run once the
 * whole block is known (merge, init_main_conf, init_module).
 */

typedef struct {
    ngx_str_t                 file;
    ngx_uint_t                line;
} ngx_http_rlm_conf_where_t;


char *ngx_http_rlm_conf_set_size_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_rlm_conf_size_bounds(ngx_conf_t *cf, void *post, void *data);
char *ngx_http_rlm_conf_msec_bounds(ngx_conf_t *cf, void *post, void *data);
char *ngx_http_rlm_conf_sec_bounds(ngx_conf_t *cf, void *post, void *data);

void ngx_http_rlm_conf_where(ngx_conf_t *cf, ngx_http_rlm_conf_where_t *w);
void ngx_cdecl ngx_http_rlm_conf_error_at(ngx_log_t *log,
    ngx_http_rlm_conf_where_t *w, const char *fmt, ...);

const char *ngx_http_rlm_conf_url_error(ngx_conf_t *cf, ngx_str_t *url);
ngx_int_t ngx_http_rlm_conf_check_exec(ngx_conf_t *cf, ngx_str_t *path,
    ngx_str_t *what);
ngx_int_t ngx_http_rlm_conf_env(ngx_cycle_t *cycle, ngx_str_t *name,
    ngx_str_t *value);


#endif /* _NGX_HTTP_RLM_CONF_H_INCLUDED_ */
