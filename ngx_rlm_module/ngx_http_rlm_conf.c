
/*
 * ngx_rlm: what `nginx -t` checks beyond nginx's own slots.
 *
 * Every check runs where the directive is parsed, so that nginx's message
 * names the file and line of the directive at fault.  A check that needs
 * the whole block (two directives that exclude each other, a provider
 * named before it is defined) keeps the directive's file:line in an
 * ngx_http_rlm_conf_where_t and reports it with that.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <curl/curl.h>

#include "ngx_http_rlm_conf.h"


/*
 * ngx_conf_set_size_slot() with the suffixes of client_max_body_size:
 * ngx_parse_offset() takes k, m and g where ngx_parse_size() stops at m.
 */

char *
ngx_http_rlm_conf_set_size_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char  *p = conf;

    off_t             off;
    size_t           *sp;
    ngx_str_t        *value;
    ngx_conf_post_t  *post;

    sp = (size_t *) (p + cmd->offset);
    if (*sp != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    off = ngx_parse_offset(&value[1]);
    if (off == (off_t) NGX_ERROR || (uint64_t) off > NGX_MAX_SIZE_T_VALUE) {
        return "invalid value";
    }

    *sp = (size_t) off;

    if (cmd->post) {
        post = cmd->post;
        return post->post_handler(cf, post, sp);
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_rlm_conf_out_of_bounds(ngx_conf_t *cf,
    ngx_http_rlm_conf_bounds_t *b)
{
    ngx_str_t  *value;

    value = cf->args->elts;

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" must be %s",
                       &value[0], b->text);

    return NGX_CONF_ERROR;
}


char *
ngx_http_rlm_conf_size_bounds(ngx_conf_t *cf, void *post, void *data)
{
    ngx_http_rlm_conf_bounds_t  *b = post;
    size_t                      *sp = data;

    if ((off_t) *sp < b->low || (off_t) *sp > b->high) {
        return ngx_http_rlm_conf_out_of_bounds(cf, b);
    }

    return NGX_CONF_OK;
}


char *
ngx_http_rlm_conf_msec_bounds(ngx_conf_t *cf, void *post, void *data)
{
    ngx_http_rlm_conf_bounds_t  *b = post;
    ngx_msec_t                  *mp = data;

    if ((off_t) *mp < b->low || (off_t) *mp > b->high) {
        return ngx_http_rlm_conf_out_of_bounds(cf, b);
    }

    return NGX_CONF_OK;
}


char *
ngx_http_rlm_conf_sec_bounds(ngx_conf_t *cf, void *post, void *data)
{
    ngx_http_rlm_conf_bounds_t  *b = post;
    time_t                      *tp = data;

    if ((off_t) *tp < b->low || (off_t) *tp > b->high) {
        return ngx_http_rlm_conf_out_of_bounds(cf, b);
    }

    return NGX_CONF_OK;
}


void
ngx_http_rlm_conf_where(ngx_conf_t *cf, ngx_http_rlm_conf_where_t *w)
{
    if (cf->conf_file == NULL || cf->conf_file->file.name.data == NULL) {
        /* the -g command line */
        ngx_str_set(&w->file, "command line");
        w->line = 0;
        return;
    }

    w->file = cf->conf_file->file.name;
    w->line = cf->conf_file->line;
}


/* ngx_conf_log_error(), at a file:line kept from an earlier directive */

void ngx_cdecl
ngx_http_rlm_conf_error_at(ngx_log_t *log, ngx_http_rlm_conf_where_t *w,
    const char *fmt, ...)
{
    u_char   *p;
    va_list   args;
    u_char    msg[NGX_MAX_CONF_ERRSTR];

    va_start(args, fmt);
    p = ngx_vslprintf(msg, msg + sizeof(msg), fmt, args);
    va_end(args);

    ngx_log_error(NGX_LOG_EMERG, log, 0, "%*s in %V:%ui",
                  p - msg, msg, &w->file, w->line);
}


/*
 * A URL as libcurl will read it when the first call is made: a host that
 * is not one (white space, an unclosed "[" of IPv6), a port over 65535
 * or a scheme curl does not speak fail here instead of on every call.
 */

const char *
ngx_http_rlm_conf_url_error(ngx_conf_t *cf, ngx_str_t *url)
{
    char       *host, *text;
    CURLU      *u;
    CURLUcode   rc;

    text = ngx_pnalloc(cf->temp_pool, url->len + 1);
    if (text == NULL) {
        return "out of memory";
    }

    (void) ngx_cpystrn((u_char *) text, url->data, url->len + 1);

    u = curl_url();
    if (u == NULL) {
        return "out of memory";
    }

    host = NULL;

    rc = curl_url_set(u, CURLUPART_URL, text, 0);

    if (rc == CURLUE_OK) {
        rc = curl_url_get(u, CURLUPART_HOST, &host, 0);
    }

    if (rc == CURLUE_OK && (host == NULL || host[0] == '\0')) {
        rc = CURLUE_NO_HOST;
    }

    if (host) {
        curl_free(host);
    }

    curl_url_cleanup(u);

    if (rc != CURLUE_OK) {
        return curl_url_strerror(rc);
    }

    return NULL;
}


/* the master runs it at start, on every reload and after a crash */

ngx_int_t
ngx_http_rlm_conf_check_exec(ngx_conf_t *cf, ngx_str_t *path,
    ngx_str_t *what)
{
    u_char           *name;
    ngx_file_info_t   fi;

    if (ngx_process == NGX_PROCESS_SIGNALLER) {
        /* "nginx -s reload" only reads the pid file */
        return NGX_OK;
    }

    name = ngx_pnalloc(cf->temp_pool, path->len + 1);
    if (name == NULL) {
        return NGX_ERROR;
    }

    (void) ngx_cpystrn(name, path->data, path->len + 1);

    if (ngx_file_info(name, &fi) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "%V \"%V\": " ngx_file_info_n " failed",
                           what, path);
        return NGX_ERROR;
    }

    if (!ngx_is_file(&fi)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V \"%V\" is not a regular file", what, path);
        return NGX_ERROR;
    }

    if (access((char *) name, X_OK) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "%V \"%V\" is not executable", what, path);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * A variable passed on by nginx's "env" directive: "env NAME;" (the value
 * nginx was started with) or "env NAME=VALUE;".  NGX_DECLINED when no
 * "env" names it: nginx clears every other variable in its workers, and
 * a key read from one would not survive nginx's own re-exec (binary
 * upgrade) either.
 */

ngx_int_t
ngx_http_rlm_conf_env(ngx_cycle_t *cycle, ngx_str_t *name, ngx_str_t *value)
{
    u_char           *p;
    ngx_str_t        *var;
    ngx_uint_t        i;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    var = ccf->env.elts;

    /* "env" keeps the length of the name and "=VALUE" after it */

    for (i = 0; i < ccf->env.nelts; i++) {

        if (var[i].len != name->len
            || ngx_strncmp(var[i].data, name->data, name->len) != 0)
        {
            continue;
        }

        if (var[i].data[name->len] == '=') {
            value->data = var[i].data + name->len + 1;
            value->len = ngx_strlen(value->data);
            return NGX_OK;
        }

        p = (u_char *) getenv((char *) name->data);

        value->data = p;
        value->len = p ? ngx_strlen(p) : 0;
        return NGX_OK;
    }

    return NGX_DECLINED;
}
