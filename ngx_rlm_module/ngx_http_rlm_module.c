
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Module definition: directives, configuration life cycle and the
 * dispatch of a location to the handler its directive selected.
 */


#include "ngx_http_rlm_module.h"
#include "ngx_http_rlm_trajectory.h"


static ngx_int_t ngx_http_rlm_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_rlm_postconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_rlm_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_rlm_init_process(ngx_cycle_t *cycle);
static void ngx_http_rlm_exit_process(ngx_cycle_t *cycle);
static void ngx_http_rlm_exit_master(ngx_cycle_t *cycle);
static void *ngx_http_rlm_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_rlm_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_rlm_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_rlm_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_rlm_set_handler(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_rlm_sessions_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_rlm_add_zone(ngx_conf_t *cf,
    ngx_http_rlm_main_conf_t *rmcf, ngx_str_t *name, size_t size);
static char *ngx_http_rlm_check_path(ngx_conf_t *cf, void *post, void *data);
static char *ngx_http_rlm_manager(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_rlm_handler(ngx_http_request_t *r);


/* bounds checked when the value is parsed, so nginx -t names the directive */

static ngx_conf_num_bounds_t  ngx_http_rlm_pool_size_bounds = {
    ngx_http_rlm_check_bounds, 0, 4096
};

static ngx_conf_num_bounds_t  ngx_http_rlm_max_sessions_bounds = {
    ngx_http_rlm_check_bounds, 1, 1000000
};

static ngx_conf_num_bounds_t  ngx_http_rlm_spares_bounds = {
    ngx_http_rlm_check_bounds, 0, 64
};

static ngx_conf_num_bounds_t  ngx_http_rlm_node_id_bounds = {
    ngx_http_rlm_check_bounds, 0, 255
};

static ngx_conf_num_bounds_t  ngx_http_rlm_pids_bounds = {
    ngx_http_rlm_check_bounds, 1, 65536
};

/* the jail's layers that may be missing where they cannot work */
static ngx_conf_bitmask_t  ngx_http_rlm_jail_layers[] = {
    { ngx_string("cgroups"), NGX_HTTP_RLM_JAIL_CGROUPS },
    { ngx_string("root"), NGX_HTTP_RLM_JAIL_ROOT },
    { ngx_null_string, 0 }
};

static ngx_conf_num_bounds_t  ngx_http_rlm_queue_bounds = {
    ngx_http_rlm_check_bounds, 1, 65536
};

static ngx_conf_post_t  ngx_http_rlm_path_post = {
    ngx_http_rlm_check_path
};

static ngx_http_rlm_conf_bounds_t  ngx_http_rlm_cpu_time_bounds = {
    ngx_http_rlm_conf_sec_bounds, 1, NGX_MAX_INT32_VALUE, "at least 1s"
};

static ngx_http_rlm_conf_bounds_t  ngx_http_rlm_cell_timeout_bounds = {
    ngx_http_rlm_conf_msec_bounds, 10, NGX_MAX_INT32_VALUE, "at least 10ms"
};

static ngx_http_rlm_conf_bounds_t  ngx_http_rlm_idle_timeout_bounds = {
    ngx_http_rlm_conf_sec_bounds, 1, NGX_MAX_INT32_VALUE, "at least 1s"
};

static ngx_http_rlm_conf_bounds_t  ngx_http_rlm_memory_bounds = {
    ngx_http_rlm_conf_size_bounds, 16 * 1024 * 1024, NGX_MAX_OFF_T_VALUE,
    "at least 16m, CPython does not start in less"
};

static ngx_http_rlm_conf_bounds_t  ngx_http_rlm_output_bounds = {
    ngx_http_rlm_conf_size_bounds, 1024, NGX_MAX_OFF_T_VALUE,
    "at least 1k"
};

static ngx_http_rlm_conf_bounds_t  ngx_http_rlm_frame_bounds = {
    ngx_http_rlm_conf_size_bounds, 1024, 16 * 1024 * 1024,
    "from 1k to 16m (a frame's size)"
};

static ngx_http_rlm_conf_bounds_t  ngx_http_rlm_context_bounds = {
    ngx_http_rlm_conf_size_bounds, 1, 0xffffffff,
    "between 1 and 4095m (the protocol's blob length is 32 bits)"
};


static ngx_command_t  ngx_http_rlm_commands[] = {

    { ngx_string("rlm_sandboxd"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_manager,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, sandboxd),
      &ngx_http_rlm_path_post },

    { ngx_string("rlm_sandboxd_socket"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_manager,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, sandboxd_socket),
      &ngx_http_rlm_path_post },

    { ngx_string("rlm_runtime_dir"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_manager,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, runtime_dir),
      &ngx_http_rlm_path_post },

    { ngx_string("rlm_pool_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, pool_size),
      &ngx_http_rlm_pool_size_bounds },

    { ngx_string("rlm_max_sessions"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, max_sessions),
      &ngx_http_rlm_max_sessions_bounds },

    { ngx_string("rlm_session_spares"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, session_spares),
      &ngx_http_rlm_spares_bounds },

    /* several nodes: the first byte of every id this node makes */
    { ngx_string("rlm_node_id"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, node_id),
      &ngx_http_rlm_node_id_bounds },

    { ngx_string("rlm_cell_cpu_time"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, cell_cpu_time),
      &ngx_http_rlm_cpu_time_bounds },

    { ngx_string("rlm_cell_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, cell_timeout),
      &ngx_http_rlm_cell_timeout_bounds },

    { ngx_string("rlm_sandbox_memory"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, sandbox_memory),
      &ngx_http_rlm_memory_bounds },

    { ngx_string("rlm_sandbox_pids"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, sandbox_pids),
      &ngx_http_rlm_pids_bounds },

    /* jail layers the manager may run without (gVisor: docs/deploy.md) */
    { ngx_string("rlm_sandbox_allow_missing"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_conf_set_bitmask_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, allow_missing),
      &ngx_http_rlm_jail_layers },

    { ngx_string("rlm_output_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, output_max),
      &ngx_http_rlm_output_bounds },

    { ngx_string("rlm_answer_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, answer_max),
      &ngx_http_rlm_frame_bounds },

    { ngx_string("rlm_state_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, state_max),
      &ngx_http_rlm_frame_bounds },

    { ngx_string("rlm_session_idle_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, session_idle_timeout),
      &ngx_http_rlm_idle_timeout_bounds },

    { ngx_string("rlm_session_queue"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, session_queue),
      &ngx_http_rlm_queue_bounds },

    { ngx_string("rlm_sessions_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_rlm_sessions_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("rlm_context_max_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, context_max_size),
      &ngx_http_rlm_context_bounds },

    { ngx_string("rlm_session_owner"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_rlm_loc_conf_t, owner),
      NULL },

    { ngx_string("rlm_health"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_rlm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) NGX_HTTP_RLM_HANDLER_HEALTH },

    { ngx_string("rlm_sessions_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_rlm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) NGX_HTTP_RLM_HANDLER_SESSIONS },

    { ngx_string("rlm_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_rlm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) NGX_HTTP_RLM_HANDLER_METRICS },

    { ngx_string("rlm_trajectory_dir"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_rlm_trajectory_dir,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_rlm_main_conf_t, trajectory_dir),
      NULL },

    { ngx_string("rlm_trajectories"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_rlm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) NGX_HTTP_RLM_HANDLER_TRAJECTORIES },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_rlm_module_ctx = {
    ngx_http_rlm_preconfiguration,         /* preconfiguration */
    ngx_http_rlm_postconfiguration,        /* postconfiguration */

    ngx_http_rlm_create_main_conf,         /* create main configuration */
    ngx_http_rlm_init_main_conf,           /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_rlm_create_loc_conf,          /* create location configuration */
    ngx_http_rlm_merge_loc_conf            /* merge location configuration */
};


ngx_module_t  ngx_http_rlm_module = {
    NGX_MODULE_V1,
    &ngx_http_rlm_module_ctx,              /* module context */
    ngx_http_rlm_commands,                 /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_rlm_init_module,              /* init module */
    ngx_http_rlm_init_process,             /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_rlm_exit_process,             /* exit process */
    ngx_http_rlm_exit_master,              /* exit master */
    NGX_MODULE_V1_PADDING
};


ngx_http_rlm_zone_t *
ngx_http_rlm_zone(void)
{
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_rlm_module);

    if (rmcf == NULL || rmcf->shm_zone == NULL) {
        return NULL;
    }

    return rmcf->shm_zone->data;
}


static ngx_int_t
ngx_http_rlm_preconfiguration(ngx_conf_t *cf)
{
    return ngx_http_rlm_add_variables(cf);
}


static ngx_int_t
ngx_http_rlm_postconfiguration(ngx_conf_t *cf)
{
    return ngx_http_rlm_body_cap_init(cf);
}


static ngx_int_t
ngx_http_rlm_init_module(ngx_cycle_t *cycle)
{
    ngx_http_rlm_main_conf_t  *rmcf;

    /* runs in the master on start and on every reload */

    rmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_rlm_module);

    if (rmcf == NULL) {
        ngx_http_rlm_session_set_node(-1);
        return ngx_http_rlm_supervisor_init(cycle, NULL);
    }

    /* the workers forked for this cycle inherit it */
    ngx_http_rlm_session_set_node(rmcf->node_id);

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                  "ngx_rlm/" NGX_HTTP_RLM_VERSION " loaded");

    return ngx_http_rlm_supervisor_init(cycle, rmcf);
}


static ngx_int_t
ngx_http_rlm_init_process(ngx_cycle_t *cycle)
{
    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    if (ngx_http_cycle_get_module_main_conf(cycle, ngx_http_rlm_module)
        == NULL)
    {
        return NGX_OK;
    }

    return ngx_http_rlm_janitor_init(cycle);
}


static void
ngx_http_rlm_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_rlm_peer_close_idle();
    ngx_http_rlm_supervisor_exit(cycle);
}


static void
ngx_http_rlm_exit_master(ngx_cycle_t *cycle)
{
    ngx_http_rlm_supervisor_exit(cycle);
}


static void *
ngx_http_rlm_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_rlm_main_conf_t));
    if (rmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     rmcf->sandboxd = { 0, NULL };
     *     rmcf->sandboxd_socket = { 0, NULL };
     *     rmcf->runtime_dir = { 0, NULL };
     *     rmcf->control_path = { 0, NULL };
     *     rmcf->shm_zone = NULL;
     */

    rmcf->pool_size = NGX_CONF_UNSET_UINT;
    rmcf->max_sessions = NGX_CONF_UNSET_UINT;
    rmcf->session_spares = NGX_CONF_UNSET_UINT;
    rmcf->node_id = NGX_CONF_UNSET;
    rmcf->cell_cpu_time = NGX_CONF_UNSET;
    rmcf->cell_timeout = NGX_CONF_UNSET_MSEC;
    rmcf->sandbox_memory = NGX_CONF_UNSET_SIZE;
    rmcf->sandbox_pids = NGX_CONF_UNSET_UINT;
    rmcf->output_max = NGX_CONF_UNSET_SIZE;
    rmcf->answer_max = NGX_CONF_UNSET_SIZE;
    rmcf->state_max = NGX_CONF_UNSET_SIZE;
    rmcf->session_idle_timeout = NGX_CONF_UNSET;
    rmcf->session_queue = NGX_CONF_UNSET_UINT;
    rmcf->context_max_size = NGX_CONF_UNSET_SIZE;

    return rmcf;
}


static char *
ngx_http_rlm_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_rlm_main_conf_t  *rmcf = conf;

    if (rmcf->runtime_dir.len == 0) {
        ngx_str_set(&rmcf->runtime_dir, "/run/ngx_rlm");
    }

    ngx_conf_init_uint_value(rmcf->pool_size, 8);
    ngx_conf_init_uint_value(rmcf->max_sessions, 1024);
    ngx_conf_init_uint_value(rmcf->session_spares, 2);
    ngx_conf_init_value(rmcf->node_id, -1);
    ngx_conf_init_value(rmcf->cell_cpu_time, 10);
    ngx_conf_init_msec_value(rmcf->cell_timeout, 30000);
    ngx_conf_init_size_value(rmcf->sandbox_memory, 512 * 1024 * 1024);
    ngx_conf_init_uint_value(rmcf->sandbox_pids, 64);
    ngx_conf_init_size_value(rmcf->output_max, 1024 * 1024);
    ngx_conf_init_size_value(rmcf->answer_max, 1024 * 1024);
    ngx_conf_init_size_value(rmcf->state_max, 1024 * 1024);
    ngx_conf_init_value(rmcf->session_idle_timeout, 3600);
    ngx_conf_init_uint_value(rmcf->session_queue, 16);
    ngx_conf_init_size_value(rmcf->context_max_size, 256 * 1024 * 1024);

    /* where workers reach the manager */

    if (rmcf->sandboxd_socket.len) {
        rmcf->control_path = rmcf->sandboxd_socket;

    } else if (rmcf->sandboxd.len) {
        rmcf->control_path.len = rmcf->runtime_dir.len
                                 + sizeof("/control.sock") - 1;
        rmcf->control_path.data = ngx_pnalloc(cf->pool,
                                              rmcf->control_path.len + 1);
        if (rmcf->control_path.data == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_sprintf(rmcf->control_path.data, "%V/control.sock%Z",
                    &rmcf->runtime_dir);
    }

    if (rmcf->control_path.len >= NGX_HTTP_RLM_PATH_LEN) {
        ngx_http_rlm_conf_error_at(cf->log, rmcf->sandboxd_socket.len
                                   ? &rmcf->socket_where
                                   : &rmcf->runtime_dir_where,
                                   "the control socket path \"%V\" is too "
                                   "long for a unix socket (check "
                                   "\"rlm_runtime_dir\" or "
                                   "\"rlm_sandboxd_socket\")",
                                   &rmcf->control_path);
        return NGX_CONF_ERROR;
    }

    if (rmcf->shm_zone == NULL) {
        ngx_str_t  name = ngx_string("rlm_sessions");

        if (ngx_http_rlm_add_zone(cf, rmcf, &name, 4 * 1024 * 1024)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_rlm_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_rlm_loc_conf_t  *rlcf;

    rlcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_rlm_loc_conf_t));
    if (rlcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     rlcf->handler = NGX_HTTP_RLM_HANDLER_NONE;
     */

    rlcf->owner = NGX_CONF_UNSET_PTR;

    return rlcf;
}


static char *
ngx_http_rlm_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_rlm_loc_conf_t *prev = parent;
    ngx_http_rlm_loc_conf_t *conf = child;

    ngx_http_core_loc_conf_t  *clcf;

    /* handlers are not inherited: a location serves what it names itself */

    ngx_conf_merge_ptr_value(conf->owner, prev->owner, NULL);

    if (conf->handler == NGX_HTTP_RLM_HANDLER_SESSIONS) {
        clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

        /*
         * The module checks body sizes itself, per route, so that a
         * Content-Length over rlm_context_max_size gets a JSON 413; a
         * chunked body is stopped by its request body filter.
         */

        clcf->client_max_body_size = 0;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_rlm_set_handler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_rlm_loc_conf_t *rlcf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    if (rlcf->handler != NGX_HTTP_RLM_HANDLER_NONE) {
        return "conflicts with another rlm handler in this location";
    }

    rlcf->handler = (ngx_http_rlm_handler_e) (uintptr_t) cmd->post;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_rlm_handler;

    return NGX_CONF_OK;
}


static char *
ngx_http_rlm_sessions_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_rlm_main_conf_t  *rmcf = conf;

    off_t       size;
    ngx_str_t  *value;

    value = cf->args->elts;

    if (rmcf->shm_zone) {
        return "is duplicate";
    }

    if (value[1].len == 0) {
        return "needs a zone name";
    }

    /* k, m and g, as client_max_body_size */
    size = ngx_parse_offset(&value[2]);

    if (size == NGX_ERROR || (uint64_t) size > NGX_MAX_SIZE_T_VALUE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (size < 64 * 1024) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is too small: at least 64k",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_rlm_add_zone(cf, rmcf, &value[1], (size_t) size) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_rlm_add_zone(ngx_conf_t *cf, ngx_http_rlm_main_conf_t *rmcf,
    ngx_str_t *name, size_t size)
{
    ngx_http_rlm_zone_t  *z;

    z = ngx_pcalloc(cf->pool, sizeof(ngx_http_rlm_zone_t));
    if (z == NULL) {
        return NGX_ERROR;
    }

    rmcf->shm_zone = ngx_shared_memory_add(cf, name, size,
                                           &ngx_http_rlm_module);
    if (rmcf->shm_zone == NULL) {
        return NGX_ERROR;
    }

    if (rmcf->shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "rlm_sessions_zone \"%V\" is already defined",
                           name);
        return NGX_ERROR;
    }

    rmcf->shm_zone->init = ngx_http_rlm_session_init_zone;
    rmcf->shm_zone->data = z;

    return NGX_OK;
}


/*
 * rlm_sandboxd, rlm_sandboxd_socket and rlm_runtime_dir: nginx either
 * runs the manager (an executable that exists now, so that a typo fails
 * `nginx -t` rather than every restart of the manager) or connects to
 * one, never both.
 */

static char *
ngx_http_rlm_manager(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_rlm_main_conf_t  *rmcf = conf;

    char       *rv;
    ngx_str_t  *value;

    rv = ngx_conf_set_str_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    value = cf->args->elts;

    if (cmd->offset == offsetof(ngx_http_rlm_main_conf_t, runtime_dir)) {
        ngx_http_rlm_conf_where(cf, &rmcf->runtime_dir_where);
        return NGX_CONF_OK;
    }

    if (rmcf->sandboxd.len && rmcf->sandboxd_socket.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"rlm_sandboxd\" and \"rlm_sandboxd_socket\" "
                           "are mutually exclusive: nginx either runs the "
                           "sandbox manager or connects to one");
        return NGX_CONF_ERROR;
    }

    if (cmd->offset == offsetof(ngx_http_rlm_main_conf_t, sandboxd_socket)) {
        ngx_http_rlm_conf_where(cf, &rmcf->socket_where);
        return NGX_CONF_OK;
    }

    if (ngx_http_rlm_conf_check_exec(cf, &rmcf->sandboxd, &value[0])
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_rlm_check_path(ngx_conf_t *cf, void *post, void *data)
{
    ngx_str_t  *path = data;

    if (path->len == 0) {
        return "must not be empty";
    }

    if (path->data[0] != '/') {
        return "must be an absolute path";
    }

    return NGX_CONF_OK;
}


/*
 * Like ngx_conf_check_num_bounds(), but returns the message so that nginx
 * prefixes it with the directive's name.
 */

char *
ngx_http_rlm_check_bounds(ngx_conf_t *cf, void *post, void *data)
{
    ngx_conf_num_bounds_t  *bounds = post;
    ngx_int_t              *np = data;

    u_char  *msg, *last;

    if (*np >= bounds->low && *np <= bounds->high) {
        return NGX_CONF_OK;
    }

    msg = ngx_pnalloc(cf->pool, 64);
    if (msg == NULL) {
        return NGX_CONF_ERROR;
    }

    last = ngx_snprintf(msg, 63, "must be between %i and %i",
                        bounds->low, bounds->high);
    *last = '\0';

    return (char *) msg;
}


static ngx_int_t
ngx_http_rlm_handler(ngx_http_request_t *r)
{
    ngx_int_t                 rc;
    ngx_http_rlm_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_module);

    ngx_http_rlm_enter_handler();

    switch (rlcf->handler) {

    case NGX_HTTP_RLM_HANDLER_HEALTH:
        rc = ngx_http_rlm_health_handler(r);
        break;

    case NGX_HTTP_RLM_HANDLER_SESSIONS:
        rc = ngx_http_rlm_sessions_handler(r);
        break;

    case NGX_HTTP_RLM_HANDLER_METRICS:
        rc = ngx_http_rlm_metrics_handler(r);
        break;

    case NGX_HTTP_RLM_HANDLER_TRAJECTORIES:
        rc = ngx_http_rlm_trajectories_handler(r);
        break;

    default:
        rc = NGX_DECLINED;
        break;
    }

    ngx_http_rlm_leave_handler();

    return rc;
}
