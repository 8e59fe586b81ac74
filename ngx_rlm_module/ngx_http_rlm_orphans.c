
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The orphan sweep: a sandbox the manager handed out that no session or
 * spare of the zone holds.  That happens when a worker dies between
 * asking for a sandbox and reading the answer, or gives up waiting for
 * it: the manager keeps the sandbox live for good.  Now and then the
 * first worker lists the manager's live sandboxes and releases those
 * acquired long enough ago that no acquire can still be on its way, and
 * whose session id (the one they were acquired for) does not name them
 * in the zone.
 *
 * Only for a manager nginx runs itself: an external one may serve other
 * clients, whose sandboxes this zone knows nothing about.
 */


#include "ngx_http_rlm_module.h"


/* acquires give up after NGX_HTTP_RLM_CONTROL_TIMEOUT; well after that */
#define NGX_HTTP_RLM_ORPHAN_AGE      (4 * NGX_HTTP_RLM_CONTROL_TIMEOUT)
#define NGX_HTTP_RLM_ORPHAN_BATCH    64


static void ngx_http_rlm_orphans_listed(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status);
static ngx_uint_t ngx_http_rlm_orphans_held(ngx_http_rlm_zone_t *z,
    u_char *id, const char *sandbox);


static ngx_uint_t  ngx_http_rlm_orphans_listing;


void
ngx_http_rlm_orphans_sweep(ngx_log_t *log)
{
    json_t                    *req;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    if (ngx_http_rlm_orphans_listing || rmcf == NULL
        || rmcf->sandboxd.len == 0 || rmcf->control_path.len == 0)
    {
        return;
    }

    req = json_pack("{s:s}", "op", "list");
    if (req == NULL) {
        return;
    }

    ngx_http_rlm_orphans_listing = 1;

    if (ngx_http_rlm_control_pooled(log, req, ngx_http_rlm_orphans_listed)
        != NGX_OK)
    {
        ngx_http_rlm_orphans_listing = 0;
    }

    json_decref(req);
}


static void
ngx_http_rlm_orphans_listed(void *data, json_t *reply,
    ngx_http_rlm_peer_status_e status)
{
    ngx_pool_t  *pool = data;

    u_char                id[NGX_HTTP_RLM_ID_BYTES];
    size_t                i, n;
    json_t               *list, *e;
    json_int_t            age;
    ngx_uint_t            released;
    const char           *sandbox, *session;
    ngx_http_rlm_zone_t  *z;

    ngx_http_rlm_orphans_listing = 0;

    z = ngx_http_rlm_zone();
    list = reply ? json_object_get(reply, "sandboxes") : NULL;

    if (z == NULL || z->sh == NULL || !json_is_array(list)) {
        /* an older manager without "list", or none at all: nothing to do */
        ngx_destroy_pool(pool);
        return;
    }

    released = 0;
    n = json_array_size(list);

    for (i = 0; i < n && released < NGX_HTTP_RLM_ORPHAN_BATCH; i++) {
        e = json_array_get(list, i);
        sandbox = json_string_value(json_object_get(e, "sandbox"));
        session = json_string_value(json_object_get(e, "session"));
        age = json_integer_value(json_object_get(e, "live_ms"));

        if (sandbox == NULL || session == NULL
            || age < NGX_HTTP_RLM_ORPHAN_AGE
            || ngx_strlen(sandbox) > NGX_HTTP_RLM_SANDBOX_LEN
            || ngx_http_rlm_session_parse_id((u_char *) session,
                                             ngx_strlen(session), id)
               != NGX_OK)
        {
            continue;
        }

        if (ngx_http_rlm_orphans_held(z, id, sandbox)) {
            continue;
        }

        ngx_log_error(NGX_LOG_WARN, pool->log, 0,
                      "rlm: releasing sandbox \"%s\" that no session holds "
                      "(acquired for %s %L s ago)", sandbox, session,
                      (int64_t) age / 1000);

        ngx_http_rlm_control_release(pool->log, (u_char *) sandbox);
        (void) ngx_atomic_fetch_add(&z->sh->stats.sandbox_orphans, 1);
        released++;
    }

    ngx_destroy_pool(pool);

    (void) status;
}


/* whether the session named id, or a spare, holds the sandbox */

static ngx_uint_t
ngx_http_rlm_orphans_held(ngx_http_rlm_zone_t *z, u_char *id,
    const char *sandbox)
{
    ngx_uint_t               held;
    ngx_queue_t             *q;
    ngx_http_rlm_session_t  *s;

    ngx_shmtx_lock(&z->shpool->mutex);

    /*
     * a session still being created this long after its acquire lost its
     * worker: nobody will take the sandbox either
     */

    s = ngx_http_rlm_session_lookup_locked(z, id);
    held = s != NULL && ngx_strcmp(s->sandbox, sandbox) == 0;

    for (q = ngx_queue_head(&z->sh->spares);
         !held && q != ngx_queue_sentinel(&z->sh->spares);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_rlm_session_t, lru);
        held = ngx_strcmp(s->sandbox, sandbox) == 0;
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return held;
}
