
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Trajectories: one JSONL file per completion, in the format the
 * reference RLM library's logger writes and its visualizer reads (a
 * metadata line, then one line per iteration), and the HTTP routes that
 * list and serve them.
 */


#ifndef _NGX_HTTP_RLM_TRAJECTORY_H_INCLUDED_
#define _NGX_HTTP_RLM_TRAJECTORY_H_INCLUDED_


#include "ngx_http_rlm_module.h"


/* "chatcmpl-" and at most this many letters and digits */
#define NGX_HTTP_RLM_COMPLETION_ID_MAX  64


typedef struct ngx_http_rlm_trajectory_s  ngx_http_rlm_trajectory_t;


/*
 * Creates DIR/<session hex>/<completion_id>.jsonl (directories 0700, the
 * file 0600, never an existing file) and writes the metadata line built
 * from meta.  A cleanup on pool closes the file; log must live as long as
 * pool.  NULL on error (logged): the completion goes on without a
 * trajectory.
 */
ngx_http_rlm_trajectory_t *ngx_http_rlm_trajectory_open(ngx_pool_t *pool,
    ngx_log_t *log, ngx_str_t *dir, u_char *session_hex,
    ngx_str_t *completion_id, json_t *meta);

/*
 * Appends one iteration line.  The caller keeps its json (nothing is
 * stolen).  After a write error the trajectory stops writing (logged
 * once) and every call answers NGX_ERROR; the completion must go on.
 */
ngx_int_t ngx_http_rlm_trajectory_iteration(ngx_http_rlm_trajectory_t *t,
    json_t *iteration);

/* closes the file now; the pool cleanup then has nothing left to do */
void ngx_http_rlm_trajectory_close(ngx_http_rlm_trajectory_t *t);

/*
 * To call when a session is created: if an earlier session with the same
 * id left trajectories, their directory is renamed out of the way, so the
 * new session never lists them.  NGX_OK also when there was none.
 */
ngx_int_t ngx_http_rlm_trajectory_forget(ngx_log_t *log, ngx_str_t *dir,
    u_char *session_hex);

/* "chatcmpl-" followed by 1..64 ASCII letters and digits */
ngx_int_t ngx_http_rlm_trajectory_valid_id(u_char *id, size_t len);

/* GET .../trajectories (list) and .../trajectories/{completion_id} */
ngx_int_t ngx_http_rlm_trajectories_handler(ngx_http_request_t *r);

/* the rlm_trajectory_dir directive */
char *ngx_http_rlm_trajectory_dir(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_RLM_TRAJECTORY_H_INCLUDED_ */
