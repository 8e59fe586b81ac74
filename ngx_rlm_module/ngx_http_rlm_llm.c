
/*
 * ngx_rlm: chat completion calls to OpenAI-compatible providers.
 *
 * Life of a call: GROUP_QUEUED while its group (the calls of one
 * completion tree) is at its cap, QUEUED while the provider's per-worker
 * cap is reached, RUNNING while an attempt is on the curl multi, BACKOFF
 * between attempts, DONE once done() was called or the call was
 * cancelled.  A call holds its slots from the first attempt to the last,
 * backoff included, so a rate-limited provider is not hit harder.
 *
 * The API key is only ever copied into the Authorization header list.
 * Messages that quote the provider are passed through a redaction that
 * removes the key, since some providers echo a wrong key back.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_rlm_llm.h"


#define NGX_HTTP_RLM_LLM_IDLE      0
#define NGX_HTTP_RLM_LLM_QUEUED    1
#define NGX_HTTP_RLM_LLM_RUNNING   2
#define NGX_HTTP_RLM_LLM_BACKOFF   3
#define NGX_HTTP_RLM_LLM_DONE      4
#define NGX_HTTP_RLM_LLM_GROUP_QUEUED  5    /* waits for a group slot */
#define NGX_HTTP_RLM_LLM_GROUP_FAILED  6    /* failed in give_back() */

#define NGX_HTTP_RLM_LLM_MSG_MAX   512


static ngx_int_t ngx_http_rlm_llm_prepare(ngx_http_rlm_llm_call_t *call,
    json_t *request);
static ngx_int_t ngx_http_rlm_llm_launch(ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_llm_job_done(ngx_http_rlm_curl_job_t *job,
    CURLcode result);
static void ngx_http_rlm_llm_retry_handler(ngx_event_t *ev);
static void ngx_http_rlm_llm_finish(ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_llm_release(ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_llm_kick(ngx_http_rlm_provider_t *provider);
static ngx_int_t ngx_http_rlm_llm_acquire(ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_llm_give_back(ngx_http_rlm_llm_call_t *call,
    ngx_uint_t provider_slot, ngx_uint_t group_slot);
static size_t ngx_http_rlm_llm_write(char *ptr, size_t size, size_t nmemb,
    void *userdata);
static size_t ngx_http_rlm_llm_header(char *ptr, size_t size, size_t nmemb,
    void *userdata);
static int ngx_http_rlm_llm_sse_event(void *ctx, const unsigned char *data,
    size_t len);
static ngx_int_t ngx_http_rlm_llm_parse_body(ngx_http_rlm_llm_call_t *call);
static void ngx_http_rlm_llm_read_usage(ngx_http_rlm_llm_call_t *call,
    json_t *usage);
static ngx_int_t ngx_http_rlm_llm_pstr(ngx_pool_t *pool, const char *s,
    size_t len, ngx_str_t *out);
static void ngx_http_rlm_llm_fail(ngx_http_rlm_llm_call_t *call,
    ngx_http_rlm_llm_error_e error, const char *fmt, ...);
static void ngx_http_rlm_llm_upstream_message(ngx_http_rlm_llm_call_t *call,
    ngx_str_t *out);
static int ngx_http_rlm_llm_append(u_char **buf, size_t *len, size_t *size,
    size_t max, const u_char *data, size_t n);


static const char  *ngx_http_rlm_llm_error_names[] = {
    "ok",
    "provider_unreachable",
    "provider_timeout",
    "provider_rate_limited",
    "provider_error",
    "provider_malformed_response",
    "provider_response_too_large",
    "internal_error"
};


const char *
ngx_http_rlm_llm_error_name(ngx_http_rlm_llm_error_e error)
{
    if ((size_t) error >= sizeof(ngx_http_rlm_llm_error_names)
                          / sizeof(ngx_http_rlm_llm_error_names[0]))
    {
        return "internal_error";
    }

    return ngx_http_rlm_llm_error_names[error];
}


ngx_int_t
ngx_http_rlm_llm_init_process(ngx_cycle_t *cycle, ngx_array_t *providers)
{
    ngx_uint_t                i;
    ngx_http_rlm_provider_t  *p;

    if (providers == NULL) {
        return NGX_OK;
    }

    /* configuration memory is a private copy in every worker */

    p = providers->elts;

    for (i = 0; i < providers->nelts; i++) {
        p[i].active = 0;
        ngx_queue_init(&p[i].waiting);
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_rlm_llm_start(ngx_http_rlm_llm_call_t *call, json_t *request)
{
    ngx_http_rlm_llm_group_t  *group;

    group = call->group;

    if (call->state != NGX_HTTP_RLM_LLM_IDLE || call->provider == NULL) {
        return NGX_ERROR;
    }

    call->started = ngx_current_msec;

    if (ngx_http_rlm_llm_prepare(call, request) != NGX_OK) {
        ngx_http_rlm_llm_release(call);
        return NGX_ERROR;
    }

    call->retry.handler = ngx_http_rlm_llm_retry_handler;
    call->retry.data = call;
    call->retry.log = call->log;

    if (group != NULL && group->max && group->active >= group->max) {
        call->state = NGX_HTTP_RLM_LLM_GROUP_QUEUED;
        ngx_queue_insert_tail(&group->waiting, &call->queue);
        return NGX_OK;
    }

    if (group != NULL) {
        group->active++;
    }

    if (ngx_http_rlm_llm_acquire(call) == NGX_ERROR) {
        if (group != NULL) {
            group->active--;
        }

        call->state = NGX_HTTP_RLM_LLM_IDLE;
        ngx_http_rlm_llm_release(call);
        return NGX_ERROR;
    }

    return NGX_OK;
}


void
ngx_http_rlm_llm_group_init(ngx_http_rlm_llm_group_t *group, ngx_uint_t max)
{
    group->max = max;
    group->active = 0;
    ngx_queue_init(&group->waiting);
}


/*
 * The call holds its group slot (if any): take a provider slot and run,
 * or wait in the provider's queue.  NGX_ERROR only if the first launch
 * failed; the caller then gives the group slot back.
 */

static ngx_int_t
ngx_http_rlm_llm_acquire(ngx_http_rlm_llm_call_t *call)
{
    ngx_http_rlm_provider_t  *provider;

    provider = call->provider;

    if (provider->active >= provider->max_concurrent) {
        call->state = NGX_HTTP_RLM_LLM_QUEUED;
        ngx_queue_insert_tail(&provider->waiting, &call->queue);
        return NGX_OK;
    }

    provider->active++;
    call->state = NGX_HTTP_RLM_LLM_RUNNING;

    if (ngx_http_rlm_llm_launch(call) != NGX_OK) {
        provider->active--;
        return NGX_ERROR;
    }

    return NGX_OK;
}


void
ngx_http_rlm_llm_cancel(ngx_http_rlm_llm_call_t *call)
{
    ngx_uint_t                 provider_slot, group_slot;
    ngx_http_rlm_provider_t   *provider;

    provider = call->provider;
    provider_slot = 0;
    group_slot = 1;

    switch (call->state) {

    case NGX_HTTP_RLM_LLM_GROUP_QUEUED:
        ngx_queue_remove(&call->queue);
        group_slot = 0;
        break;

    case NGX_HTTP_RLM_LLM_QUEUED:
        ngx_queue_remove(&call->queue);
        break;

    case NGX_HTTP_RLM_LLM_RUNNING:
        ngx_http_rlm_curl_cancel(&call->job);
        provider_slot = 1;
        break;

    case NGX_HTTP_RLM_LLM_BACKOFF:
        if (call->retry.timer_set) {
            ngx_del_timer(&call->retry);
        }

        provider_slot = 1;
        break;

    case NGX_HTTP_RLM_LLM_GROUP_FAILED:
        if (call->retry.timer_set) {
            ngx_del_timer(&call->retry);
        }

        break;

    default:
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, call->log, 0,
                   "rlm: call to \"%V\" cancelled", &provider->name);

    call->state = NGX_HTTP_RLM_LLM_DONE;
    ngx_http_rlm_llm_release(call);
    ngx_http_rlm_llm_give_back(call, provider_slot, group_slot);
}


/* frees the call's slots and lets waiting calls take them */

static void
ngx_http_rlm_llm_give_back(ngx_http_rlm_llm_call_t *call,
    ngx_uint_t provider_slot, ngx_uint_t group_slot)
{
    ngx_queue_t               *q;
    ngx_http_rlm_llm_call_t   *next;
    ngx_http_rlm_llm_group_t  *group;

    if (provider_slot) {
        call->provider->active--;
        ngx_http_rlm_llm_kick(call->provider);
    }

    group = call->group;

    if (!group_slot || group == NULL) {
        return;
    }

    group->active--;

    while (!ngx_queue_empty(&group->waiting)
           && (group->max == 0 || group->active < group->max))
    {
        q = ngx_queue_head(&group->waiting);
        ngx_queue_remove(q);

        next = ngx_queue_data(q, ngx_http_rlm_llm_call_t, queue);

        group->active++;

        if (ngx_http_rlm_llm_acquire(next) == NGX_ERROR) {
            /* reported from its own timer, as in kick() */
            next->state = NGX_HTTP_RLM_LLM_GROUP_FAILED;
            next->fail_pending = 1;
            ngx_add_timer(&next->retry, 0);
        }
    }
}


static ngx_int_t
ngx_http_rlm_llm_prepare(ngx_http_rlm_llm_call_t *call, json_t *request)
{
    CURL                     *easy;
    json_t                   *req, *model;
    ngx_http_rlm_provider_t  *provider;

    provider = call->provider;

    if (!json_is_object(request)) {
        return NGX_ERROR;
    }

    /* a shallow copy: the caller's object is not changed */

    req = json_copy(request);
    if (req == NULL) {
        return NGX_ERROR;
    }

    model = json_object_get(req, "model");

    if (!json_is_string(model) || json_string_length(model) == 0) {
        if (provider->model.len == 0) {
            json_decref(req);
            return NGX_ERROR;
        }

        json_object_set_new(req, "model",
                            json_stringn((char *) provider->model.data,
                                         provider->model.len));
        model = json_object_get(req, "model");
    }

    /* the name metrics count the call under */

    if (!json_is_string(model)) {
        json_decref(req);
        return NGX_ERROR;
    }

    call->asked.len = json_string_length(model);
    call->asked.data = ngx_pnalloc(call->pool, call->asked.len);
    if (call->asked.data == NULL) {
        json_decref(req);
        return NGX_ERROR;
    }

    ngx_memcpy(call->asked.data, json_string_value(model), call->asked.len);

    if (call->stream) {
        json_object_set_new(req, "stream", json_true());
        json_object_set_new(req, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));

    } else {
        json_object_del(req, "stream");
        json_object_del(req, "stream_options");
    }

    call->body = json_dumps(req, JSON_COMPACT);
    json_decref(req);

    if (call->body == NULL) {
        return NGX_ERROR;
    }

    call->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (call->headers == NULL) {
        return NGX_ERROR;
    }

    /* no "Expect: 100-continue" round trip for large prompts */
    if (curl_slist_append(call->headers, "Expect:") == NULL) {
        return NGX_ERROR;
    }

    if (provider->auth.len
        && curl_slist_append(call->headers, (char *) provider->auth.data)
           == NULL)
    {
        return NGX_ERROR;
    }

    easy = curl_easy_init();
    if (easy == NULL) {
        return NGX_ERROR;
    }

    call->job.easy = easy;
    call->job.handler = ngx_http_rlm_llm_job_done;
    call->job.data = call;
    call->job.log = call->log;

    curl_easy_setopt(easy, CURLOPT_URL, (char *) provider->endpoint.data);
#if (LIBCURL_VERSION_NUM >= 0x075500)
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, call->headers);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, call->body);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     (curl_off_t) ngx_strlen(call->body));
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, ngx_http_rlm_llm_write);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, call);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, ngx_http_rlm_llm_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, call);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, call->errbuf);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     (long) provider->connect_timeout);
    curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(easy, CURLOPT_USERAGENT,
                     "ngx_rlm (OpenAI-compatible client)");

    /* the key must never reach a log: no verbose mode, no redirects */
    curl_easy_setopt(easy, CURLOPT_VERBOSE, 0L);
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_llm_launch(ngx_http_rlm_llm_call_t *call)
{
    ngx_msec_t                timeout;
    ngx_msec_int_t            left;
    ngx_http_rlm_provider_t  *provider;

    provider = call->provider;
    timeout = provider->timeout;

    if (call->deadline) {
        left = (ngx_msec_int_t) (call->deadline - ngx_current_msec);

        if (left <= 0) {
            ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_TIMEOUT,
                                  "deadline reached before the call");
            return NGX_DECLINED;
        }

        if ((ngx_msec_t) left < timeout) {
            timeout = left;
        }
    }

    /* a fresh attempt */

    call->len = 0;
    call->text_len = 0;
    call->is_sse = 0;
    call->sse_done = 0;
    call->has_retry_after = 0;
    call->stream_error = NGX_HTTP_RLM_LLM_OK;
    call->errbuf[0] = '\0';
    call->finish_reason.len = 0;
    call->id.len = 0;
    call->model.len = 0;
    call->has_usage = 0;

    ngx_http_rlm_sse_free(&call->sse);
    ngx_http_rlm_sse_init(&call->sse, provider->max_response,
                          ngx_http_rlm_llm_sse_event, call);

    curl_easy_setopt(call->job.easy, CURLOPT_TIMEOUT_MS, (long) timeout);

    call->attempts++;

    if (ngx_http_rlm_curl_start(&call->job) != NGX_OK) {
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_INTERNAL,
                              "could not start the transfer");
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_llm_job_done(ngx_http_rlm_curl_job_t *job, CURLcode result)
{
    long                      code;
    ngx_msec_t                delay, exp;
    ngx_uint_t                retryable;
    ngx_str_t                 upstream;
    ngx_http_rlm_llm_call_t  *call;
    ngx_http_rlm_provider_t  *provider;

    call = job->data;
    provider = call->provider;

    code = 0;
    curl_easy_getinfo(job->easy, CURLINFO_RESPONSE_CODE, &code);
    call->status = (ngx_uint_t) code;
    call->error = NGX_HTTP_RLM_LLM_OK;
    retryable = 0;

    if (result == CURLE_WRITE_ERROR
        && call->stream_error != NGX_HTTP_RLM_LLM_OK)
    {
        /* our write callback stopped the transfer; message already set */
        call->error = call->stream_error;

    } else if (result == CURLE_OPERATION_TIMEDOUT) {
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_TIMEOUT,
                              "no complete answer within the timeout");

    } else if (result != CURLE_OK) {
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_CONNECT, "%s",
                              call->errbuf[0] ? call->errbuf
                                              : curl_easy_strerror(result));
        retryable = 1;

    } else if (code >= 200 && code < 300) {
        (void) ngx_http_rlm_llm_parse_body(call);

    } else {
        ngx_http_rlm_llm_upstream_message(call, &upstream);

        ngx_http_rlm_llm_fail(call,
                              code == 429 ? NGX_HTTP_RLM_LLM_ERR_RATE_LIMITED
                                          : NGX_HTTP_RLM_LLM_ERR_STATUS,
                              "HTTP %ui: %V", (ngx_uint_t) code,
                              &upstream);

        retryable = (code == 429 || code == 408 || code >= 500);
    }

    if (call->error == NGX_HTTP_RLM_LLM_OK
        || !retryable
        || call->delivered
        || call->attempts > provider->retries)
    {
        ngx_http_rlm_llm_finish(call);
        return;
    }

    /* exponential backoff with jitter: half fixed, half random */

    exp = provider->backoff;

    if (call->attempts > 1) {
        exp <<= ngx_min(call->attempts - 1, 16);
    }

    exp = ngx_min(exp, provider->backoff_max);
    delay = exp / 2 + (ngx_msec_t) ngx_random() % (exp / 2 + 1);

    if (call->has_retry_after) {
        if (call->retry_after > provider->retry_after_max) {
            ngx_log_error(NGX_LOG_WARN, call->log, 0,
                          "rlm: provider \"%V\" asks to retry after %M ms, "
                          "more than retry_after_max", &provider->name,
                          call->retry_after);
            ngx_http_rlm_llm_finish(call);
            return;
        }

        delay = ngx_max(delay, call->retry_after);
    }

    if (call->deadline
        && (ngx_msec_int_t) (call->deadline - ngx_current_msec - delay) <= 0)
    {
        ngx_http_rlm_llm_finish(call);
        return;
    }

    ngx_log_error(NGX_LOG_WARN, call->log, 0,
                  "rlm: provider \"%V\" attempt %ui failed (%V), "
                  "retrying in %M ms", &provider->name, call->attempts,
                  &call->message, delay);

    call->state = NGX_HTTP_RLM_LLM_BACKOFF;
    ngx_add_timer(&call->retry, delay);
}


static void
ngx_http_rlm_llm_retry_handler(ngx_event_t *ev)
{
    ngx_http_rlm_llm_call_t  *call;

    call = ev->data;

    if (call->fail_pending) {
        ngx_http_rlm_llm_finish(call);
        return;
    }

    call->state = NGX_HTTP_RLM_LLM_RUNNING;
    call->error = NGX_HTTP_RLM_LLM_OK;
    call->message.len = 0;

    if (ngx_http_rlm_llm_launch(call) != NGX_OK) {
        ngx_http_rlm_llm_finish(call);
    }
}


static void
ngx_http_rlm_llm_finish(ngx_http_rlm_llm_call_t *call)
{
    ngx_uint_t                provider_slot;
    ngx_http_rlm_provider_t  *provider;

    provider = call->provider;

    if (call->error != NGX_HTTP_RLM_LLM_OK) {
        ngx_log_error(NGX_LOG_ERR, call->log, 0,
                      "rlm: call to provider \"%V\" failed after %ui "
                      "attempt(s): %V", &provider->name, call->attempts,
                      &call->message);
    }

    /* a call that failed before it got a provider slot has none */
    provider_slot = (call->state != NGX_HTTP_RLM_LLM_GROUP_FAILED);

    call->state = NGX_HTTP_RLM_LLM_DONE;
    ngx_http_rlm_llm_release(call);

    /*
     * Waiting calls take the slots before done() runs: done() may free
     * the call, and the group with it, together with their pool.  No
     * kick calls a done() itself, so nothing runs twice.
     */
    ngx_http_rlm_llm_give_back(call, provider_slot, 1);

    call->done(call);
}


static void
ngx_http_rlm_llm_kick(ngx_http_rlm_provider_t *provider)
{
    ngx_queue_t              *q;
    ngx_http_rlm_llm_call_t  *call;

    while (provider->active < provider->max_concurrent
           && !ngx_queue_empty(&provider->waiting))
    {
        q = ngx_queue_head(&provider->waiting);
        ngx_queue_remove(q);

        call = ngx_queue_data(q, ngx_http_rlm_llm_call_t, queue);

        provider->active++;
        call->state = NGX_HTTP_RLM_LLM_RUNNING;

        if (ngx_http_rlm_llm_launch(call) != NGX_OK) {
            /*
             * Its deadline passed while it waited.  We are inside
             * another call's finish() or cancel(): report from a timer
             * of its own instead of calling done() from here.
             */
            call->state = NGX_HTTP_RLM_LLM_BACKOFF;
            call->fail_pending = 1;
            ngx_add_timer(&call->retry, 0);
        }
    }
}


static void
ngx_http_rlm_llm_release(ngx_http_rlm_llm_call_t *call)
{
    if (call->job.easy) {
        curl_easy_cleanup(call->job.easy);
        call->job.easy = NULL;
    }

    if (call->headers) {
        curl_slist_free_all(call->headers);
        call->headers = NULL;
    }

    free(call->body);
    call->body = NULL;

    ngx_free(call->buf);
    call->buf = NULL;
    call->len = call->size = 0;

    ngx_free(call->text);
    call->text = NULL;
    call->text_len = call->text_size = 0;

    ngx_http_rlm_sse_free(&call->sse);
}


static size_t
ngx_http_rlm_llm_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    ngx_http_rlm_llm_call_t *call = userdata;

    int    rc;
    long   code;
    char  *type;
    size_t n;

    n = size * nmemb;

    if (call->len == 0 && !call->is_sse && call->sse.data == NULL
        && call->sse.line == NULL && call->stream)
    {
        /* first bytes of the body: is it really an event stream? */

        code = 0;
        type = NULL;
        curl_easy_getinfo(call->job.easy, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(call->job.easy, CURLINFO_CONTENT_TYPE, &type);

        if (code >= 200 && code < 300 && type != NULL
            && ngx_strncasecmp((u_char *) type,
                               (u_char *) "text/event-stream", 17) == 0)
        {
            call->is_sse = 1;
        }
    }

    if (!call->is_sse) {
        if (ngx_http_rlm_llm_append(&call->buf, &call->len, &call->size,
                                    call->provider->max_response,
                                    (u_char *) ptr, n)
            != 0)
        {
            ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_TOO_LARGE,
                                  "response larger than %uz bytes",
                                  call->provider->max_response);
            call->stream_error = call->error;
            return 0;
        }

        return n;
    }

    if (call->sse_done) {
        return n;                           /* anything after [DONE] */
    }

    rc = ngx_http_rlm_sse_feed(&call->sse, (unsigned char *) ptr, n);

    if (rc == NGX_HTTP_RLM_SSE_ERROR) {
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_TOO_LARGE,
                              "stream event larger than %uz bytes",
                              call->provider->max_response);
        call->stream_error = call->error;
        return 0;
    }

    if (rc == NGX_HTTP_RLM_SSE_STOP && !call->sse_done) {
        return 0;                           /* stream_error is set */
    }

    return n;
}


static size_t
ngx_http_rlm_llm_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    ngx_http_rlm_llm_call_t *call = userdata;

    size_t     n, len;
    u_char    *p, *last;
    time_t     when;
    ngx_int_t  secs;

    n = size * nmemb;
    p = (u_char *) ptr;
    last = p + n;

    while (last > p && (last[-1] == '\r' || last[-1] == '\n')) {
        last--;
    }

    len = last - p;

    if (len >= 5 && ngx_strncmp(p, "HTTP/", 5) == 0) {
        call->has_retry_after = 0;          /* a new response begins */
        return n;
    }

    if (len < 12 || ngx_strncasecmp(p, (u_char *) "retry-after:", 12) != 0) {
        return n;
    }

    p += 12;

    while (p < last && (*p == ' ' || *p == '\t')) {
        p++;
    }

    if (p == last) {
        return n;
    }

    /* delay-seconds or an HTTP-date */

    secs = ngx_atoi(p, last - p);

    if (secs == NGX_ERROR) {
        when = ngx_parse_http_time(p, last - p);
        if (when == NGX_ERROR) {
            return n;
        }

        secs = (when > ngx_time()) ? when - ngx_time() : 0;
    }

    call->retry_after = (secs > 86400) ? 86400000 : (ngx_msec_t) secs * 1000;
    call->has_retry_after = 1;

    return n;
}


static int
ngx_http_rlm_llm_sse_event(void *ctx, const unsigned char *data, size_t len)
{
    ngx_http_rlm_llm_call_t *call = ctx;

    json_t        *ev, *v, *choice, *delta, *content, *err;
    const char    *s;
    json_error_t   jerr;

    if (len == 6 && ngx_strncmp(data, "[DONE]", 6) == 0) {
        call->sse_done = 1;
        return 1;
    }

    ev = json_loadb((const char *) data, len, 0, &jerr);

    if (!json_is_object(ev)) {
        json_decref(ev);
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_MALFORMED,
                              "stream event is not a JSON object");
        call->stream_error = call->error;
        return 1;
    }

    err = json_object_get(ev, "error");

    if (err != NULL && !json_is_null(err)) {
        v = json_is_object(err) ? json_object_get(err, "message") : err;
        s = json_is_string(v) ? json_string_value(v) : "(no message)";

        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_STATUS,
                              "error event in the stream: %s", s);
        call->stream_error = call->error;
        json_decref(ev);
        return 1;
    }

    v = json_object_get(ev, "id");
    if (call->id.len == 0 && json_is_string(v)) {
        (void) ngx_http_rlm_llm_pstr(call->pool, json_string_value(v),
                                     json_string_length(v), &call->id);
    }

    v = json_object_get(ev, "model");
    if (call->model.len == 0 && json_is_string(v)) {
        (void) ngx_http_rlm_llm_pstr(call->pool, json_string_value(v),
                                     json_string_length(v), &call->model);
    }

    v = json_object_get(ev, "usage");
    if (json_is_object(v)) {
        ngx_http_rlm_llm_read_usage(call, v);
    }

    choice = json_array_get(json_object_get(ev, "choices"), 0);

    if (json_is_object(choice)) {
        delta = json_object_get(choice, "delta");
        content = json_object_get(delta, "content");

        if (json_is_string(content) && json_string_length(content)) {
            if (ngx_http_rlm_llm_append(&call->text, &call->text_len,
                                        &call->text_size,
                                        call->provider->max_response,
                                        (u_char *) json_string_value(content),
                                        json_string_length(content))
                != 0)
            {
                ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_TOO_LARGE,
                                      "streamed answer larger than %uz bytes",
                                      call->provider->max_response);
                call->stream_error = call->error;
                json_decref(ev);
                return 1;
            }

            if (call->delta) {
                call->delivered = 1;

                if (call->delta(call, (u_char *) json_string_value(content),
                                json_string_length(content))
                    != NGX_OK)
                {
                    ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_INTERNAL,
                                          "stream aborted by its consumer");
                    call->stream_error = call->error;
                    json_decref(ev);
                    return 1;
                }
            }
        }

        v = json_object_get(choice, "finish_reason");
        if (json_is_string(v)) {
            (void) ngx_http_rlm_llm_pstr(call->pool, json_string_value(v),
                                         json_string_length(v),
                                         &call->finish_reason);
        }
    }

    json_decref(ev);

    return 0;
}


static ngx_int_t
ngx_http_rlm_llm_parse_body(ngx_http_rlm_llm_call_t *call)
{
    int            rc;
    json_t        *doc, *v, *choice, *message, *content;
    json_error_t   jerr;

    if (call->is_sse) {
        rc = ngx_http_rlm_sse_finish(&call->sse);

        if (call->stream_error != NGX_HTTP_RLM_LLM_OK) {
            call->error = call->stream_error;
            return NGX_ERROR;
        }

        if (rc == NGX_HTTP_RLM_SSE_ERROR) {
            ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_TOO_LARGE,
                                  "stream event too large");
            return NGX_ERROR;
        }

        if (!call->sse_done && call->finish_reason.len == 0) {
            ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_MALFORMED,
                                  "stream ended before [DONE]");
            return NGX_ERROR;
        }

        if (ngx_http_rlm_llm_pstr(call->pool, (char *) call->text,
                                  call->text_len, &call->content)
            != NGX_OK)
        {
            ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_INTERNAL,
                                  "out of memory");
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    doc = json_loadb((char *) call->buf, call->len, 0, &jerr);

    if (!json_is_object(doc)) {
        json_decref(doc);
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_MALFORMED,
                              "response is not a JSON object (%s)",
                              jerr.text);
        return NGX_ERROR;
    }

    choice = json_array_get(json_object_get(doc, "choices"), 0);
    message = json_object_get(choice, "message");
    content = json_object_get(message, "content");

    if (!json_is_object(message)
        || !(json_is_string(content) || json_is_null(content)
             || content == NULL))
    {
        json_decref(doc);
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_MALFORMED,
                              "response has no choices[0].message");
        return NGX_ERROR;
    }

    if (json_is_string(content)) {
        rc = ngx_http_rlm_llm_pstr(call->pool, json_string_value(content),
                                   json_string_length(content),
                                   &call->content);

    } else {
        rc = ngx_http_rlm_llm_pstr(call->pool, "", 0, &call->content);
    }

    if (rc != NGX_OK) {
        json_decref(doc);
        ngx_http_rlm_llm_fail(call, NGX_HTTP_RLM_LLM_ERR_INTERNAL,
                              "out of memory");
        return NGX_ERROR;
    }

    v = json_object_get(choice, "finish_reason");
    if (json_is_string(v)) {
        (void) ngx_http_rlm_llm_pstr(call->pool, json_string_value(v),
                                     json_string_length(v),
                                     &call->finish_reason);
    }

    v = json_object_get(doc, "id");
    if (json_is_string(v)) {
        (void) ngx_http_rlm_llm_pstr(call->pool, json_string_value(v),
                                     json_string_length(v), &call->id);
    }

    v = json_object_get(doc, "model");
    if (json_is_string(v)) {
        (void) ngx_http_rlm_llm_pstr(call->pool, json_string_value(v),
                                     json_string_length(v), &call->model);
    }

    v = json_object_get(doc, "usage");
    if (json_is_object(v)) {
        ngx_http_rlm_llm_read_usage(call, v);
    }

    json_decref(doc);

    return NGX_OK;
}


static void
ngx_http_rlm_llm_read_usage(ngx_http_rlm_llm_call_t *call, json_t *usage)
{
    json_t  *v;

    v = json_object_get(usage, "prompt_tokens");
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        call->prompt_tokens = json_integer_value(v);
        call->has_usage = 1;
    }

    v = json_object_get(usage, "completion_tokens");
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        call->completion_tokens = json_integer_value(v);
        call->has_usage = 1;
    }

    v = json_object_get(usage, "total_tokens");
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        call->total_tokens = json_integer_value(v);

    } else {
        call->total_tokens = call->prompt_tokens + call->completion_tokens;
    }
}


static ngx_int_t
ngx_http_rlm_llm_pstr(ngx_pool_t *pool, const char *s, size_t len,
    ngx_str_t *out)
{
    u_char  *p;

    p = ngx_pnalloc(pool, len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (len) {
        ngx_memcpy(p, s, len);
    }

    p[len] = '\0';

    out->data = p;
    out->len = len;

    return NGX_OK;
}


/*
 * Records the error and its message in the call's pool, with every
 * occurrence of the provider's key replaced.
 */

static void
ngx_http_rlm_llm_fail(ngx_http_rlm_llm_call_t *call,
    ngx_http_rlm_llm_error_e error, const char *fmt, ...)
{
    size_t     len, klen;
    u_char    *buf, *last, *out, *p, *q;
    va_list    args;
    ngx_str_t *key;

    call->error = error;

    /* messages are NUL-terminated as well, for APIs that take char * */

    buf = ngx_pnalloc(call->pool, NGX_HTTP_RLM_LLM_MSG_MAX + 1);
    if (buf == NULL) {
        ngx_str_set(&call->message, "out of memory");
        return;
    }

    va_start(args, fmt);
    last = ngx_vslprintf(buf, buf + NGX_HTTP_RLM_LLM_MSG_MAX, fmt, args);
    va_end(args);

    *last = '\0';

    len = last - buf;

    for (p = buf; p < last; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            *p = ' ';                       /* one log line per message */
        }
    }

    key = &call->provider->key;
    klen = key->len;

    if (klen == 0 || len < klen) {
        call->message.data = buf;
        call->message.len = len;
        return;
    }

    out = ngx_pnalloc(call->pool, len / klen * 10 + len + 1);
    if (out == NULL) {
        ngx_str_set(&call->message, "out of memory");
        return;
    }

    q = out;
    p = buf;

    while (p < last) {
        if ((size_t) (last - p) >= klen && ngx_memcmp(p, key->data, klen) == 0)
        {
            q = ngx_cpymem(q, "[redacted]", 10);
            p += klen;
            continue;
        }

        *q++ = *p++;
    }

    *q = '\0';

    call->message.data = out;
    call->message.len = q - out;
}


static void
ngx_http_rlm_llm_upstream_message(ngx_http_rlm_llm_call_t *call,
    ngx_str_t *out)
{
    json_t        *doc, *err, *msg;
    json_error_t   jerr;

    out->len = ngx_min(call->len, 200);
    out->data = call->buf ? call->buf : (u_char *) "";

    doc = json_loadb((char *) call->buf, call->len, 0, &jerr);
    if (doc == NULL) {
        return;
    }

    err = json_object_get(doc, "error");
    msg = json_is_object(err) ? json_object_get(err, "message") : err;

    if (json_is_string(msg)) {
        (void) ngx_http_rlm_llm_pstr(call->pool, json_string_value(msg),
                                     ngx_min(json_string_length(msg), 300),
                                     out);
    }

    json_decref(doc);
}


static int
ngx_http_rlm_llm_append(u_char **buf, size_t *len, size_t *size, size_t max,
    const u_char *data, size_t n)
{
    size_t   want;
    u_char  *nbuf;

    if (n == 0) {
        return 0;
    }

    if (n > max || *len > max - n) {
        return -1;
    }

    if (*len + n > *size) {
        want = *size ? *size * 2 : 4096;

        while (want < *len + n) {
            want *= 2;
        }

        nbuf = realloc(*buf, want);
        if (nbuf == NULL) {
            return -1;
        }

        *buf = nbuf;
        *size = want;
    }

    ngx_memcpy(*buf + *len, data, n);
    *len += n;

    return 0;
}
