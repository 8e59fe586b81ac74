
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * GET /metrics (rlm_metrics): the counters of the shared zone in
 * Prometheus' text format, and the helpers that update them.
 */


#include "ngx_http_rlm_metrics.h"

#include <curl/curl.h>


#ifndef NGX_HTTP_RLM_PYTHON_VERSION
#define NGX_HTTP_RLM_PYTHON_VERSION  "unknown"
#endif


static ngx_http_rlm_model_stats_t *ngx_http_rlm_metrics_model(
    ngx_http_rlm_zone_t *z, ngx_str_t *name);
static ngx_uint_t ngx_http_rlm_metrics_name_ok(ngx_str_t *name);
static void ngx_http_rlm_metrics_observe(ngx_atomic_t *hist,
    ngx_atomic_t *sum, ngx_msec_t ms);
static size_t ngx_http_rlm_metrics_size(ngx_uint_t n);
static u_char *ngx_http_rlm_metrics_models(u_char *p, u_char *last,
    ngx_http_rlm_models_t *m, ngx_uint_t n);
static u_char *ngx_http_rlm_metrics_hist(u_char *p, u_char *last,
    const char *family, u_char *model, size_t len, ngx_atomic_t *hist,
    ngx_atomic_t sum_ms);


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

/* model calls and completions take longer: buckets in milliseconds */
static const ngx_msec_t  ngx_http_rlm_lhist_ms[NGX_HTTP_RLM_LHIST_N] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000,
    300000, (ngx_msec_t) -1
};

static const char  *ngx_http_rlm_lhist_le[NGX_HTTP_RLM_LHIST_N] = {
    "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120",
    "300", "+Inf"
};

static const char  *ngx_http_rlm_outcome_names[NGX_HTTP_RLM_OUTCOME_N] = {
    "stop", "length", "error"
};

static const char  *ngx_http_rlm_call_classes[NGX_HTTP_RLM_CALL_CLASSES] = {
    "none", "2xx", "3xx", "4xx", "5xx"
};

static const char  *ngx_http_rlm_acquire_names[NGX_HTTP_RLM_ACQUIRE_N] = {
    "ok", "limit", "error", "unreachable"
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


/*
 * The counters of a model: its slot, claimed on first sight, or "other"
 * for a name that cannot be a label value as it is, or once every slot
 * is taken.  The mutex is held only while a new slot is claimed.
 */

static ngx_http_rlm_model_stats_t *
ngx_http_rlm_metrics_model(ngx_http_rlm_zone_t *z, ngx_str_t *name)
{
    ngx_uint_t              i, n;
    ngx_http_rlm_models_t  *m;

    m = &z->sh->models;

    if (!ngx_http_rlm_metrics_name_ok(name)) {
        goto other;
    }

    n = m->nmodels;

    for (i = 0; i < n; i++) {
        if (m->lens[i] == name->len
            && ngx_memcmp(m->names[i], name->data, name->len) == 0)
        {
            return &m->stats[i];
        }
    }

    if (n == NGX_HTTP_RLM_MODELS_MAX) {
        goto other;
    }

    ngx_shmtx_lock(&z->shpool->mutex);

    /* another worker may have claimed slots meanwhile */

    for ( /* void */ ; i < m->nmodels; i++) {
        if (m->lens[i] == name->len
            && ngx_memcmp(m->names[i], name->data, name->len) == 0)
        {
            ngx_shmtx_unlock(&z->shpool->mutex);
            return &m->stats[i];
        }
    }

    if (i == NGX_HTTP_RLM_MODELS_MAX) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        goto other;
    }

    ngx_memcpy(m->names[i], name->data, name->len);
    m->lens[i] = name->len;

    /* the name is in place before readers can see the slot */
    ngx_memory_barrier();

    m->nmodels = i + 1;

    ngx_shmtx_unlock(&z->shpool->mutex);

    return &m->stats[i];

other:

    if (!m->other_used) {
        m->other_used = 1;
    }

    return &m->other;
}


/*
 * Model names come from clients and from model-written code: only names
 * made of the characters model names use get a label of their own, so a
 * label value never needs escaping.
 */

static ngx_uint_t
ngx_http_rlm_metrics_name_ok(ngx_str_t *name)
{
    u_char      c;
    ngx_uint_t  i;

    if (name->len == 0 || name->len > NGX_HTTP_RLM_MODEL_NAME_LEN) {
        return 0;
    }

    for (i = 0; i < name->len; i++) {
        c = name->data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || c == '.' || c == '_' || c == '-' || c == ':' || c == '/'
            || c == '@' || c == '+')
        {
            continue;
        }

        return 0;
    }

    return 1;
}


static void
ngx_http_rlm_metrics_observe(ngx_atomic_t *hist, ngx_atomic_t *sum,
    ngx_msec_t ms)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_RLM_LHIST_N - 1; i++) {
        if (ms <= ngx_http_rlm_lhist_ms[i]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&hist[i], 1);
    (void) ngx_atomic_fetch_add(sum, ms);
}


void
ngx_http_rlm_metrics_completion(ngx_http_request_t *r, ngx_str_t *model,
    ngx_http_rlm_outcome_e outcome, ngx_uint_t iterations)
{
    ngx_msec_int_t               ms;
    ngx_time_t                  *tp;
    ngx_http_rlm_zone_t         *z;
    ngx_http_rlm_model_stats_t  *st;

    z = ngx_http_rlm_zone();
    if (z == NULL || z->sh == NULL) {
        return;
    }

    st = ngx_http_rlm_metrics_model(z, model);

    tp = ngx_timeofday();
    ms = (ngx_msec_int_t) ((tp->sec - r->start_sec) * 1000
                           + (tp->msec - r->start_msec));

    (void) ngx_atomic_fetch_add(&st->completions[outcome], 1);
    (void) ngx_atomic_fetch_add(&st->iterations, iterations);

    ngx_http_rlm_metrics_observe(st->completion_hist, &st->completion_ms,
                                 ms > 0 ? (ngx_msec_t) ms : 0);
}


void
ngx_http_rlm_metrics_model_call(ngx_http_rlm_llm_call_t *call)
{
    ngx_uint_t                   code, cls;
    ngx_http_rlm_zone_t         *z;
    ngx_http_rlm_model_stats_t  *st;

    z = ngx_http_rlm_zone();
    if (z == NULL || z->sh == NULL) {
        return;
    }

    st = ngx_http_rlm_metrics_model(z, &call->asked);

    code = call->error;
    if (code >= NGX_HTTP_RLM_CALL_CODES) {
        code = NGX_HTTP_RLM_LLM_ERR_INTERNAL;
    }

    cls = (call->status >= 200 && call->status < 600)
          ? call->status / 100 - 1 : 0;

    (void) ngx_atomic_fetch_add(&st->calls[code][cls], 1);

    ngx_http_rlm_metrics_observe(st->call_hist, &st->call_ms,
                                 ngx_current_msec - call->started);

    if (call->has_usage) {
        (void) ngx_atomic_fetch_add(&st->prompt_tokens, call->prompt_tokens);
        (void) ngx_atomic_fetch_add(&st->completion_tokens,
                                    call->completion_tokens);
    }
}


void
ngx_http_rlm_metrics_subcall(ngx_str_t *model, ngx_uint_t child)
{
    ngx_http_rlm_zone_t         *z;
    ngx_http_rlm_model_stats_t  *st;

    z = ngx_http_rlm_zone();
    if (z == NULL || z->sh == NULL) {
        return;
    }

    st = ngx_http_rlm_metrics_model(z, model);

    (void) ngx_atomic_fetch_add(&st->subcalls[child ? 1 : 0], 1);
}


void
ngx_http_rlm_metrics_acquire(json_t *reply)
{
    json_t               *err;
    const char           *code;
    ngx_uint_t            i;
    ngx_http_rlm_zone_t  *z;

    z = ngx_http_rlm_zone();
    if (z == NULL || z->sh == NULL) {
        return;
    }

    if (reply == NULL) {
        i = NGX_HTTP_RLM_ACQUIRE_UNREACHABLE;

    } else if (json_is_true(json_object_get(reply, "ok"))) {
        i = NGX_HTTP_RLM_ACQUIRE_OK;

    } else {
        err = json_object_get(reply, "error");
        code = json_string_value(json_object_get(err, "code"));

        i = (code && ngx_strcmp(code, "limit") == 0)
            ? NGX_HTTP_RLM_ACQUIRE_LIMIT : NGX_HTTP_RLM_ACQUIRE_ERROR;
    }

    (void) ngx_atomic_fetch_add(&z->sh->stats.acquires[i], 1);
}


ngx_int_t
ngx_http_rlm_metrics_handler(ngx_http_request_t *r)
{
    u_char                    *p, *start;
    size_t                     size;
    ngx_int_t                  rc;
    ngx_uint_t                 i, live, spares, cumulative, nmodels;
    ngx_buf_t                 *b;
    ngx_chain_t                out;
    ngx_http_rlm_zone_t       *z;
    ngx_http_rlm_stats_t      *st;
    ngx_http_rlm_main_conf_t  *rmcf;
    curl_version_info_data    *cv;

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

    /* slots claimed after this are left for the next scrape */
    nmodels = ngx_min(z->sh->models.nmodels, NGX_HTTP_RLM_MODELS_MAX);

    size = 16384 + ngx_http_rlm_metrics_size(nmodels);

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
            "# HELP rlm_sessions_created_total Sessions that got a "
            "sandbox.\n"
            "# TYPE rlm_sessions_created_total counter\n"
            "rlm_sessions_created_total %uA\n"
            "# HELP rlm_sessions_from_spare_total Sessions that took a "
            "spare sandbox instead of asking the manager.\n"
            "# TYPE rlm_sessions_from_spare_total counter\n"
            "rlm_sessions_from_spare_total %uA\n"
            "# HELP rlm_sessions_deleted_total Sessions deleted by a "
            "client or at the end of a child loop.\n"
            "# TYPE rlm_sessions_deleted_total counter\n"
            "rlm_sessions_deleted_total %uA\n"
            "# HELP rlm_sessions_expired_total Sessions removed after "
            "rlm_session_idle_timeout.\n"
            "# TYPE rlm_sessions_expired_total counter\n"
            "rlm_sessions_expired_total %uA\n"
            "# HELP rlm_sessions_rejected_total Sessions refused for "
            "want of room (rlm_max_sessions, the zone, the manager).\n"
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
            "# HELP rlm_cells_rejected_total Cells refused because "
            "their session's queue was full.\n"
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
            "# HELP rlm_sandbox_starts_total Sandboxes the manager "
            "handed out, to sessions and spares.\n"
            "# TYPE rlm_sandbox_starts_total counter\n"
            "rlm_sandbox_starts_total %uA\n"
            "# HELP rlm_sandbox_orphans_released_total Sandboxes the manager "
            "had handed out that no session held, released by the sweep.\n"
            "# TYPE rlm_sandbox_orphans_released_total counter\n"
            "rlm_sandbox_orphans_released_total %uA\n"
            "# HELP rlm_sandbox_deaths_total Sandboxes that died under "
            "a session, by the reason the manager gave.\n"
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
            "# HELP rlm_context_loads_total Contexts loaded into "
            "sessions.\n"
            "# TYPE rlm_context_loads_total counter\n"
            "rlm_context_loads_total %uA\n"
            "# HELP rlm_context_bytes_total Bytes of the contexts "
            "loaded into sessions.\n"
            "# TYPE rlm_context_bytes_total counter\n"
            "rlm_context_bytes_total %uA\n"
            "# HELP rlm_sandbox_acquires_total Sandboxes asked of the "
            "manager, by isolation tier and answer.\n"
            "# TYPE rlm_sandbox_acquires_total counter\n",
            st->context_loads, st->context_bytes);

    for (i = 0; i < NGX_HTTP_RLM_ACQUIRE_N; i++) {
        p = ngx_slprintf(p, RLM_END,
                         "rlm_sandbox_acquires_total{tier=\"native\","
                         "result=\"%s\"} %uA\n",
                         ngx_http_rlm_acquire_names[i], st->acquires[i]);
    }

    cv = curl_version_info(CURLVERSION_NOW);

    p = ngx_slprintf(p, RLM_END,
            "# HELP ngx_rlm_build_info The module's build: its version, "
            "the nginx it was built for, the Python of its sandboxes, "
            "libcurl and jansson.\n"
            "# TYPE ngx_rlm_build_info gauge\n"
            "ngx_rlm_build_info{version=\"" NGX_HTTP_RLM_VERSION "\","
            "nginx_version=\"" NGINX_VERSION "\","
            "python_version=\"" NGX_HTTP_RLM_PYTHON_VERSION "\","
            "libcurl_version=\"%s\","
            "jansson_version=\"" JANSSON_VERSION "\"} 1\n",
            cv && cv->version ? cv->version : "unknown");

    p = ngx_http_rlm_metrics_models(p, RLM_END, &z->sh->models, nmodels);

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


/* room for the per-model families: one row per slot, and "other" */

static size_t
ngx_http_rlm_metrics_size(ngx_uint_t n)
{
    return (n + 1) * 16384;
}


/*
 * The per-model families.  A family's samples stay together, as the
 * text format wants: the outer loop is the family, the inner the model.
 * Model calls list only the code and status pairs that happened.
 */

static u_char *
ngx_http_rlm_metrics_models(u_char *p, u_char *last, ngx_http_rlm_models_t *m,
    ngx_uint_t n)
{
    size_t                       len;
    u_char                      *name;
    ngx_uint_t                   f, i, j, k, rows;
    ngx_http_rlm_model_stats_t  *st;

    static u_char  other[] = "other";

    static const char  *help[] = {
        "# HELP rlm_completions_total Completions whose loop ran, by "
        "model (as the client named it) and how they ended: stop, length "
        "(a limit ended the loop), error.\n"
        "# TYPE rlm_completions_total counter\n",

        "# HELP rlm_completion_duration_seconds Time from the request's "
        "arrival to the end of its completion.\n"
        "# TYPE rlm_completion_duration_seconds histogram\n",

        "# HELP rlm_completion_iterations_total Iterations of the root "
        "loops of completions.\n"
        "# TYPE rlm_completion_iterations_total counter\n",

        "# HELP rlm_model_calls_total Model calls of the loops, root and "
        "sub-calls, by the model asked, error code and HTTP status class "
        "of the last attempt.\n"
        "# TYPE rlm_model_calls_total counter\n",

        "# HELP rlm_model_call_duration_seconds Time of a model call from "
        "its start to its answer, waits and retries included.\n"
        "# TYPE rlm_model_call_duration_seconds histogram\n",

        "# HELP rlm_model_tokens_total Tokens the provider reported, by "
        "model and type.\n"
        "# TYPE rlm_model_tokens_total counter\n",

        "# HELP rlm_subcalls_total Prompts of llm_query and rlm_query "
        "calls from code, by the model they asked.\n"
        "# TYPE rlm_subcalls_total counter\n"
    };

    rows = n + (m->other_used ? 1 : 0);

    for (f = 0; f < sizeof(help) / sizeof(help[0]); f++) {

        p = ngx_slprintf(p, last, "%s", help[f]);

        for (i = 0; i < rows; i++) {

            if (i < n) {
                name = m->names[i];
                len = m->lens[i];
                st = &m->stats[i];

            } else {
                name = other;
                len = sizeof(other) - 1;
                st = &m->other;
            }

            switch (f) {

            case 0:
                for (j = 0; j < NGX_HTTP_RLM_OUTCOME_N; j++) {
                    p = ngx_slprintf(p, last,
                                     "rlm_completions_total{model=\"%*s\","
                                     "outcome=\"%s\"} %uA\n", len, name,
                                     ngx_http_rlm_outcome_names[j],
                                     st->completions[j]);
                }
                break;

            case 1:
                p = ngx_http_rlm_metrics_hist(p, last,
                                              "rlm_completion_duration_"
                                              "seconds", name, len,
                                              st->completion_hist,
                                              st->completion_ms);
                break;

            case 2:
                p = ngx_slprintf(p, last,
                                 "rlm_completion_iterations_total"
                                 "{model=\"%*s\"} %uA\n", len, name,
                                 st->iterations);
                break;

            case 3:
                for (j = 0; j < NGX_HTTP_RLM_CALL_CODES; j++) {
                    for (k = 0; k < NGX_HTTP_RLM_CALL_CLASSES; k++) {
                        if (st->calls[j][k] == 0) {
                            continue;
                        }

                        p = ngx_slprintf(p, last,
                                         "rlm_model_calls_total"
                                         "{model=\"%*s\",code=\"%s\","
                                         "status=\"%s\"} %uA\n", len, name,
                                         ngx_http_rlm_llm_error_name(
                                             (ngx_http_rlm_llm_error_e) j),
                                         ngx_http_rlm_call_classes[k],
                                         st->calls[j][k]);
                    }
                }
                break;

            case 4:
                p = ngx_http_rlm_metrics_hist(p, last,
                                              "rlm_model_call_duration_"
                                              "seconds", name, len,
                                              st->call_hist, st->call_ms);
                break;

            case 5:
                p = ngx_slprintf(p, last,
                                 "rlm_model_tokens_total{model=\"%*s\","
                                 "type=\"prompt\"} %uA\n"
                                 "rlm_model_tokens_total{model=\"%*s\","
                                 "type=\"completion\"} %uA\n",
                                 len, name, st->prompt_tokens,
                                 len, name, st->completion_tokens);
                break;

            default:
                p = ngx_slprintf(p, last,
                                 "rlm_subcalls_total{model=\"%*s\","
                                 "fn=\"llm_query\"} %uA\n"
                                 "rlm_subcalls_total{model=\"%*s\","
                                 "fn=\"rlm_query\"} %uA\n",
                                 len, name, st->subcalls[0],
                                 len, name, st->subcalls[1]);
                break;
            }
        }
    }

    return p;
}


/* a histogram of one model; the count is the sum of its buckets */

static u_char *
ngx_http_rlm_metrics_hist(u_char *p, u_char *last, const char *family,
    u_char *model, size_t len, ngx_atomic_t *hist, ngx_atomic_t sum_ms)
{
    ngx_uint_t  i, cumulative;

    cumulative = 0;

    for (i = 0; i < NGX_HTTP_RLM_LHIST_N; i++) {
        cumulative += hist[i];
        p = ngx_slprintf(p, last, "%s_bucket{model=\"%*s\",le=\"%s\"} %ui\n",
                         family, len, model, ngx_http_rlm_lhist_le[i],
                         cumulative);
    }

    return ngx_slprintf(p, last,
                        "%s_sum{model=\"%*s\"} %uA.%03uA\n"
                        "%s_count{model=\"%*s\"} %ui\n",
                        family, len, model, sum_ms / 1000, sum_ms % 1000,
                        family, len, model, cumulative);
}
