
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Opening a session: reserve its entry in the shared zone, ask the
 * manager for a sandbox, activate the entry; or take a spare sandbox
 * (ngx_http_rlm_spare.c) when rlm_session_spares keeps some ready.  Used
 * by POST /v1/sessions and by completions that start a session (or a
 * child RLM).
 *
 * The manager's answer is awaited on a pool of its own: if the caller
 * goes away meanwhile, the answer still arrives and the sandbox goes back
 * to the manager instead of leaking.
 */


#include "ngx_http_rlm_module.h"
#include "ngx_http_rlm_trajectory.h"
#include "ngx_http_rlm_metrics.h"


static void ngx_http_rlm_open_acquired(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);
static ngx_int_t ngx_http_rlm_open_spare(ngx_http_rlm_open_t *op,
    ngx_pool_t *caller_pool, ngx_http_rlm_main_conf_t *rmcf);
static void ngx_http_rlm_open_taken(ngx_event_t *ev);
static void ngx_http_rlm_open_cleanup(void *data);
static ngx_int_t ngx_http_rlm_open_fail(ngx_http_rlm_open_t *op,
    ngx_uint_t status, const char *code, const char *message);


/*
 * Returns NGX_AGAIN when op->handler will run later (with op->session
 * referenced and active, or op->status/code/message set), or an HTTP
 * status with op->code/message set when it failed at once.  The caller's
 * pool cleanup detaches the handler if the caller ends first.
 */

ngx_int_t
ngx_http_rlm_session_open(ngx_http_rlm_open_t *op, ngx_pool_t *caller_pool,
    u_char *id, ngx_str_t *owner)
{
    ngx_int_t                  rc;
    ngx_pool_t                *pool;
    ngx_pool_cleanup_t        *cln;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    op->zone = ngx_http_rlm_zone();

    if (rmcf == NULL || rmcf->control_path.len == 0 || op->zone == NULL) {
        return ngx_http_rlm_open_fail(op, NGX_HTTP_SERVICE_UNAVAILABLE,
                                      "manager_unavailable",
                                      "no sandbox manager is configured "
                                      "(rlm_sandboxd or "
                                      "rlm_sandboxd_socket)");
    }

    ngx_http_rlm_session_format_id(id, op->hex);

    if (rmcf->session_spares && op->any_id
        && ngx_http_rlm_spare_take(op->zone, rmcf, owner, &op->session)
           == NGX_OK)
    {
        ngx_memcpy(id, op->session->id, NGX_HTTP_RLM_ID_BYTES);
        ngx_http_rlm_session_format_id(id, op->hex);

        return ngx_http_rlm_open_spare(op, caller_pool, rmcf);
    }

    rc = ngx_http_rlm_session_reserve(op->zone, id, owner, rmcf->max_sessions,
                                      &op->session);

    switch (rc) {

    case NGX_OK:
        break;

    case NGX_DECLINED:
        op->session = NULL;
        op->param = "id";
        return ngx_http_rlm_open_fail(op, NGX_HTTP_CONFLICT,
                                      "session_exists",
                                      "a session with this id exists");

    case NGX_BUSY:
        op->session = NULL;
        (void) ngx_atomic_fetch_add(&op->zone->sh->stats.sessions_rejected,
                                    1);
        return ngx_http_rlm_open_fail(op, NGX_HTTP_SERVICE_UNAVAILABLE,
                                      "session_limit",
                                      "the session limit (rlm_max_sessions) "
                                      "is reached; retry later or delete "
                                      "sessions");

    default:
        op->session = NULL;
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "rlm: rlm_sessions_zone is full");
        (void) ngx_atomic_fetch_add(&op->zone->sh->stats.sessions_rejected,
                                    1);
        return ngx_http_rlm_open_fail(op, NGX_HTTP_SERVICE_UNAVAILABLE,
                                      "session_limit",
                                      "the session table is full");
    }

    pool = ngx_create_pool(1024, ngx_cycle->log);
    cln = ngx_pool_cleanup_add(caller_pool, 0);

    if (pool == NULL || cln == NULL) {
        if (pool) {
            ngx_destroy_pool(pool);
        }

        ngx_http_rlm_session_abort(op->zone, op->session);
        op->session = NULL;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the state that outlives the caller lives on the private pool */

    op->pending = ngx_palloc(pool, sizeof(ngx_http_rlm_open_t));
    if (op->pending == NULL) {
        ngx_destroy_pool(pool);
        ngx_http_rlm_session_abort(op->zone, op->session);
        op->session = NULL;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    *op->pending = *op;
    op->pending->pool = pool;
    op->pending->caller = op;
    op->pending->pending = NULL;

    cln->handler = ngx_http_rlm_open_cleanup;
    cln->data = op;
    op->cleanup = cln;

    rc = ngx_http_rlm_control_acquire(pool, op->hex,
                                      ngx_http_rlm_open_acquired,
                                      op->pending);

    if (rc != NGX_OK) {
        cln->handler = NULL;
        ngx_http_rlm_session_abort(op->zone, op->session);
        op->session = NULL;
        op->pending = NULL;
        ngx_destroy_pool(pool);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_AGAIN;
}


static void
ngx_http_rlm_open_acquired(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    json_t                    *err;
    ngx_pool_t                *pool;
    const char                *code, *msg;
    ngx_http_rlm_open_t       *op, *pending = data;
    ngx_http_rlm_main_conf_t  *rmcf;

    op = pending->caller;
    pool = pending->pool;

    ngx_http_rlm_metrics_acquire(reply);

    if (op == NULL) {
        /* the caller is gone: give everything back */

        if (reply && json_is_true(json_object_get(reply, "ok"))
            && json_is_string(json_object_get(reply, "sandbox")))
        {
            ngx_http_rlm_control_release(ngx_cycle->log, (u_char *)
                json_string_value(json_object_get(reply, "sandbox")));
        }

        ngx_http_rlm_session_abort(pending->zone, pending->session);
        ngx_destroy_pool(pool);
        return;
    }

    op->cleanup->handler = NULL;
    op->pending = NULL;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    if (reply == NULL) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "rlm: the sandbox manager is not reachable on \"%V\"",
                      &rmcf->control_path);
        (void) ngx_http_rlm_open_fail(op, NGX_HTTP_SERVICE_UNAVAILABLE,
                                      "manager_unavailable",
                                      "the sandbox manager is not "
                                      "reachable");
        goto failed;
    }

    if (!json_is_true(json_object_get(reply, "ok"))) {
        err = json_object_get(reply, "error");
        code = json_string_value(json_object_get(err, "code"));
        msg = json_string_value(json_object_get(err, "message"));

        if (code && ngx_strcmp(code, "limit") == 0) {
            (void) ngx_atomic_fetch_add(
                                   &op->zone->sh->stats.sessions_rejected, 1);
            (void) ngx_http_rlm_open_fail(op, NGX_HTTP_SERVICE_UNAVAILABLE,
                                          "session_limit",
                                          "the sandbox manager has no "
                                          "capacity for another session");
            goto failed;
        }

        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "rlm: the sandbox manager refused a sandbox: %s %s",
                      code ? code : "-", msg ? msg : "");

        (void) ngx_http_rlm_open_fail(op, NGX_HTTP_BAD_GATEWAY,
                                      "manager_error",
                                      "the sandbox manager could not "
                                      "provide a sandbox");
        goto failed;
    }

    if (ngx_http_rlm_session_activate(op->zone, op->session, reply)
        != NGX_OK)
    {
        (void) ngx_http_rlm_open_fail(op, NGX_HTTP_BAD_GATEWAY,
                                      "manager_error",
                                      "the sandbox manager sent a reply "
                                      "without a sandbox");
        goto failed;
    }

    /* trajectories of an earlier session with this id are not its own */

    if (rmcf->trajectory_dir) {
        (void) ngx_http_rlm_trajectory_forget(ngx_cycle->log,
                                              &rmcf->trajectory_dir->name,
                                              op->hex);
    }

    (void) ngx_atomic_fetch_add(&op->zone->sh->stats.sessions_created, 1);
    (void) ngx_atomic_fetch_add(&op->zone->sh->stats.sandbox_starts, 1);

    ngx_destroy_pool(pool);

    op->status = 0;
    op->handler(op);

    (void) status;
    return;

failed:

    ngx_http_rlm_session_abort(op->zone, op->session);
    op->session = NULL;

    ngx_destroy_pool(pool);

    op->handler(op);
}


/*
 * The session took a spare sandbox: it is ready, and the caller hears so
 * from a posted event, as it would from the manager's answer.
 */

static ngx_int_t
ngx_http_rlm_open_spare(ngx_http_rlm_open_t *op, ngx_pool_t *caller_pool,
    ngx_http_rlm_main_conf_t *rmcf)
{
    ngx_pool_cleanup_t  *cln;

    (void) ngx_atomic_fetch_add(&op->zone->sh->stats.sessions_created, 1);

    cln = ngx_pool_cleanup_add(caller_pool, 0);

    if (cln == NULL) {
        ngx_http_rlm_session_discard(op->zone, op->session);
        op->session = NULL;

        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rmcf->trajectory_dir) {
        (void) ngx_http_rlm_trajectory_forget(ngx_cycle->log,
                                              &rmcf->trajectory_dir->name,
                                              op->hex);
    }

    ngx_http_rlm_spare_refill_soon(ngx_cycle->log);

    op->status = 0;

    op->taken.handler = ngx_http_rlm_open_taken;
    op->taken.data = op;
    op->taken.log = ngx_cycle->log;
    ngx_post_event(&op->taken, &ngx_posted_events);

    cln->handler = ngx_http_rlm_open_cleanup;
    cln->data = op;
    op->cleanup = cln;

    return NGX_AGAIN;
}


static void
ngx_http_rlm_open_taken(ngx_event_t *ev)
{
    ngx_http_rlm_open_t  *op = ev->data;

    op->cleanup->handler = NULL;

    op->handler(op);
}


/*
 * The caller ends before the manager answered: the answer cleans up.  Or
 * before it heard of the spare it took: the session goes at once.
 */

static void
ngx_http_rlm_open_cleanup(void *data)
{
    ngx_http_rlm_open_t  *op = data;

    if (op->pending) {
        op->pending->caller = NULL;
        op->pending = NULL;
    }

    if (op->taken.posted) {
        ngx_delete_posted_event(&op->taken);

        ngx_http_rlm_session_discard(op->zone, op->session);
        op->session = NULL;
    }
}


static ngx_int_t
ngx_http_rlm_open_fail(ngx_http_rlm_open_t *op, ngx_uint_t status,
    const char *code, const char *message)
{
    op->status = status;
    op->code = code;
    op->message = message;
    op->retry_after = (status == NGX_HTTP_SERVICE_UNAVAILABLE);

    return status;
}


/* answers an open that failed, in the API's envelope */

ngx_int_t
ngx_http_rlm_open_send_error(ngx_http_request_t *r, ngx_http_rlm_open_t *op)
{
    if (op->status == NGX_HTTP_INTERNAL_SERVER_ERROR || op->code == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (op->retry_after
        && ngx_http_rlm_set_header(r, "Retry-After", "1") != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_rlm_send_error_param(r, op->status,
                                         op->status == NGX_HTTP_CONFLICT
                                         ? "invalid_request_error"
                                         : "server_error",
                                         op->code, op->param, op->message);
}
