
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * GET /metrics (rlm_metrics): the counters of the shared zone in
 * Prometheus' text format, and the helpers that update them.
 */


#include "ngx_http_rlm_module.h"


static const char  *ngx_http_rlm_cell_names[NGX_HTTP_RLM_CELL_NSTATUS] = {
    "ok", "error", "timeout", "oom", "output_truncated", "crashed",
    "sandbox_lost", "sandbox_error"
};

static const char  *ngx_http_rlm_death_names[NGX_HTTP_RLM_DEATH_N] = {
    "oom", "crashed", "killed", "exited", "limit"
};

/* upper bounds of the latency buckets, in microseconds */
static const ngx_uint_t  ngx_http_rlm_hist_us[NGX_HTTP_RLM_HIST_N] = {
    1000, 5000, 10000, 50000, 100000, 500000, 1000000, 5000000, 10000000,
    30000000, (ngx_uint_t) -1
};

static const char  *ngx_http_rlm_hist_le[NGX_HTTP_RLM_HIST_N] = {
    "0.001", "0.005", "0.01", "0.05", "0.1", "0.5", "1", "5", "10", "30",
    "+Inf"
};


const char *
ngx_http_rlm_cell_status_name(ngx_http_rlm_cell_status_e st)
{
    return ngx_http_rlm_cell_names[st];
}


void
ngx_http_rlm_metrics_cell(ngx_http_rlm_cell_status_e status, ngx_uint_t us)
{
    ngx_uint_t             i;
    ngx_http_rlm_zone_t   *z;
    ngx_http_rlm_stats_t  *st;

    z = ngx_http_rlm_zone();
    if (z == NULL || z->sh == NULL) {
        return;
    }

    st = &z->sh->stats;

    (void) ngx_atomic_fetch_add(&st->cells[status], 1);
    (void) ngx_atomic_fetch_add(&st->cell_us_sum, us);
    (void) ngx_atomic_fetch_add(&st->cell_count, 1);

    /* buckets are not cumulative here; the handler sums them */

    for (i = 0; i < NGX_HTTP_RLM_HIST_N - 1; i++) {
        if (us <= ngx_http_rlm_hist_us[i]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&st->cell_hist[i], 1);
}


void
ngx_http_rlm_metrics_death(const char *reason)
{
    ngx_uint_t            i;
    ngx_http_rlm_zone_t  *z;

    z = ngx_http_rlm_zone();
    if (z == NULL || z->sh == NULL) {
        return;
    }

    for (i = 0; i < NGX_HTTP_RLM_DEATH_N; i++) {
        if (ngx_strcmp(reason, ngx_http_rlm_death_names[i]) == 0) {
            break;
        }
    }

    if (i == NGX_HTTP_RLM_DEATH_N) {
        /* lost with the manager, or for a reason the manager did not say */
        if (ngx_strcmp(reason, "session deleted") == 0) {
            return;
        }

        i = NGX_HTTP_RLM_DEATH_CRASHED;

        if (ngx_strcmp(reason, "manager restarted") == 0) {
            i = NGX_HTTP_RLM_DEATH_KILLED;

        } else if (ngx_strcmp(reason, "wall_limit") == 0
                   || ngx_strcmp(reason, "cpu_limit") == 0)
        {
            /* killed from outside, or ended itself, on a time limit */
            i = NGX_HTTP_RLM_DEATH_LIMIT;
        }
    }

    (void) ngx_atomic_fetch_add(&z->sh->stats.sandbox_deaths[i], 1);
}


ngx_int_t
ngx_http_rlm_metrics_handler(ngx_http_request_t *r)
{
    u_char                    *p, *start;
    size_t                     size;
    ngx_int_t                  rc;
    ngx_uint_t                 i, live, spares, cumulative;
    ngx_buf_t                 *b;
    ngx_chain_t                out;
    ngx_http_rlm_zone_t       *z;
    ngx_http_rlm_stats_t      *st;
    ngx_http_rlm_main_conf_t  *rmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_ALLOWED,
                                       "invalid_request_error",
                                       "method_not_allowed",
                                       "use GET or HEAD for metrics");
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);
    z = ngx_http_rlm_zone();

    if (z == NULL || z->sh == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    st = &z->sh->stats;

    ngx_shmtx_lock(&z->shpool->mutex);
    live = z->sh->count;
    ngx_shmtx_unlock(&z->shpool->mutex);

    spares = ngx_http_rlm_spare_ready(z);

    size = 8192;

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    start = b->last;
    p = start;

#define RLM_END  (start + size)

    p = ngx_slprintf(p, RLM_END,
            "# HELP rlm_manager_up Whether the last control-socket "
            "exchange with rlm-sandboxd worked.\n"
            "# TYPE rlm_manager_up gauge\n"
            "rlm_manager_up %uA\n"
            "# HELP rlm_manager_restarts_total Restarts of rlm-sandboxd "
            "by nginx.\n"
            "# TYPE rlm_manager_restarts_total counter\n"
            "rlm_manager_restarts_total %uA\n"
            "# HELP rlm_pool_size Warm sandboxes the manager keeps.\n"
            "# TYPE rlm_pool_size gauge\n"
            "rlm_pool_size %ui\n"
            "# HELP rlm_sessions_live Sessions in the table.\n"
            "# TYPE rlm_sessions_live gauge\n"
            "rlm_sessions_live %ui\n"
            "# HELP rlm_sessions_max The session limit.\n"
            "# TYPE rlm_sessions_max gauge\n"
            "rlm_sessions_max %ui\n"
            "# HELP rlm_session_spares Spare sandboxes ready for new "
            "sessions (rlm_session_spares).\n"
            "# TYPE rlm_session_spares gauge\n"
            "rlm_session_spares %ui\n"
            "# TYPE rlm_sessions_created_total counter\n"
            "rlm_sessions_created_total %uA\n"
            "# HELP rlm_sessions_from_spare_total Sessions that took a "
            "spare sandbox instead of asking the manager.\n"
            "# TYPE rlm_sessions_from_spare_total counter\n"
            "rlm_sessions_from_spare_total %uA\n"
            "# TYPE rlm_sessions_deleted_total counter\n"
            "rlm_sessions_deleted_total %uA\n"
            "# TYPE rlm_sessions_expired_total counter\n"
            "rlm_sessions_expired_total %uA\n"
            "# TYPE rlm_sessions_rejected_total counter\n"
            "rlm_sessions_rejected_total{reason=\"limit\"} %uA\n"
            "# HELP rlm_cells_total Cells run, by status.\n"
            "# TYPE rlm_cells_total counter\n",
            st->manager_up, z->sh->super.restarts, rmcf->pool_size, live,
            rmcf->max_sessions, spares, st->sessions_created,
            st->sessions_from_spare, st->sessions_deleted,
            st->sessions_expired, st->sessions_rejected);

    for (i = 0; i < NGX_HTTP_RLM_CELL_NSTATUS; i++) {
        p = ngx_slprintf(p, RLM_END, "rlm_cells_total{status=\"%s\"} %uA\n",
                         ngx_http_rlm_cell_names[i], st->cells[i]);
    }

    p = ngx_slprintf(p, RLM_END,
            "# TYPE rlm_cells_rejected_total counter\n"
            "rlm_cells_rejected_total{reason=\"queue_full\"} %uA\n"
            "# HELP rlm_cell_turns_total Queued cells whose turn came, by "
            "how the worker saw it: woken by the end of a cell in the "
            "same worker, or found by polling.\n"
            "# TYPE rlm_cell_turns_total counter\n"
            "rlm_cell_turns_total{by=\"wake\"} %uA\n"
            "rlm_cell_turns_total{by=\"poll\"} %uA\n"
            "# HELP rlm_sandbox_connections_total Sandbox exchanges of "
            "cells, by whether the worker connected anew or reused an "
            "idle connection.\n"
            "# TYPE rlm_sandbox_connections_total counter\n"
            "rlm_sandbox_connections_total{how=\"new\"} %uA\n"
            "rlm_sandbox_connections_total{how=\"reused\"} %uA\n"
            "# HELP rlm_cell_duration_seconds Wall time of cells as the "
            "worker saw it.\n"
            "# TYPE rlm_cell_duration_seconds histogram\n",
            st->cells_rejected, st->turns_woken, st->turns_polled,
            st->conns_new, st->conns_reused);

    cumulative = 0;

    for (i = 0; i < NGX_HTTP_RLM_HIST_N; i++) {
        cumulative += st->cell_hist[i];
        p = ngx_slprintf(p, RLM_END,
                         "rlm_cell_duration_seconds_bucket{le=\"%s\"} %ui\n",
                         ngx_http_rlm_hist_le[i], cumulative);
    }

    p = ngx_slprintf(p, RLM_END,
            "rlm_cell_duration_seconds_sum %uA.%06uA\n"
            "rlm_cell_duration_seconds_count %uA\n"
            "# TYPE rlm_sandbox_starts_total counter\n"
            "rlm_sandbox_starts_total %uA\n"
            "# HELP rlm_sandbox_orphans_released_total Sandboxes the manager "
            "had handed out that no session held, released by the sweep.\n"
            "# TYPE rlm_sandbox_orphans_released_total counter\n"
            "rlm_sandbox_orphans_released_total %uA\n"
            "# TYPE rlm_sandbox_deaths_total counter\n",
            st->cell_us_sum / 1000000, st->cell_us_sum % 1000000,
            st->cell_count, st->sandbox_starts, st->sandbox_orphans);

    for (i = 0; i < NGX_HTTP_RLM_DEATH_N; i++) {
        p = ngx_slprintf(p, RLM_END,
                         "rlm_sandbox_deaths_total{reason=\"%s\"} %uA\n",
                         ngx_http_rlm_death_names[i],
                         st->sandbox_deaths[i]);
    }

    p = ngx_slprintf(p, RLM_END,
            "# TYPE rlm_context_loads_total counter\n"
            "rlm_context_loads_total %uA\n"
            "# TYPE rlm_context_bytes_total counter\n"
            "rlm_context_bytes_total %uA\n",
            st->context_loads, st->context_bytes);

#undef RLM_END

    b->last = p;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    if (r->method == NGX_HTTP_HEAD) {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}
