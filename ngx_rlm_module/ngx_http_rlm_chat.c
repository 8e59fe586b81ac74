
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * POST /v1/chat/completions (rlm_completions): the OpenAI-compatible
 * face of the loop.  This file reads and checks the request, finds or
 * opens the session (X-RLM-Session-Id header or rlm_session cookie,
 * X-RLM-Reset) and starts a loop (ngx_http_rlm_loop.c); the answer is
 * written by ngx_http_rlm_chat_reply.c.  A module of its own,
 * ngx_http_rlm_chat_module, in the same .so as the others.
 */


#include "ngx_http_rlm_chat.h"
#include "ngx_http_rlm_trajectory.h"
#include "ngx_http_rlm_jsonstr.h"


#define NGX_HTTP_RLM_CHAT_BODY_SLACK  (1024 * 1024)

/* bodies this large look for a "context" string before a full parse */
#define NGX_HTTP_RLM_CHAT_FAST_MIN    (64 * 1024)


typedef struct {
    ngx_flag_t                  enabled;
    ngx_http_rlm_conf_where_t   where;          /* of rlm_completions */
    ngx_http_complex_value_t   *provider;
    ngx_http_complex_value_t   *model;
    ngx_http_complex_value_t   *sub_model;
    ngx_http_complex_value_t   *code_models;       /* models code may ask */
    ngx_http_complex_value_t   *owner_max;         /* tenant's quota */
    ngx_http_complex_value_t   *prices;            /* "model p c ..." */
    ngx_http_complex_value_t   *own_prompt;        /* rlm.system_prompt */
    ngx_str_t                   system_prompt_file;
    ngx_http_rlm_loop_conf_t    loop;
} ngx_http_rlm_chat_loc_conf_t;


/* what value of an unsupported OpenAI field asks for nothing */
typedef enum {
    NGX_HTTP_RLM_PARAM_NULL = 0,        /* null only */
    NGX_HTTP_RLM_PARAM_FALSE,           /* null or false */
    NGX_HTTP_RLM_PARAM_BOOLEAN,         /* null, true or false */
    NGX_HTTP_RLM_PARAM_NONE,            /* null or "none" */
    NGX_HTTP_RLM_PARAM_ZERO,            /* null or 0 */
    NGX_HTTP_RLM_PARAM_TEXT_FORMAT,     /* null or {"type": "text"} */
    NGX_HTTP_RLM_PARAM_TEXT_ONLY        /* null or ["text"] */
} ngx_http_rlm_param_harmless_e;


typedef struct {
    const char                     *name;
    ngx_http_rlm_param_harmless_e   harmless;
} ngx_http_rlm_chat_param_t;




static void *ngx_http_rlm_chat_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_rlm_chat_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_rlm_chat_enable(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_rlm_chat_prompt_file(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_rlm_chat_handler(ngx_http_request_t *r);
static void ngx_http_rlm_chat_body(ngx_http_request_t *r);
static json_t *ngx_http_rlm_chat_load(ngx_http_rlm_chat_t *chat,
    ngx_str_t *body, json_error_t *jerr);
static ngx_int_t ngx_http_rlm_chat_parse(ngx_http_request_t *r,
    ngx_http_rlm_chat_t *chat, json_t *req);
static ngx_int_t ngx_http_rlm_chat_params(ngx_http_rlm_chat_t *chat,
    json_t *req);
static ngx_uint_t ngx_http_rlm_chat_harmless(json_t *v,
    ngx_http_rlm_param_harmless_e harmless);
static ngx_int_t ngx_http_rlm_chat_id(ngx_http_request_t *r, ngx_str_t *id);
static ngx_int_t ngx_http_rlm_chat_text(json_t *content, ngx_pool_t *pool,
    ngx_str_t *out);
static ngx_int_t ngx_http_rlm_chat_session(ngx_http_request_t *r,
    ngx_http_rlm_chat_t *chat);
static void ngx_http_rlm_chat_opened(ngx_http_rlm_open_t *op);
static ngx_int_t ngx_http_rlm_chat_run(ngx_http_rlm_chat_t *chat);
static void ngx_http_rlm_chat_cleanup(void *data);
static ngx_int_t ngx_http_rlm_chat_bad(ngx_http_rlm_chat_t *chat,
    const char *code, const char *param, const char *message);
static ngx_int_t ngx_http_rlm_chat_answered(ngx_http_rlm_chat_t *chat,
    ngx_int_t rc);
static ngx_int_t ngx_http_rlm_chat_tree_policy(ngx_http_request_t *r,
    ngx_http_rlm_chat_t *chat);
static ngx_int_t ngx_http_rlm_chat_rlm(ngx_http_request_t *r,
    ngx_http_rlm_chat_t *chat, json_t *rlm);
static ngx_int_t ngx_http_rlm_chat_sub_sampling(ngx_http_rlm_chat_t *chat,
    json_t *v);


static ngx_conf_num_bounds_t  ngx_http_rlm_chat_iterations_bounds = {
    ngx_http_rlm_check_bounds, 1, 1000
};

static ngx_conf_num_bounds_t  ngx_http_rlm_chat_depth_bounds = {
    ngx_http_rlm_check_bounds, 0, 8
};

static ngx_conf_num_bounds_t  ngx_http_rlm_chat_positive_bounds = {
    ngx_http_rlm_check_bounds, 1, 1000000
};

static ngx_conf_num_bounds_t  ngx_http_rlm_chat_share_bounds = {
    ngx_http_rlm_check_bounds, 1, 100
};

static ngx_conf_num_bounds_t  ngx_http_rlm_chat_compaction_bounds = {
    ngx_http_rlm_check_bounds, 0, 100000000
};

static ngx_conf_num_bounds_t  ngx_http_rlm_chat_output_bounds = {
    ngx_http_rlm_check_bounds, 100, 16777216
};


static ngx_command_t  ngx_http_rlm_chat_commands[] = {

    { ngx_string("rlm_completions"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_rlm_chat_enable,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("rlm_completion_provider"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, provider),
      NULL },

    { ngx_string("rlm_completion_model"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, model),
      NULL },

    { ngx_string("rlm_completion_sub_model"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, sub_model),
      NULL },

    { ngx_string("rlm_max_iterations"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.max_iterations),
      &ngx_http_rlm_chat_iterations_bounds },

    { ngx_string("rlm_max_depth"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.max_depth),
      &ngx_http_rlm_chat_depth_bounds },

    { ngx_string("rlm_completion_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.timeout),
      NULL },

    { ngx_string("rlm_max_error_cells"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.max_error_cells),
      &ngx_http_rlm_chat_positive_bounds },

    { ngx_string("rlm_block_output_max"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.block_output_max),
      &ngx_http_rlm_chat_output_bounds },

    { ngx_string("rlm_max_concurrent_calls"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.max_calls),
      &ngx_http_rlm_chat_positive_bounds },

    { ngx_string("rlm_batch_max"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.batch_max),
      &ngx_http_rlm_chat_positive_bounds },

    { ngx_string("rlm_max_pending_calls"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.max_pending_calls),
      &ngx_http_rlm_chat_positive_bounds },

    { ngx_string("rlm_max_children"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.max_children),
      &ngx_http_rlm_chat_positive_bounds },

    { ngx_string("rlm_completion_sessions_share"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.sessions_share),
      &ngx_http_rlm_chat_share_bounds },

    { ngx_string("rlm_completion_code_models"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, code_models),
      NULL },

    { ngx_string("rlm_session_owner_max"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, owner_max),
      NULL },

    { ngx_string("rlm_compaction_threshold"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.compaction),
      &ngx_http_rlm_chat_compaction_bounds },

    { ngx_string("rlm_completion_prices"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, prices),
      NULL },

    { ngx_string("rlm_request_system_prompt"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, own_prompt),
      NULL },

    { ngx_string("rlm_final_markers"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_chat_loc_conf_t, loop.final_markers),
      NULL },

    { ngx_string("rlm_system_prompt_file"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_chat_prompt_file,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_rlm_chat_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_rlm_chat_create_loc_conf,     /* create location configuration */
    ngx_http_rlm_chat_merge_loc_conf       /* merge location configuration */
};


ngx_module_t  ngx_http_rlm_chat_module = {
    NGX_MODULE_V1,
    &ngx_http_rlm_chat_module_ctx,         /* module context */
    ngx_http_rlm_chat_commands,            /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* fields of a request that go to the provider with every root call */
static const char  *ngx_http_rlm_chat_sampling[] = {
    "temperature", "top_p", "seed", "stop", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "reasoning_effort",
    "service_tier", NULL
};


/*
 * OpenAI fields this endpoint does not implement.  Each is refused with
 * a 400 naming it unless its value is one that asks for nothing
 * (null, or the API's default): the answer never looks as if it honoured
 * a field it ignored.
 */

static ngx_http_rlm_chat_param_t  ngx_http_rlm_chat_unsupported[] = {
    { "tools", NGX_HTTP_RLM_PARAM_NULL },
    { "tool_choice", NGX_HTTP_RLM_PARAM_NONE },
    { "parallel_tool_calls", NGX_HTTP_RLM_PARAM_BOOLEAN },
    { "functions", NGX_HTTP_RLM_PARAM_NULL },
    { "function_call", NGX_HTTP_RLM_PARAM_NONE },
    { "logprobs", NGX_HTTP_RLM_PARAM_FALSE },
    { "top_logprobs", NGX_HTTP_RLM_PARAM_ZERO },
    { "response_format", NGX_HTTP_RLM_PARAM_TEXT_FORMAT },
    { "audio", NGX_HTTP_RLM_PARAM_NULL },
    { "modalities", NGX_HTTP_RLM_PARAM_TEXT_ONLY },
    { "prediction", NGX_HTTP_RLM_PARAM_NULL },
    { "web_search_options", NGX_HTTP_RLM_PARAM_NULL },
    { "store", NGX_HTTP_RLM_PARAM_FALSE },
    { "metadata", NGX_HTTP_RLM_PARAM_NULL },
    { NULL, 0 }
};


/* the other fields the endpoint reads (besides the sampling ones) */
static const char  *ngx_http_rlm_chat_known[] = {
    "model", "messages", "context", "rlm", "reset", "stream",
    "stream_options", "n", "max_tokens", "max_completion_tokens", NULL
};


static void *
ngx_http_rlm_chat_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_rlm_chat_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_rlm_chat_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->provider = NULL;
     *     conf->model = NULL;
     *     conf->sub_model = NULL;
     *     conf->loop.system_prompt = { 0, NULL };
     */

    conf->enabled = NGX_CONF_UNSET;
    conf->loop.max_iterations = NGX_CONF_UNSET_UINT;
    conf->loop.max_depth = NGX_CONF_UNSET_UINT;
    conf->loop.timeout = NGX_CONF_UNSET_MSEC;
    conf->loop.max_error_cells = NGX_CONF_UNSET_UINT;
    conf->loop.block_output_max = NGX_CONF_UNSET_SIZE;
    conf->loop.max_calls = NGX_CONF_UNSET_UINT;
    conf->loop.batch_max = NGX_CONF_UNSET_UINT;
    conf->loop.max_pending_calls = NGX_CONF_UNSET_UINT;
    conf->loop.max_children = NGX_CONF_UNSET_UINT;
    conf->loop.sessions_share = NGX_CONF_UNSET_UINT;
    conf->loop.final_markers = NGX_CONF_UNSET;
    conf->loop.compaction = NGX_CONF_UNSET_UINT;

    return conf;
}


static char *
ngx_http_rlm_chat_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_rlm_chat_loc_conf_t *prev = parent;
    ngx_http_rlm_chat_loc_conf_t *conf = child;

    ngx_http_core_loc_conf_t  *clcf;

    ngx_conf_merge_value(conf->enabled, prev->enabled, 0);

    if (conf->where.file.len == 0) {
        conf->where = prev->where;
    }

    if (conf->provider == NULL) {
        conf->provider = prev->provider;
    }

    if (conf->model == NULL) {
        conf->model = prev->model;
    }

    if (conf->sub_model == NULL) {
        conf->sub_model = prev->sub_model;
    }

    if (conf->code_models == NULL) {
        conf->code_models = prev->code_models;
    }

    if (conf->owner_max == NULL) {
        conf->owner_max = prev->owner_max;
    }

    if (conf->prices == NULL) {
        conf->prices = prev->prices;
    }

    if (conf->own_prompt == NULL) {
        conf->own_prompt = prev->own_prompt;
    }

    ngx_conf_merge_uint_value(conf->loop.max_iterations,
                              prev->loop.max_iterations, 30);
    ngx_conf_merge_uint_value(conf->loop.max_depth, prev->loop.max_depth, 1);
    ngx_conf_merge_msec_value(conf->loop.timeout, prev->loop.timeout,
                              600000);
    ngx_conf_merge_uint_value(conf->loop.max_error_cells,
                              prev->loop.max_error_cells, 5);
    ngx_conf_merge_size_value(conf->loop.block_output_max,
                              prev->loop.block_output_max, 20000);
    ngx_conf_merge_uint_value(conf->loop.max_calls, prev->loop.max_calls,
                              64);
    ngx_conf_merge_uint_value(conf->loop.batch_max, prev->loop.batch_max,
                              1000);
    ngx_conf_merge_uint_value(conf->loop.max_pending_calls,
                              prev->loop.max_pending_calls, 2000);
    ngx_conf_merge_uint_value(conf->loop.max_children,
                              prev->loop.max_children, 100);
    ngx_conf_merge_uint_value(conf->loop.sessions_share,
                              prev->loop.sessions_share, 25);
    ngx_conf_merge_value(conf->loop.final_markers, prev->loop.final_markers,
                         1);
    ngx_conf_merge_uint_value(conf->loop.compaction, prev->loop.compaction,
                              0);
    ngx_conf_merge_str_value(conf->loop.system_prompt,
                             prev->loop.system_prompt, "");

    if (conf->loop.system_prompt.len == 0) {
        conf->loop.system_prompt = ngx_http_rlm_default_system_prompt;
    }

    if (conf->enabled == 1) {
        if (ngx_http_rlm_llm_providers(cf) == NULL
            || ngx_http_rlm_llm_providers(cf)->nelts == 0)
        {
            /* merging runs at the end of the http block: say where */
            ngx_http_rlm_conf_error_at(cf->log, &conf->where,
                                       "\"rlm_completions\" needs an "
                                       "\"rlm_provider\" in the http block");
            return NGX_CONF_ERROR;
        }

        /* the handler checks the size against rlm_context_max_size */
        clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
        clcf->client_max_body_size = 0;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_rlm_chat_enable(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_rlm_chat_loc_conf_t *rclf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    if (rclf->enabled != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    rclf->enabled = 1;
    ngx_http_rlm_conf_where(cf, &rclf->where);

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_rlm_chat_handler;

    return NGX_CONF_OK;
}


/* the system prompt of the location, read once at configuration time */

static char *
ngx_http_rlm_chat_prompt_file(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_rlm_chat_loc_conf_t *rclf = conf;

    u_char           *buf;
    ssize_t           n;
    ngx_str_t        *value, name;
    ngx_file_t        file;
    ngx_file_info_t   fi;

    if (rclf->loop.system_prompt.data) {
        return "is duplicate";
    }

    value = cf->args->elts;
    name = value[1];

    if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&file, sizeof(ngx_file_t));
    file.name = name;
    file.log = cf->log;

    file.fd = ngx_open_file(name.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (file.fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%s\" failed", name.data);
        return NGX_CONF_ERROR;
    }

    if (ngx_fd_info(file.fd, &fi) == NGX_FILE_ERROR
        || ngx_file_size(&fi) == 0 || ngx_file_size(&fi) > 1024 * 1024)
    {
        ngx_close_file(file.fd);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%s\" must be a non-empty file of at most 1m",
                           name.data);
        return NGX_CONF_ERROR;
    }

    buf = ngx_pnalloc(cf->pool, ngx_file_size(&fi) + 1);
    if (buf == NULL) {
        ngx_close_file(file.fd);
        return NGX_CONF_ERROR;
    }

    n = ngx_read_file(&file, buf, ngx_file_size(&fi), 0);

    ngx_close_file(file.fd);

    if (n != ngx_file_size(&fi)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "could not read \"%s\"",
                           name.data);
        return NGX_CONF_ERROR;
    }

    buf[n] = '\0';

    rclf->loop.system_prompt.data = buf;
    rclf->loop.system_prompt.len = n;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_rlm_chat_handler(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_http_rlm_main_conf_t  *rmcf;

    if (r->method != NGX_HTTP_POST) {
        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        if (ngx_http_rlm_set_header(r, "Allow", "POST") != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_ALLOWED,
                                       "invalid_request_error",
                                       "method_not_allowed", "use POST");
    }

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    if (r->headers_in.content_length_n
        > (off_t) (rmcf->context_max_size + NGX_HTTP_RLM_CHAT_BODY_SLACK))
    {
        return ngx_http_rlm_refuse(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                   "invalid_request_error", "body_too_large",
                                   NULL, "the request is larger than "
                                   "rlm_context_max_size allows");
    }

    if (ngx_http_rlm_body_cap(r, (off_t) rmcf->context_max_size
                                     + NGX_HTTP_RLM_CHAT_BODY_SLACK)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_read_client_request_body(r, ngx_http_rlm_chat_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_chat_body(ngx_http_request_t *r)
{
    json_t               *req;
    ngx_int_t             rc;
    ngx_str_t             body;
    json_error_t          jerr;
    ngx_pool_cleanup_t   *cln;
    ngx_http_rlm_chat_t  *chat;

    ngx_http_rlm_enter_handler();

    chat = ngx_pcalloc(r->pool, sizeof(ngx_http_rlm_chat_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);

    if (chat == NULL || cln == NULL) {
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto done;
    }

    chat->request = r;
    chat->created = ngx_time();
    chat->tree.models = json_object();
    chat->tree.state = json_object();
    chat->tree.deleted = json_object();

    cln->handler = ngx_http_rlm_chat_cleanup;
    cln->data = chat;

    if (chat->tree.models == NULL || chat->tree.state == NULL
        || chat->tree.deleted == NULL
        || ngx_http_rlm_read_body(r, &body) != NGX_OK)
    {
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto done;
    }

    req = ngx_http_rlm_chat_load(chat, &body, &jerr);

    if (!json_is_object(req)) {
        json_decref(req);
        rc = ngx_http_rlm_chat_bad(chat, "invalid_json", NULL,
                                   "the body must be a JSON object (an "
                                   "OpenAI chat completion request)");
        goto done;
    }

    rc = ngx_http_rlm_chat_parse(r, chat, req);

    json_decref(req);

    if (rc != NGX_OK) {
        goto done;
    }

    rc = ngx_http_rlm_chat_session(r, chat);

    if (rc == NGX_DONE) {
        /* a client that goes away cancels the completion */
        if (r == r->main) {
            r->read_event_handler = ngx_http_test_reading;
        }

        ngx_http_rlm_leave_handler();
        return;
    }

done:

    if (rc == NGX_DECLINED) {
        rc = chat->rc;
    }

    ngx_http_rlm_leave_handler();
    ngx_http_rlm_finalize(r, rc);
}


/*
 * The request as JSON.  A large "context" is taken out first, so that
 * jansson parses only the rest (it reads about 50 MB/s here): a string is
 * checked and decoded in place at memory speed (held once), an array or
 * an object is passed on as text for the sandbox's parser.  The rest goes
 * to jansson with "" or null in its place.
 */

static json_t *
ngx_http_rlm_chat_load(ngx_http_rlm_chat_t *chat, ngx_str_t *body,
    json_error_t *jerr)
{
    u_char               *rest, *p, *text;
    size_t                text_len, cut, cut_len;
    const char           *stand_in;
    ngx_http_rlm_loop_t  *loop;

    loop = &chat->loop;

    if (body->len < NGX_HTTP_RLM_CHAT_FAST_MIN) {
        goto whole;
    }

    if (ngx_http_rlm_json_take_string(body->data, body->len, "context",
                                      &text, &text_len, &cut, &cut_len)
        == 0)
    {
        loop->context_text.data = text;
        loop->context_text.len = text_len;
        stand_in = "\"\"";

    } else if (ngx_http_rlm_json_take_container(body->data, body->len,
                                                "context",
                                                &loop->context_shape, &cut,
                                                &cut_len)
               == 0)
    {
        loop->context_json.data = body->data + cut;
        loop->context_json.len = cut_len;
        stand_in = "null";

    } else {
        goto whole;
    }

    rest = ngx_pnalloc(chat->request->pool, body->len - cut_len + 4);
    if (rest == NULL) {
        return NULL;
    }

    p = ngx_cpymem(rest, body->data, cut);
    p = ngx_cpymem(p, stand_in, ngx_strlen(stand_in));
    p = ngx_cpymem(p, body->data + cut + cut_len, body->len - cut - cut_len);

    return json_loadb((char *) rest, p - rest, JSON_REJECT_DUPLICATES, jerr);

whole:

    return json_loadb((char *) body->data, body->len, JSON_REJECT_DUPLICATES,
                      jerr);
}


/*
 * The request, checked field by field (the Lua shaping layer may have
 * normalised it already; this is the module's own guard).
 */

static ngx_int_t
ngx_http_rlm_chat_parse(ngx_http_request_t *r, ngx_http_rlm_chat_t *chat,
    json_t *req)
{
    size_t                         i, last_user;
    json_t                        *messages, *m, *v, *rlm, *earlier;
    ngx_int_t                      rc;
    ngx_str_t                      s, query;
    const char                    *role, **f;
    ngx_http_rlm_loop_t           *loop;
    ngx_http_rlm_chat_loc_conf_t  *rclf;

    rclf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_chat_module);
    loop = &chat->loop;

    messages = json_object_get(req, "messages");

    if (messages == NULL) {
        return ngx_http_rlm_chat_bad(chat, "missing_field", "messages",
                                     "\"messages\" is required");
    }

    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        return ngx_http_rlm_chat_bad(chat, "invalid_value", "messages",
                                     "\"messages\" must be a non-empty "
                                     "array");
    }

    last_user = (size_t) -1;

    json_array_foreach(messages, i, m) {
        role = json_string_value(json_object_get(m, "role"));

        if (!json_is_object(m) || role == NULL) {
            return ngx_http_rlm_chat_bad(chat, "invalid_value", "messages",
                                         "every message needs a \"role\"");
        }

        v = json_object_get(m, "content");

        if (v && !json_is_null(v) && !json_is_string(v) && !json_is_array(v))
        {
            return ngx_http_rlm_chat_bad(chat, "invalid_value", "messages",
                                         "\"content\" must be a string or "
                                         "an array of content parts");
        }

        if (ngx_strcmp(role, "user") == 0) {
            last_user = i;
        }
    }

    if (last_user == (size_t) -1) {
        return ngx_http_rlm_chat_bad(chat, "invalid_value", "messages",
                                     "no user message: the last one is "
                                     "the query");
    }

    if (ngx_http_rlm_chat_text(json_object_get(json_array_get(messages,
                                                              last_user),
                                               "content"),
                               r->pool, &query)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (query.len == 0) {
        return ngx_http_rlm_chat_bad(chat, "invalid_value", "messages",
                                     "the last user message is empty");
    }

    loop->query = query;

    rc = ngx_http_rlm_chat_params(chat, req);

    if (rc != NGX_OK) {
        return (rc == NGX_ERROR) ? NGX_HTTP_INTERNAL_SERVER_ERROR : rc;
    }

    v = json_object_get(req, "model");

    if (v && !json_is_string(v)) {
        return ngx_http_rlm_chat_bad(chat, "invalid_type", "model",
                                     "\"model\" must be a string");
    }

    if (v) {
        chat->model.len = json_string_length(v);
        chat->model.data = ngx_pnalloc(r->pool, chat->model.len + 1);
        if (chat->model.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(chat->model.data, json_string_value(v),
                   chat->model.len + 1);
    }

    v = json_object_get(req, "stream");

    if (v && !json_is_boolean(v) && !json_is_null(v)) {
        return ngx_http_rlm_chat_bad(chat, "invalid_type", "stream",
                                     "\"stream\" must be a boolean");
    }

    chat->stream = json_is_true(v);
    chat->include_usage = json_is_true(
        json_object_get(json_object_get(req, "stream_options"),
                        "include_usage"));

    v = json_object_get(req, "n");

    if (v && !json_is_null(v)
        && !(json_is_integer(v) && json_integer_value(v) == 1))
    {
        return ngx_http_rlm_chat_bad(chat, "invalid_value", "n",
                                     "only n = 1 is supported");
    }

    v = json_object_get(req, "max_completion_tokens");
    if (v == NULL || json_is_null(v)) {
        v = json_object_get(req, "max_tokens");
    }

    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) <= 0) {
            return ngx_http_rlm_chat_bad(chat, "invalid_value", "max_tokens",
                                         "\"max_tokens\" must be a "
                                         "positive integer");
        }

        chat->tree.max_tokens = json_integer_value(v);
    }

    /* sampling fields travel with every root call */

    loop->sampling = json_object();
    if (loop->sampling == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (f = ngx_http_rlm_chat_sampling; *f; f++) {
        v = json_object_get(req, *f);
        if (v && !json_is_null(v)) {
            json_object_set(loop->sampling, *f, v);
        }
    }

    /* per-request limits, never above the location's */

    loop->max_iterations = rclf->loop.max_iterations;
    loop->max_depth = rclf->loop.max_depth;
    chat->tree.compaction = rclf->loop.compaction;
    chat->tree.deadline = ngx_current_msec + rclf->loop.timeout;

    rlm = json_object_get(req, "rlm");

    if (rlm && !json_is_null(rlm)) {
        rc = ngx_http_rlm_chat_rlm(r, chat, rlm);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    /* "reset": true, as the X-RLM-Reset header */

    v = json_object_get(req, "reset");

    if (v && !json_is_boolean(v) && !json_is_null(v)) {
        return ngx_http_rlm_chat_bad(chat, "invalid_type", "reset",
                                     "\"reset\" must be a boolean");
    }

    chat->reset = json_is_true(v);

    /* the context: a "context" field, else the messages before the query */

    v = json_object_get(req, "context");

    if (v) {
        loop->context = json_incref(v);

    } else {
        earlier = json_array();
        if (earlier == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        for (i = 0; i < last_user; i++) {
            m = json_array_get(messages, i);

            if (ngx_http_rlm_chat_text(json_object_get(m, "content"),
                                       r->pool, &s)
                != NGX_OK)
            {
                json_decref(earlier);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            json_array_append_new(earlier,
                json_pack("{s:O, s:s%}", "role", json_object_get(m, "role"),
                          "content", (char *) s.data, s.len));
        }

        loop->context = earlier;
    }

    return ngx_http_rlm_chat_id(r, &chat->id);
}


/*
 * Every top-level field is one the endpoint reads, forwards or refuses
 * by name: an unknown one (a typo, or an API feature newer than this
 * server) is a 400 "unknown_parameter", a known one it does not
 * implement a 400 "unsupported_parameter", both naming it in "param".
 * NGX_DECLINED: the answer went out.
 */

static ngx_int_t
ngx_http_rlm_chat_params(ngx_http_rlm_chat_t *chat, json_t *req)
{
    u_char                     *msg, *p;
    json_t                     *v;
    const char                 *key, **f;
    ngx_uint_t                  sane;
    ngx_http_rlm_chat_param_t  *u;

    json_object_foreach(req, key, v) {

        for (f = ngx_http_rlm_chat_known; *f; f++) {
            if (ngx_strcmp(key, *f) == 0) {
                break;
            }
        }

        if (*f) {
            continue;
        }

        for (f = ngx_http_rlm_chat_sampling; *f; f++) {
            if (ngx_strcmp(key, *f) == 0) {
                break;
            }
        }

        if (*f) {
            continue;
        }

        msg = ngx_pnalloc(chat->request->pool, 160);
        if (msg == NULL) {
            return NGX_ERROR;
        }

        for (u = ngx_http_rlm_chat_unsupported; u->name; u++) {
            if (ngx_strcmp(key, u->name) == 0) {
                break;
            }
        }

        if (u->name) {
            if (ngx_http_rlm_chat_harmless(v, u->harmless)) {
                continue;
            }

            ngx_sprintf(msg, "'%s' is not supported by this server: send "
                        "the request without it%Z", u->name);

            (void) ngx_http_rlm_chat_bad(chat, "unsupported_parameter",
                                         u->name, (char *) msg);
            return NGX_DECLINED;
        }

        /* a name is echoed only if it is short, printable ASCII */

        sane = (ngx_strlen(key) <= 64);

        for (p = (u_char *) key; sane && *p; p++) {
            sane = (*p > 0x20 && *p < 0x7f && *p != '\\' && *p != '\'');
        }

        if (sane) {
            ngx_sprintf(msg, "Unrecognized request argument supplied: "
                        "'%s'%Z", key);

        } else {
            ngx_sprintf(msg, "Unrecognized request argument supplied%Z");
        }

        (void) ngx_http_rlm_chat_bad(chat, "unknown_parameter",
                                     sane ? key : NULL, (char *) msg);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_uint_t
ngx_http_rlm_chat_harmless(json_t *v, ngx_http_rlm_param_harmless_e harmless)
{
    const char  *type;

    if (json_is_null(v)) {
        return 1;
    }

    switch (harmless) {

    case NGX_HTTP_RLM_PARAM_FALSE:
        return json_is_false(v);

    case NGX_HTTP_RLM_PARAM_BOOLEAN:
        return json_is_boolean(v);

    case NGX_HTTP_RLM_PARAM_NONE:
        return json_is_string(v) && ngx_strcmp(json_string_value(v), "none")
                                    == 0;

    case NGX_HTTP_RLM_PARAM_ZERO:
        return json_is_integer(v) && json_integer_value(v) == 0;

    case NGX_HTTP_RLM_PARAM_TEXT_FORMAT:
        type = json_string_value(json_object_get(v, "type"));
        return json_is_object(v) && json_object_size(v) == 1
               && type != NULL && ngx_strcmp(type, "text") == 0;

    case NGX_HTTP_RLM_PARAM_TEXT_ONLY:
        type = json_string_value(json_array_get(v, 0));
        return json_is_array(v) && json_array_size(v) == 1
               && type != NULL && ngx_strcmp(type, "text") == 0;

    default:
        return 0;
    }
}


/* the completion's id: chatcmpl- and 24 random hex digits */

static ngx_int_t
ngx_http_rlm_chat_id(ngx_http_request_t *r, ngx_str_t *id)
{
    u_char  *p;
    u_char   rnd[NGX_HTTP_RLM_ID_BYTES], hex[NGX_HTTP_RLM_ID_HEX];

    if (ngx_http_rlm_session_random_id(rnd, r->connection->log) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_rlm_session_format_id(rnd, hex);

    id->data = ngx_pnalloc(r->pool, sizeof("chatcmpl-") - 1 + 24);
    if (id->data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(id->data, "chatcmpl-", sizeof("chatcmpl-") - 1);
    p = ngx_cpymem(p, hex, 24);
    id->len = p - id->data;

    return NGX_OK;
}


/* a message's content as text (a copy): a string, or the parts joined */

static ngx_int_t
ngx_http_rlm_chat_text(json_t *content, ngx_pool_t *pool, ngx_str_t *out)
{
    u_char  *p;
    size_t   i, len;
    json_t  *part, *t;

    if (json_is_string(content)) {
        out->len = json_string_length(content);
        out->data = ngx_pnalloc(pool, out->len + 1);
        if (out->data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(out->data, json_string_value(content), out->len + 1);
        return NGX_OK;
    }

    len = 0;

    json_array_foreach(content, i, part) {
        t = json_object_get(part, "text");
        if (json_is_string(t)) {
            len += json_string_length(t) + 1;
        }
    }

    p = ngx_pnalloc(pool, len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;

    json_array_foreach(content, i, part) {
        t = json_object_get(part, "text");
        if (json_is_string(t)) {
            if (p != out->data) {
                *p++ = '\n';
            }

            p = ngx_cpymem(p, json_string_value(t), json_string_length(t));
        }
    }

    *p = '\0';
    out->len = p - out->data;

    return NGX_OK;
}


/* the session: named by header or cookie, reset on request, or new */

static ngx_int_t
ngx_http_rlm_chat_session(ngx_http_request_t *r, ngx_http_rlm_chat_t *chat)
{
    u_char                   id[NGX_HTTP_RLM_ID_BYTES];
    ngx_int_t                rc;
    ngx_str_t               *given, cookie, owner;
    ngx_str_t                name = ngx_string("rlm_session");
    ngx_http_rlm_ctx_t      *ctx;
    ngx_http_rlm_zone_t     *z;
    ngx_http_rlm_session_t  *s;

    z = ngx_http_rlm_zone();
    ctx = ngx_http_rlm_get_ctx(r);

    if (z == NULL || ctx == NULL) {
        return ngx_http_rlm_chat_answered(chat,
                   ngx_http_rlm_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           "server_error",
                                           "manager_unavailable",
                                           "sessions are not configured "
                                           "(rlm_sessions_zone)"));
    }

    if (ngx_http_rlm_api_owner(r, &owner) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    chat->tree.owner = owner;

    if (ngx_http_rlm_chat_tree_policy(r, chat) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    given = ngx_http_rlm_request_header(r, "X-RLM-Session-Id");

    if (given == NULL
        && ngx_http_parse_multi_header_lines(&r->headers_in.cookies, &name,
                                             &cookie)
           != NGX_DECLINED)
    {
        given = &cookie;
        chat->from_cookie = 1;
    }

    chat->open.handler = ngx_http_rlm_chat_opened;
    chat->open.data = chat;

    if (given == NULL) {
        if (ngx_http_rlm_session_random_id(id, r->connection->log) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        chat->open.any_id = 1;

    } else {
        if (ngx_http_rlm_session_parse_id(given->data, given->len, id)
            != NGX_OK)
        {
            return ngx_http_rlm_chat_bad(chat, "invalid_session_id",
                                         chat->from_cookie ? "rlm_session"
                                                           : "X-RLM-Session-Id",
                                         "a session id is 32 lowercase hex "
                                         "characters");
        }

        s = ngx_http_rlm_session_get(z, id, &owner);

        if (s == NULL) {
            return ngx_http_rlm_chat_answered(chat,
                       ngx_http_rlm_send_error_param(r, NGX_HTTP_NOT_FOUND,
                           "invalid_request_error", "session_not_found",
                           chat->from_cookie ? "rlm_session"
                                             : "X-RLM-Session-Id",
                           "no such session"));
        }

        if (!chat->reset
            && ngx_http_rlm_request_header(r, "X-RLM-Reset") == NULL)
        {
            chat->loop.session = s;
            ngx_http_rlm_session_format_id(id, ctx->session_id);
            ctx->has_session = 1;
            return ngx_http_rlm_chat_run(chat);
        }

        /* reset: a fresh sandbox under the same id */

        ngx_http_rlm_session_discard(z, s);
    }

    ngx_http_rlm_session_format_id(id, ctx->session_id);
    ctx->has_session = 1;

    rc = ngx_http_rlm_session_open(&chat->open, r->pool, id, &owner);

    if (rc != NGX_AGAIN) {
        return ngx_http_rlm_chat_answered(chat,
                   ngx_http_rlm_open_send_error(r, &chat->open));
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_chat_opened(ngx_http_rlm_open_t *op)
{
    ngx_int_t             rc;
    ngx_http_rlm_ctx_t   *ctx;
    ngx_http_request_t   *r;
    ngx_http_rlm_chat_t  *chat = op->data;

    r = chat->request;

    if (op->session == NULL) {
        ngx_http_rlm_finalize(r, ngx_http_rlm_open_send_error(r, op));
        return;
    }

    ctx = ngx_http_rlm_get_ctx(r);

    if (ctx) {
        /* a spare's id, when the open took one */
        ngx_memcpy(ctx->session_id, op->hex, NGX_HTTP_RLM_ID_HEX);
    }

    chat->loop.session = op->session;

    rc = ngx_http_rlm_chat_run(chat);

    if (rc == NGX_DONE) {
        if (r == r->main) {
            r->read_event_handler = ngx_http_test_reading;
        }

        return;
    }

    ngx_http_rlm_finalize(r, rc == NGX_DECLINED ? chat->rc : rc);
}


/* the session is ours: set the loop up and start it */

static ngx_int_t
ngx_http_rlm_chat_run(ngx_http_rlm_chat_t *chat)
{
    json_t                        *meta;
    ngx_str_t                      v;
    ngx_http_request_t            *r;
    ngx_http_rlm_loop_t           *loop;
    ngx_http_rlm_zone_t           *z;
    ngx_http_rlm_main_conf_t      *rmcf;
    ngx_http_rlm_chat_loc_conf_t  *rclf;

    r = chat->request;
    loop = &chat->loop;
    z = ngx_http_rlm_zone();

    rclf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_chat_module);
    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    loop->request = r;
    loop->conf = &rclf->loop;
    loop->tree = &chat->tree;
    loop->done = ngx_http_rlm_chat_done;
    loop->progress = chat->stream ? ngx_http_rlm_chat_progress : NULL;
    loop->data = chat;
    loop->completion_id = chat->id;

    ngx_http_rlm_llm_group_init(&chat->tree.group, rclf->loop.max_calls);

    /* the route: provider, root model, sub model */

    loop->provider = NULL;

    if (rclf->provider) {
        if (ngx_http_complex_value(r, rclf->provider, &v) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (v.len) {
            loop->provider = ngx_http_rlm_llm_find_provider(
                                     ngx_http_rlm_llm_providers(NULL), &v);
            if (loop->provider == NULL) {
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "rlm: the route names provider \"%V\", which "
                              "is not declared", &v);
                return ngx_http_rlm_chat_answered(chat,
                           ngx_http_rlm_send_error(r,
                               NGX_HTTP_INTERNAL_SERVER_ERROR,
                               "server_error", "provider_not_found",
                               "the route names an unknown provider"));
            }
        }
    }

    if (loop->provider == NULL) {
        loop->provider = ngx_http_rlm_llm_providers(NULL)->elts;
    }

    loop->root_model = chat->model;

    if (rclf->model) {
        if (ngx_http_complex_value(r, rclf->model, &v) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (v.len) {
            loop->root_model = v;
        }
    }

    if (loop->root_model.len == 0) {
        loop->root_model = loop->provider->model;
    }

    if (loop->sub_model.len == 0 && rclf->sub_model) {
        if (ngx_http_complex_value(r, rclf->sub_model, &loop->sub_model)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (loop->sub_model.len == 0) {
        loop->sub_model = loop->root_model;
    }

    if (chat->model.len == 0) {
        chat->model = loop->root_model;
    }

    loop->turn = ngx_http_rlm_session_begin_completion(z, loop->session);
    ngx_http_rlm_session_format_id(loop->session->id, loop->hex);

    if (rmcf->trajectory_dir) {
        meta = json_pack("{s:s%, s:s%, s:s%, s:I, s:I, s:I, s:s%, s:s%,"
                         " s:I, s:s%}",
                         "root_model", loop->root_model.data,
                         loop->root_model.len,
                         "sub_model", loop->sub_model.data,
                         loop->sub_model.len,
                         "provider", loop->provider->name.data,
                         loop->provider->name.len,
                         "max_depth", (json_int_t) loop->max_depth,
                         "max_iterations", (json_int_t) loop->max_iterations,
                         "depth", (json_int_t) 0,
                         "completion_id", chat->id.data, chat->id.len,
                         "session", loop->hex,
                         (size_t) NGX_HTTP_RLM_ID_HEX,
                         "created", (json_int_t) chat->created,
                         "system_prompt",
                         loop->system_prompt.len
                         ? loop->system_prompt.data
                         : rclf->loop.system_prompt.data,
                         loop->system_prompt.len
                         ? loop->system_prompt.len
                         : rclf->loop.system_prompt.len);

        if (meta) {
            loop->trajectory = ngx_http_rlm_trajectory_open(r->pool,
                                   r->connection->log,
                                   &rmcf->trajectory_dir->name, loop->hex,
                                   &chat->id, meta);
            json_decref(meta);
        }
    }

    if (chat->stream) {
        if (ngx_http_rlm_chat_headers(chat, 1) != NGX_OK) {
            return NGX_ERROR;
        }

        chat->keepalive.handler = ngx_http_rlm_chat_keepalive;
        chat->keepalive.data = chat;
        chat->keepalive.log = r->connection->log;
        ngx_add_timer(&chat->keepalive, NGX_HTTP_RLM_CHAT_KEEPALIVE);
    }

    if (ngx_http_rlm_loop_start(loop) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_chat_cleanup(void *data)
{
    ngx_http_rlm_chat_t  *chat = data;

    if (chat->keepalive.timer_set) {
        ngx_del_timer(&chat->keepalive);
    }

    /*
     * The loop's own cleanup, registered later, has run already and
     * freed what it took; a loop that never started left them here.
     */

    json_decref(chat->loop.sampling);
    json_decref(chat->loop.context);
    ngx_http_rlm_state_release(&chat->tree);
    json_decref(chat->tree.models);
    json_decref(chat->tree.sub_sampling);
    chat->tree.sub_sampling = NULL;
    json_decref(chat->tree.state);
    json_decref(chat->tree.deleted);
    chat->loop.sampling = NULL;
    chat->loop.context = NULL;
    chat->tree.models = NULL;
    chat->tree.state = NULL;
    chat->tree.deleted = NULL;
}


static ngx_int_t
ngx_http_rlm_chat_bad(ngx_http_rlm_chat_t *chat, const char *code,
    const char *param, const char *message)
{
    ngx_log_error(NGX_LOG_INFO, chat->request->connection->log, 0,
                  "rlm: bad completion request: %s", message);

    return ngx_http_rlm_chat_answered(chat,
               ngx_http_rlm_send_error_param(chat->request,
                                             NGX_HTTP_BAD_REQUEST,
                                             "invalid_request_error", code,
                                             param, message));
}


/*
 * An error answer went out: the result of sending it is kept for the
 * finalization, and NGX_DECLINED tells the caller to stop.
 */

static ngx_int_t
ngx_http_rlm_chat_answered(ngx_http_rlm_chat_t *chat, ngx_int_t rc)
{
    chat->rc = rc;

    return NGX_DECLINED;
}


/*
 * What the code of this completion may ask for, from the route and the
 * tenant (Lua policy variables): the models it may name and the tenant's
 * session quota its child RLMs count against.
 */

static ngx_int_t
ngx_http_rlm_chat_tree_policy(ngx_http_request_t *r,
    ngx_http_rlm_chat_t *chat)
{
    ngx_int_t                      n;
    ngx_str_t                      v;
    ngx_http_rlm_chat_loc_conf_t  *rclf;

    rclf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_chat_module);

    if (rclf->code_models) {
        if (ngx_http_complex_value(r, rclf->code_models,
                                   &chat->tree.code_models)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (chat->tree.code_models.len == 0) {
            /* an empty value: the root and sub models only */
            ngx_str_null(&chat->tree.code_models);
        }
    }

    if (rclf->owner_max) {
        if (ngx_http_complex_value(r, rclf->owner_max, &v) != NGX_OK) {
            return NGX_ERROR;
        }

        n = v.len ? ngx_atoi(v.data, v.len) : 0;
        chat->tree.owner_max = (n > 0) ? (ngx_uint_t) n : 0;
    }

    if (rclf->prices) {
        if (ngx_http_complex_value(r, rclf->prices, &v) != NGX_OK) {
            return NGX_ERROR;
        }

        n = ngx_http_rlm_cost_prices(r->pool, &v, &chat->tree.prices);

        if (n == NGX_DECLINED) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "rlm: rlm_completion_prices \"%V\" is not a list "
                          "of \"model prompt completion\" prices", &v);
        }

        if (n != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The request's "rlm" object: limits never above the location's, the
 * sub model, a cost budget, a system prompt where the location allows
 * one, sampling arguments for sub-calls.
 */

static ngx_int_t
ngx_http_rlm_chat_rlm(ngx_http_request_t *r, ngx_http_rlm_chat_t *chat,
    json_t *rlm)
{
    json_t                        *v;
    ngx_str_t                      s, allow;
    ngx_http_rlm_loop_t           *loop;
    ngx_http_rlm_chat_loc_conf_t  *rclf;

    rclf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_chat_module);
    loop = &chat->loop;

    if (!json_is_object(rlm)) {
        return ngx_http_rlm_chat_bad(chat, "invalid_type", "rlm",
                                     "\"rlm\" must be an object");
    }

    v = json_object_get(rlm, "max_iterations");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1) {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.max_iterations",
                                         "must be a positive integer");
        }

        if ((ngx_uint_t) json_integer_value(v) < loop->max_iterations) {
            loop->max_iterations = json_integer_value(v);
        }
    }

    v = json_object_get(rlm, "max_depth");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.max_depth",
                                         "must be an integer >= 0");
        }

        if ((ngx_uint_t) json_integer_value(v) < loop->max_depth) {
            loop->max_depth = json_integer_value(v);
        }
    }

    v = json_object_get(rlm, "timeout");
    if (v) {
        if (!json_is_number(v) || json_number_value(v) <= 0) {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.timeout",
                                         "must be a positive number of "
                                         "seconds");
        }

        if (json_number_value(v) * 1000 < (double) rclf->loop.timeout) {
            chat->tree.deadline = ngx_current_msec
                + (ngx_msec_t) (json_number_value(v) * 1000 + 1);
        }
    }

    v = json_object_get(rlm, "sub_model");
    if (v) {
        if (!json_is_string(v) || json_string_length(v) == 0) {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.sub_model",
                                         "must be a model name");
        }

        s.len = json_string_length(v);
        s.data = ngx_pnalloc(r->pool, s.len + 1);
        if (s.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(s.data, json_string_value(v), s.len + 1);
        loop->sub_model = s;
    }

    v = json_object_get(rlm, "compaction_threshold");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0
            || json_integer_value(v) > 100000000)
        {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.compaction_threshold",
                                         "must be a number of tokens, "
                                         "0 for none");
        }

        chat->tree.compaction = json_integer_value(v);
    }

    v = json_object_get(rlm, "max_cost");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0)) {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.max_cost",
                                         "must be a positive number");
        }

        chat->tree.max_cost = json_number_value(v);
    }

    v = json_object_get(rlm, "system_prompt");
    if (v && !json_is_null(v)) {
        ngx_str_null(&allow);

        if (rclf->own_prompt
            && ngx_http_complex_value(r, rclf->own_prompt, &allow) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (!((allow.len == 2 && ngx_strncmp(allow.data, "on", 2) == 0)
              || (allow.len == 1 && allow.data[0] == '1')))
        {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.system_prompt",
                                         "this model does not take a "
                                         "system prompt from the request");
        }

        if (!json_is_string(v) || json_string_length(v) == 0
            || json_string_length(v) > 1024 * 1024)
        {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.system_prompt",
                                         "must be a non-empty string of at "
                                         "most 1 MiB");
        }

        s.len = json_string_length(v);
        s.data = ngx_pnalloc(r->pool, s.len + 1);
        if (s.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(s.data, json_string_value(v), s.len + 1);
        loop->system_prompt = s;
    }

    v = json_object_get(rlm, "sub_sampling");
    if (v && !json_is_null(v)) {
        return ngx_http_rlm_chat_sub_sampling(chat, v);
    }

    return NGX_OK;
}


/*
 * rlm.sub_sampling: what llm_query calls and the root calls of child
 * RLMs send to the provider, checked as OpenAI checks them.
 */

static ngx_int_t
ngx_http_rlm_chat_sub_sampling(ngx_http_rlm_chat_t *chat, json_t *v)
{
    size_t       i;
    double       d;
    json_t      *f, *s;
    const char  *k;

    if (!json_is_object(v)) {
        return ngx_http_rlm_chat_bad(chat, "invalid_type",
                                     "rlm.sub_sampling",
                                     "must be an object");
    }

    json_object_foreach(v, k, f) {
        d = json_number_value(f);

        if (ngx_strcmp(k, "temperature") == 0) {
            if (!json_is_number(f) || !(d >= 0 && d <= 2)) {
                goto bad;
            }

        } else if (ngx_strcmp(k, "top_p") == 0) {
            if (!json_is_number(f) || !(d >= 0 && d <= 1)) {
                goto bad;
            }

        } else if (ngx_strcmp(k, "presence_penalty") == 0
                   || ngx_strcmp(k, "frequency_penalty") == 0)
        {
            if (!json_is_number(f) || !(d >= -2 && d <= 2)) {
                goto bad;
            }

        } else if (ngx_strcmp(k, "max_tokens") == 0) {
            if (!json_is_integer(f) || json_integer_value(f) < 1) {
                goto bad;
            }

        } else if (ngx_strcmp(k, "seed") == 0) {
            if (!json_is_integer(f)) {
                goto bad;
            }

        } else if (ngx_strcmp(k, "stop") == 0) {
            if (json_is_array(f)) {
                if (json_array_size(f) > 4) {
                    goto bad;
                }

                json_array_foreach(f, i, s) {
                    if (!json_is_string(s)) {
                        goto bad;
                    }
                }

            } else if (!json_is_string(f)) {
                goto bad;
            }

        } else if (ngx_strcmp(k, "reasoning_effort") == 0) {
            if (!json_is_string(f)) {
                goto bad;
            }

        } else {
            return ngx_http_rlm_chat_bad(chat, "invalid_value",
                                         "rlm.sub_sampling",
                                         "takes temperature, top_p, "
                                         "max_tokens, seed, stop, "
                                         "presence_penalty, "
                                         "frequency_penalty and "
                                         "reasoning_effort");
        }
    }

    chat->tree.sub_sampling = json_deep_copy(v);
    if (chat->tree.sub_sampling == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_OK;

bad:

    return ngx_http_rlm_chat_bad(chat, "invalid_value", "rlm.sub_sampling",
                                 "temperature 0-2, top_p 0-1, penalties "
                                 "-2 to 2, max_tokens a positive integer, "
                                 "seed an integer, stop a string or up to "
                                 "4 strings");
}
