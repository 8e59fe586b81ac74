
/*
 * ngx_rlm: model providers and the worker's curl multi, as their own
 * nginx module (ngx_http_rlm_llm_module, built into the same .so as
 * ngx_http_rlm_module).
 *
 * Directives:
 *
 *     rlm_provider NAME url=... [key_env=VAR|key_file=PATH] ...;   (http)
 *     rlm_chat_passthrough [NAME];                            (location)
 *     rlm_llm_status;                                         (location)
 *
 * rlm_chat_passthrough forwards an OpenAI chat completion request to a
 * provider through the call layer and answers with what that layer
 * understood (assistant text, finish reason, usage), as chat.completion
 * or, for "stream": true, as chat.completion.chunk events.  It is a
 * diagnostic and test surface for the call layer, not the RLM endpoint.
 * The request header "X-RLM-Upstream-Stream: on" makes it ask the
 * provider for SSE while answering in one piece; "X-RLM-Deadline: MS"
 * gives the call a deadline MS milliseconds from now; "X-RLM-Group-Cap: N"
 * puts the calls of one main request (its subrequests) under a shared cap
 * of N, as the calls of one completion tree will be.
 *
 * rlm_llm_status reports this worker's counters as JSON.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <jansson.h>

#include "ngx_http_rlm_module.h"
#include "ngx_http_rlm_llm.h"
#include "ngx_http_rlm_conf.h"
#include "ngx_http_rlm_metrics.h"


typedef struct {
    ngx_array_t                *providers;
} ngx_http_rlm_llm_main_conf_t;


typedef enum {
    NGX_HTTP_RLM_LLM_HANDLER_NONE = 0,
    NGX_HTTP_RLM_LLM_HANDLER_PASSTHROUGH,
    NGX_HTTP_RLM_LLM_HANDLER_STATUS
} ngx_http_rlm_llm_handler_e;


typedef struct {
    ngx_http_rlm_llm_handler_e  handler;
    ngx_str_t                   provider_name;
    ngx_http_rlm_provider_t    *provider;
    ngx_http_rlm_conf_where_t   where;          /* of the handler directive */
} ngx_http_rlm_llm_loc_conf_t;


typedef struct {
    ngx_http_request_t         *request;
    ngx_http_rlm_llm_call_t     call;
    time_t                      created;
    unsigned                    client_stream:1;
    unsigned                    include_usage:1;
    unsigned                    header_sent:1;
} ngx_http_rlm_llm_pt_ctx_t;


static ngx_int_t ngx_http_rlm_llm_init_worker(ngx_cycle_t *cycle);
static void ngx_http_rlm_llm_exit_worker(ngx_cycle_t *cycle);
static void *ngx_http_rlm_llm_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_rlm_llm_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_rlm_llm_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_rlm_llm_provider(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_rlm_llm_set_handler(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_rlm_llm_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_rlm_llm_status_handler(ngx_http_request_t *r);
static void ngx_http_rlm_llm_body_handler(ngx_http_request_t *r);
static void ngx_http_rlm_llm_cleanup(void *data);
static void ngx_http_rlm_llm_done(ngx_http_rlm_llm_call_t *call);
static ngx_int_t ngx_http_rlm_llm_delta(ngx_http_rlm_llm_call_t *call,
    u_char *text, size_t len);
static ngx_int_t ngx_http_rlm_llm_stream_header(
    ngx_http_rlm_llm_pt_ctx_t *ctx);
static ngx_int_t ngx_http_rlm_llm_answer(ngx_http_rlm_llm_pt_ctx_t *ctx);
static json_t *ngx_http_rlm_llm_usage_json(ngx_http_rlm_llm_call_t *call);
static json_t *ngx_http_rlm_llm_chunk(ngx_http_rlm_llm_pt_ctx_t *ctx);
static ngx_int_t ngx_http_rlm_llm_add_header(ngx_http_request_t *r,
    char *name, ngx_uint_t value);


static ngx_command_t  ngx_http_rlm_llm_commands[] = {

    { ngx_string("rlm_provider"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_rlm_llm_provider,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("rlm_chat_passthrough"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_rlm_llm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) NGX_HTTP_RLM_LLM_HANDLER_PASSTHROUGH },

    { ngx_string("rlm_llm_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_rlm_llm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) NGX_HTTP_RLM_LLM_HANDLER_STATUS },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_rlm_llm_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    ngx_http_rlm_llm_create_main_conf,     /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_rlm_llm_create_loc_conf,      /* create location configuration */
    ngx_http_rlm_llm_merge_loc_conf        /* merge location configuration */
};


ngx_module_t  ngx_http_rlm_llm_module = {
    NGX_MODULE_V1,
    &ngx_http_rlm_llm_module_ctx,          /* module context */
    ngx_http_rlm_llm_commands,             /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_rlm_llm_init_worker,          /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_rlm_llm_exit_worker,          /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* the providers of the configuration being read (cf), or running */

ngx_array_t *
ngx_http_rlm_llm_providers(ngx_conf_t *cf)
{
    ngx_http_rlm_llm_main_conf_t  *lmcf;

    if (cf) {
        lmcf = ngx_http_conf_get_module_main_conf(cf,
                                                  ngx_http_rlm_llm_module);

    } else {
        lmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                                   ngx_http_rlm_llm_module);
    }

    return lmcf ? lmcf->providers : NULL;
}


static ngx_int_t
ngx_http_rlm_llm_init_worker(ngx_cycle_t *cycle)
{
    ngx_http_rlm_llm_main_conf_t  *lmcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    lmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_rlm_llm_module);

    /* no provider, no multi handle: nothing to pay for */

    if (lmcf == NULL || lmcf->providers->nelts == 0) {
        return NGX_OK;
    }

    if (ngx_http_rlm_llm_init_process(cycle, lmcf->providers) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_rlm_curl_init_process(cycle);
}


static void
ngx_http_rlm_llm_exit_worker(ngx_cycle_t *cycle)
{
    ngx_http_rlm_curl_exit_process(cycle);
}


static void *
ngx_http_rlm_llm_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_rlm_llm_main_conf_t  *lmcf;

    lmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_rlm_llm_main_conf_t));
    if (lmcf == NULL) {
        return NULL;
    }

    lmcf->providers = ngx_array_create(cf->pool, 2,
                                       sizeof(ngx_http_rlm_provider_t));
    if (lmcf->providers == NULL) {
        return NULL;
    }

    return lmcf;
}


static void *
ngx_http_rlm_llm_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_rlm_llm_loc_conf_t  *llcf;

    llcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_rlm_llm_loc_conf_t));
    if (llcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     llcf->handler = NGX_HTTP_RLM_LLM_HANDLER_NONE;
     *     llcf->provider_name = { 0, NULL };
     *     llcf->provider = NULL;
     */

    return llcf;
}


static char *
ngx_http_rlm_llm_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_rlm_llm_loc_conf_t *conf = child;

    ngx_http_rlm_provider_t       *p;
    ngx_http_rlm_llm_main_conf_t  *lmcf;

    /* merging runs after the whole http block: every provider is known */

    if (conf->handler != NGX_HTTP_RLM_LLM_HANDLER_PASSTHROUGH
        || conf->provider != NULL)
    {
        return NGX_CONF_OK;
    }

    lmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_rlm_llm_module);

    if (lmcf->providers->nelts == 0) {
        ngx_http_rlm_conf_error_at(cf->log, &conf->where,
                                   "\"rlm_chat_passthrough\" needs an "
                                   "\"rlm_provider\"");
        return NGX_CONF_ERROR;
    }

    if (conf->provider_name.len == 0) {
        p = lmcf->providers->elts;
        conf->provider = &p[0];
        return NGX_CONF_OK;
    }

    conf->provider = ngx_http_rlm_llm_find_provider(lmcf->providers,
                                                    &conf->provider_name);
    if (conf->provider == NULL) {
        ngx_http_rlm_conf_error_at(cf->log, &conf->where,
                                   "unknown rlm_provider \"%V\"",
                                   &conf->provider_name);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_rlm_llm_provider(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_rlm_llm_main_conf_t *lmcf = conf;

    char                     *rv;
    ngx_str_t                *value;
    ngx_http_rlm_provider_t  *p;

    value = cf->args->elts;

    if (ngx_http_rlm_llm_find_provider(lmcf->providers, &value[1]) != NULL) {
        return "is duplicate";
    }

    p = ngx_array_push(lmcf->providers);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    rv = ngx_http_rlm_llm_parse_provider(cf, p);

    if (rv != NGX_CONF_OK) {
        lmcf->providers->nelts--;
    }

    return rv;
}


static char *
ngx_http_rlm_llm_set_handler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_rlm_llm_loc_conf_t *llcf = conf;

    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;

    if (llcf->handler != NGX_HTTP_RLM_LLM_HANDLER_NONE) {
        return "is duplicate";
    }

    llcf->handler = (ngx_http_rlm_llm_handler_e) (uintptr_t) cmd->post;
    ngx_http_rlm_conf_where(cf, &llcf->where);

    if (cf->args->nelts > 1) {
        value = cf->args->elts;
        llcf->provider_name = value[1];
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_rlm_llm_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_rlm_llm_handler(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_http_rlm_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_llm_module);

    if (llcf->handler == NGX_HTTP_RLM_LLM_HANDLER_STATUS) {
        return ngx_http_rlm_llm_status_handler(r);
    }

    if (r->method != NGX_HTTP_POST) {
        return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_ALLOWED,
                                       "invalid_request_error",
                                       "method_not_allowed",
                                       "use POST");
    }

    rc = ngx_http_read_client_request_body(r, ngx_http_rlm_llm_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_llm_body_handler(ngx_http_request_t *r)
{
    json_t                       *req, *v;
    ngx_int_t                     deadline, group_cap;
    ngx_str_t                     body;
    ngx_table_elt_t              *h;
    ngx_list_part_t              *part;
    ngx_uint_t                    i, upstream_stream;
    json_error_t                  jerr;
    ngx_pool_cleanup_t           *cln;
    ngx_http_rlm_llm_pt_ctx_t    *ctx;
    ngx_http_rlm_llm_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_llm_module);

    if (ngx_http_rlm_read_body(r, &body) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    req = json_loadb((char *) body.data, body.len, 0, &jerr);

    if (!json_is_object(req)
        || !json_is_array(json_object_get(req, "messages")))
    {
        json_decref(req);
        ngx_http_finalize_request(r,
            ngx_http_rlm_send_error(r, NGX_HTTP_BAD_REQUEST,
                                    "invalid_request_error", "invalid_body",
                                    "expected a JSON object with "
                                    "\"messages\""));
        return;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_rlm_llm_pt_ctx_t));
    if (ctx == NULL) {
        json_decref(req);
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->request = r;
    ctx->created = ngx_time();
    ctx->client_stream = json_is_true(json_object_get(req, "stream"));

    v = json_object_get(json_object_get(req, "stream_options"),
                        "include_usage");
    ctx->include_usage = json_is_true(v);

    upstream_stream = ctx->client_stream;
    deadline = NGX_ERROR;
    group_cap = NGX_ERROR;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == sizeof("X-RLM-Upstream-Stream") - 1
            && ngx_strncasecmp(h[i].key.data,
                               (u_char *) "X-RLM-Upstream-Stream",
                               h[i].key.len) == 0
            && h[i].value.len == 2
            && ngx_strncasecmp(h[i].value.data, (u_char *) "on", 2) == 0)
        {
            upstream_stream = 1;
        }

        if (h[i].key.len == sizeof("X-RLM-Group-Cap") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "X-RLM-Group-Cap",
                               h[i].key.len) == 0)
        {
            group_cap = ngx_atoi(h[i].value.data, h[i].value.len);
        }

        if (h[i].key.len == sizeof("X-RLM-Deadline") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "X-RLM-Deadline",
                               h[i].key.len) == 0)
        {
            deadline = ngx_atoi(h[i].value.data, h[i].value.len);
        }
    }

    ctx->call.provider = llcf->provider;
    ctx->call.pool = r->pool;
    ctx->call.log = r->connection->log;
    ctx->call.stream = upstream_stream;

    if (group_cap != NGX_ERROR) {
        /* one group per main request: its subrequests share the cap */
        ctx->call.group = ngx_http_get_module_ctx(r->main,
                                                  ngx_http_rlm_llm_module);
        if (ctx->call.group == NULL) {
            ctx->call.group = ngx_palloc(r->main->pool,
                                         sizeof(ngx_http_rlm_llm_group_t));
            if (ctx->call.group == NULL) {
                json_decref(req);
                ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }

            ngx_http_rlm_llm_group_init(ctx->call.group, group_cap);
            ngx_http_set_ctx(r->main, ctx->call.group,
                             ngx_http_rlm_llm_module);
        }
    }

    if (deadline != NGX_ERROR) {
        /* ngx_current_msec + 0 would read as "no deadline" */
        ctx->call.deadline = ngx_current_msec + ngx_max(deadline, 1);
    }
    ctx->call.done = ngx_http_rlm_llm_done;
    ctx->call.delta = ctx->client_stream ? ngx_http_rlm_llm_delta : NULL;
    ctx->call.data = ctx;

    /* the call must not outlive the request, however that one ends */

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        json_decref(req);
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    cln->handler = ngx_http_rlm_llm_cleanup;
    cln->data = ctx;

    if (ngx_http_rlm_llm_start(&ctx->call, req) != NGX_OK) {
        json_decref(req);
        ngx_http_finalize_request(r,
            ngx_http_rlm_send_error(r, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    "server_error", "internal_error",
                                    "the model call could not be started"));
        return;
    }

    json_decref(req);

    /* notice a client that goes away, so the call is cancelled early */

    if (r == r->main) {
        r->read_event_handler = ngx_http_test_reading;
    }
}


static void
ngx_http_rlm_llm_cleanup(void *data)
{
    ngx_http_rlm_llm_pt_ctx_t *ctx = data;

    /* a no-op once the call has finished */
    ngx_http_rlm_llm_cancel(&ctx->call);
}


static void
ngx_http_rlm_llm_done(ngx_http_rlm_llm_call_t *call)
{
    ngx_int_t                   rc;
    ngx_uint_t                  status;
    ngx_connection_t           *c;
    ngx_http_request_t         *r;
    ngx_http_rlm_llm_pt_ctx_t  *ctx;

    ctx = call->data;
    r = ctx->request;
    c = r->connection;

    ngx_http_rlm_metrics_model_call(call);

    if (call->error != NGX_HTTP_RLM_LLM_OK && !ctx->header_sent) {
        status = (call->error == NGX_HTTP_RLM_LLM_ERR_TIMEOUT)
                 ? NGX_HTTP_GATEWAY_TIME_OUT : NGX_HTTP_BAD_GATEWAY;

        (void) ngx_http_rlm_llm_add_header(r, "X-RLM-Attempts",
                                           call->attempts);
        (void) ngx_http_rlm_llm_add_header(r, "X-RLM-Upstream-Status",
                                           call->status);

        rc = ngx_http_rlm_send_error(r, status, "upstream_error",
                 ngx_http_rlm_llm_error_name(call->error),
                 (char *) call->message.data);

    } else {
        rc = ngx_http_rlm_llm_answer(ctx);
    }

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


static ngx_int_t
ngx_http_rlm_llm_answer(ngx_http_rlm_llm_pt_ctx_t *ctx)
{
    json_t                   *doc, *ev, *usage, *choice;
    ngx_int_t                 rc;
    ngx_http_request_t       *r;
    ngx_http_rlm_llm_call_t  *call;

    r = ctx->request;
    call = &ctx->call;

    if (ctx->client_stream) {
        if (!ctx->header_sent) {
            rc = ngx_http_rlm_llm_stream_header(ctx);
            if (rc != NGX_OK) {
                return rc;
            }
        }

        if (call->error != NGX_HTTP_RLM_LLM_OK) {
            ev = json_pack("{s:{s:s%, s:s, s:s}}", "error",
                           "message", call->message.data, call->message.len,
                           "type", "upstream_error",
                           "code", ngx_http_rlm_llm_error_name(call->error));
            rc = ngx_http_rlm_send_sse(ctx->request, ev, NULL, 0);
            json_decref(ev);

        } else {
            ev = ngx_http_rlm_llm_chunk(ctx);
            choice = json_array_get(json_object_get(ev, "choices"), 0);
            json_object_set_new(choice, "finish_reason",
                                call->finish_reason.len
                                ? json_stringn((char *)
                                               call->finish_reason.data,
                                               call->finish_reason.len)
                                : json_string("stop"));
            rc = ngx_http_rlm_send_sse(ctx->request, ev, NULL, 0);
            json_decref(ev);

            if (rc == NGX_OK && ctx->include_usage) {
                ev = ngx_http_rlm_llm_chunk(ctx);
                json_object_set_new(ev, "choices", json_array());
                json_object_set_new(ev, "usage",
                                    ngx_http_rlm_llm_usage_json(call));
                rc = ngx_http_rlm_send_sse(ctx->request, ev, NULL, 0);
                json_decref(ev);
            }
        }

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }

        return ngx_http_rlm_send_sse(ctx->request, NULL, NULL, 1);
    }

    usage = ngx_http_rlm_llm_usage_json(call);

    doc = json_pack("{s:s%, s:s, s:I, s:s%, s:[{s:i, s:{s:s, s:s%}, s:s%}],"
                    " s:o}",
                    "id", call->id.len ? (char *) call->id.data
                                       : "chatcmpl-rlm",
                    call->id.len ? call->id.len : sizeof("chatcmpl-rlm") - 1,
                    "object", "chat.completion",
                    "created", (json_int_t) ctx->created,
                    "model", call->model.len
                             ? (char *) call->model.data
                             : (char *) call->provider->model.data,
                    call->model.len ? call->model.len
                                    : call->provider->model.len,
                    "choices",
                    "index", 0,
                    "message", "role", "assistant",
                    "content", call->content.data, call->content.len,
                    "finish_reason",
                    call->finish_reason.len
                    ? (char *) call->finish_reason.data : "stop",
                    call->finish_reason.len
                    ? call->finish_reason.len : sizeof("stop") - 1,
                    "usage", usage);

    if (doc == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_rlm_llm_add_header(r, "X-RLM-Attempts", call->attempts)
        != NGX_OK)
    {
        json_decref(doc);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, doc);
    json_decref(doc);

    return rc;
}


static json_t *
ngx_http_rlm_llm_usage_json(ngx_http_rlm_llm_call_t *call)
{
    if (!call->has_usage) {
        return json_null();
    }

    return json_pack("{s:I, s:I, s:I}",
                     "prompt_tokens", (json_int_t) call->prompt_tokens,
                     "completion_tokens",
                     (json_int_t) call->completion_tokens,
                     "total_tokens", (json_int_t) call->total_tokens);
}


static json_t *
ngx_http_rlm_llm_chunk(ngx_http_rlm_llm_pt_ctx_t *ctx)
{
    ngx_http_rlm_llm_call_t  *call;

    call = &ctx->call;

    return json_pack("{s:s%, s:s, s:I, s:s%, s:[{s:i, s:{}, s:n}]}",
                     "id", call->id.len ? (char *) call->id.data
                                        : "chatcmpl-rlm",
                     call->id.len ? call->id.len
                                  : sizeof("chatcmpl-rlm") - 1,
                     "object", "chat.completion.chunk",
                     "created", (json_int_t) ctx->created,
                     "model", call->model.len
                              ? (char *) call->model.data
                              : (char *) call->provider->model.data,
                     call->model.len ? call->model.len
                                     : call->provider->model.len,
                     "choices", "index", 0, "delta", "finish_reason");
}


static ngx_int_t
ngx_http_rlm_llm_delta(ngx_http_rlm_llm_call_t *call, u_char *text,
    size_t len)
{
    json_t                     *ev, *delta;
    ngx_int_t                   rc;
    ngx_http_rlm_llm_pt_ctx_t  *ctx;

    ctx = call->data;

    if (!ctx->header_sent) {
        if (ngx_http_rlm_llm_stream_header(ctx) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    ev = ngx_http_rlm_llm_chunk(ctx);
    if (ev == NULL) {
        return NGX_ERROR;
    }

    delta = json_object_get(json_array_get(json_object_get(ev, "choices"), 0),
                            "delta");
    json_object_set_new(delta, "content", json_stringn((char *) text, len));

    rc = ngx_http_rlm_send_sse(ctx->request, ev, NULL, 0);
    json_decref(ev);

    return (rc == NGX_OK || rc == NGX_AGAIN) ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_rlm_llm_stream_header(ngx_http_rlm_llm_pt_ctx_t *ctx)
{
    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = ctx->request;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    ctx->header_sent = 1;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_llm_add_header(ngx_http_request_t *r, char *name,
    ngx_uint_t value)
{
    u_char  *p;

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(p, "%ui%Z", value);

    return ngx_http_rlm_set_header(r, name, (char *) p);
}


static ngx_int_t
ngx_http_rlm_llm_status_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    json_t                        *doc, *list;
    ngx_uint_t                     i, waiting;
    ngx_queue_t                   *q;
    ngx_http_rlm_provider_t       *p;
    ngx_http_rlm_curl_stats_t     *st;
    ngx_http_rlm_llm_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_llm_module);
    st = ngx_http_rlm_curl_stats();

    list = json_array();
    if (list == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = lmcf->providers->elts;

    for (i = 0; i < lmcf->providers->nelts; i++) {
        waiting = 0;

        for (q = ngx_queue_head(&p[i].waiting);
             q != ngx_queue_sentinel(&p[i].waiting);
             q = ngx_queue_next(q))
        {
            waiting++;
        }

        json_array_append_new(list,
            json_pack("{s:s%, s:I, s:I}",
                      "name", p[i].name.data, p[i].name.len,
                      "active", (json_int_t) p[i].active,
                      "waiting", (json_int_t) waiting));
    }

    /*
     * "connections" are all of this worker's nginx connections in use,
     * whoever holds them: the tests compare it before and after
     * cancelling calls to find connections that were never given back.
     */

    doc = json_pack("{s:I, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:o}",
                    "pid", (json_int_t) ngx_pid,
                    "connections",
                    (json_int_t) (ngx_cycle->connection_n
                                  - ngx_cycle->free_connection_n),
                    "curl",
                    "active", (json_int_t) st->active,
                    "sockets", (json_int_t) st->sockets,
                    "connections", (json_int_t) st->connections,
                    "started", (json_int_t) st->started,
                    "completed", (json_int_t) st->completed,
                    "cancelled", (json_int_t) st->cancelled,
                    "providers", list);
    if (doc == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        json_decref(doc);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, doc);
    json_decref(doc);

    return rc;
}
