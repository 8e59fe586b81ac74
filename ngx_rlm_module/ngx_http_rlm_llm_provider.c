
/*
 * ngx_rlm: the rlm_provider directive.
 *
 *     rlm_provider NAME url=BASE_URL [key_env=VAR | key_file=PATH]
 *                  [model=NAME] [timeout=TIME] [connect_timeout=TIME]
 *                  [retries=N] [backoff=TIME] [backoff_max=TIME]
 *                  [retry_after_max=TIME] [max_concurrent=N]
 *                  [max_response=SIZE];
 *
 * BASE_URL is what OpenAI SDKs take (https://api.openai.com/v1); calls go
 * to BASE_URL/chat/completions.  libcurl's own URL parser checks it here,
 * so that a URL curl would refuse fails `nginx -t`.  The key is read
 * once, while the master parses the configuration: from a variable that
 * nginx's "env" directive passes on (key_env; "env" comes before the
 * http block) or from a file (key_file, surrounding white space removed).
 * It is kept only in the header line sent to the provider and for
 * redaction of messages.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_rlm_llm.h"
#include "ngx_http_rlm_conf.h"


static char *ngx_http_rlm_llm_set_key(ngx_conf_t *cf,
    ngx_http_rlm_provider_t *p, ngx_str_t *key);
static char *ngx_http_rlm_llm_read_key_file(ngx_conf_t *cf, ngx_str_t *path,
    ngx_str_t *key);


typedef struct {
    ngx_str_t    name;
    size_t       offset;
    ngx_msec_t   min;
} ngx_http_rlm_llm_time_param_t;


static ngx_http_rlm_llm_time_param_t  ngx_http_rlm_llm_times[] = {
    { ngx_string("timeout="),
      offsetof(ngx_http_rlm_provider_t, timeout), 1 },
    { ngx_string("connect_timeout="),
      offsetof(ngx_http_rlm_provider_t, connect_timeout), 1 },
    { ngx_string("backoff="),
      offsetof(ngx_http_rlm_provider_t, backoff), 0 },
    { ngx_string("backoff_max="),
      offsetof(ngx_http_rlm_provider_t, backoff_max), 0 },
    { ngx_string("retry_after_max="),
      offsetof(ngx_http_rlm_provider_t, retry_after_max), 0 },
    { ngx_null_string, 0, 0 }
};


#define ngx_http_rlm_arg(v, lit)                                            \
    ((v)->len > sizeof(lit) - 1                                             \
     && ngx_strncmp((v)->data, lit, sizeof(lit) - 1) == 0)


char *
ngx_http_rlm_llm_parse_provider(ngx_conf_t *cf, ngx_http_rlm_provider_t *p)
{
    u_char      *q;
    char        *rv;
    const char  *err;
    ngx_int_t    n;
    ngx_str_t   *value, v, key, env_name;
    ngx_uint_t   i, have_key;
    off_t        size;
    ngx_msec_t   ms;

    ngx_http_rlm_llm_time_param_t  *t;

    value = cf->args->elts;

    ngx_memzero(p, sizeof(ngx_http_rlm_provider_t));

    p->name = value[1];
    p->timeout = 60000;
    p->connect_timeout = 10000;
    p->retries = 2;
    p->backoff = 500;
    p->backoff_max = 8000;
    p->retry_after_max = 60000;
    p->max_concurrent = 64;
    p->max_response = 8 * 1024 * 1024;

    have_key = 0;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_http_rlm_arg(&value[i], "url=")) {
            v.data = value[i].data + 4;
            v.len = value[i].len - 4;

            if (!(v.len > 7 && ngx_strncasecmp(v.data, (u_char *) "http://", 7)
                                == 0)
                && !(v.len > 8
                     && ngx_strncasecmp(v.data, (u_char *) "https://", 8)
                        == 0))
            {
                return "url must start with http:// or https://";
            }

            while (v.len && v.data[v.len - 1] == '/') {
                v.len--;
            }

            err = ngx_http_rlm_conf_url_error(cf, &v);
            if (err) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "rlm_provider \"%V\": invalid url "
                                   "\"%V\": %s", &p->name, &v, err);
                return NGX_CONF_ERROR;
            }

            p->url = v;
            continue;
        }

        if (ngx_http_rlm_arg(&value[i], "key_env=")) {
            if (have_key++) {
                return "takes one of key_env and key_file";
            }

            env_name.len = value[i].len - 8;
            env_name.data = value[i].data + 8;

            /* what "env NAME;" or "env NAME=VALUE;" passes on */
            n = ngx_http_rlm_conf_env(cf->cycle, &env_name, &key);

            if ((n == NGX_DECLINED || key.len == 0)
                && ngx_process == NGX_PROCESS_SIGNALLER)
            {
                /* "nginx -s reload" from a shell without the variable */
                continue;
            }

            if (n == NGX_DECLINED) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "rlm_provider \"%V\": key_env=%V needs "
                                   "\"env %V;\" in the main context, before "
                                   "the http block", &p->name, &env_name,
                                   &env_name);
                return NGX_CONF_ERROR;
            }

            if (key.len == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "rlm_provider \"%V\": environment "
                                   "variable \"%V\" is not set or empty",
                                   &p->name, &env_name);
                return NGX_CONF_ERROR;
            }

            rv = ngx_http_rlm_llm_set_key(cf, p, &key);
            if (rv != NGX_CONF_OK) {
                return rv;
            }

            continue;
        }

        if (ngx_http_rlm_arg(&value[i], "key_file=")) {
            if (have_key++) {
                return "takes one of key_env and key_file";
            }

            v.len = value[i].len - 9;
            v.data = value[i].data + 9;

            rv = ngx_http_rlm_llm_read_key_file(cf, &v, &key);
            if (rv != NGX_CONF_OK) {
                return rv;
            }

            rv = ngx_http_rlm_llm_set_key(cf, p, &key);
            if (rv != NGX_CONF_OK) {
                return rv;
            }

            continue;
        }

        if (ngx_http_rlm_arg(&value[i], "model=")) {
            p->model.len = value[i].len - 6;
            p->model.data = value[i].data + 6;
            continue;
        }

        for (t = ngx_http_rlm_llm_times; t->name.len; t++) {
            if (value[i].len > t->name.len
                && ngx_strncmp(value[i].data, t->name.data, t->name.len)
                   == 0)
            {
                break;
            }
        }

        if (t->name.len) {
            v.data = value[i].data + t->name.len;
            v.len = value[i].len - t->name.len;

            ms = ngx_parse_time(&v, 0);
            if (ms == (ngx_msec_t) NGX_ERROR || ms < t->min) {
                goto invalid;
            }

            *(ngx_msec_t *) ((u_char *) p + t->offset) = ms;
            continue;
        }

        if (ngx_http_rlm_arg(&value[i], "retries=")) {
            n = ngx_atoi(value[i].data + 8, value[i].len - 8);
            if (n == NGX_ERROR || n > 100) {
                goto invalid;
            }

            p->retries = n;
            continue;
        }

        if (ngx_http_rlm_arg(&value[i], "max_concurrent=")) {
            n = ngx_atoi(value[i].data + 15, value[i].len - 15);
            if (n == NGX_ERROR || n < 1) {
                goto invalid;
            }

            p->max_concurrent = n;
            continue;
        }

        if (ngx_http_rlm_arg(&value[i], "max_response=")) {
            v.len = value[i].len - 13;
            v.data = value[i].data + 13;

            size = ngx_parse_offset(&v);
            if (size == NGX_ERROR || size < 1024
                || (uint64_t) size > NGX_MAX_SIZE_T_VALUE)
            {
                goto invalid;
            }

            p->max_response = (size_t) size;
            continue;
        }

        goto invalid;
    }

    if (p->url.len == 0) {
        return "needs url=";
    }

    if (p->backoff_max < p->backoff) {
        p->backoff_max = p->backoff;
    }

    /* url/chat/completions, unless the url names the endpoint already */

    v.len = sizeof("/chat/completions") - 1;

    if (p->url.len > v.len
        && ngx_strncmp(p->url.data + p->url.len - v.len,
                       "/chat/completions", v.len) == 0)
    {
        v.len = 0;
    }

    p->endpoint.len = p->url.len + v.len;
    p->endpoint.data = ngx_pnalloc(cf->pool, p->endpoint.len + 1);
    if (p->endpoint.data == NULL) {
        return NGX_CONF_ERROR;
    }

    q = ngx_cpymem(p->endpoint.data, p->url.data, p->url.len);
    q = ngx_cpymem(q, "/chat/completions", v.len);
    *q = '\0';

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "rlm_provider \"%V\": invalid parameter \"%V\"",
                       &p->name, &value[i]);

    return NGX_CONF_ERROR;
}


ngx_http_rlm_provider_t *
ngx_http_rlm_llm_find_provider(ngx_array_t *providers, ngx_str_t *name)
{
    ngx_uint_t                i;
    ngx_http_rlm_provider_t  *p;

    if (providers == NULL) {
        return NULL;
    }

    p = providers->elts;

    for (i = 0; i < providers->nelts; i++) {
        if (p[i].name.len == name->len
            && ngx_strncmp(p[i].name.data, name->data, name->len) == 0)
        {
            return &p[i];
        }
    }

    return NULL;
}


static char *
ngx_http_rlm_llm_set_key(ngx_conf_t *cf, ngx_http_rlm_provider_t *p,
    ngx_str_t *key)
{
    u_char      *q;
    ngx_uint_t   i;

    static const char  prefix[] = "Authorization: Bearer ";

    /* a key with a line break would inject headers */

    for (i = 0; i < key->len; i++) {
        if (key->data[i] < 0x21 || key->data[i] == 0x7f) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "rlm_provider \"%V\": the key contains white "
                               "space or control characters", &p->name);
            return NGX_CONF_ERROR;
        }
    }

    p->key.len = key->len;
    p->key.data = ngx_pnalloc(cf->pool, key->len);
    if (p->key.data == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(p->key.data, key->data, key->len);

    p->auth.len = sizeof(prefix) - 1 + key->len;
    p->auth.data = ngx_pnalloc(cf->pool, p->auth.len + 1);
    if (p->auth.data == NULL) {
        return NGX_CONF_ERROR;
    }

    q = ngx_cpymem(p->auth.data, prefix, sizeof(prefix) - 1);
    q = ngx_cpymem(q, key->data, key->len);
    *q = '\0';

    return NGX_CONF_OK;
}


static char *
ngx_http_rlm_llm_read_key_file(ngx_conf_t *cf, ngx_str_t *path,
    ngx_str_t *key)
{
    u_char           *buf, *start, *end;
    ssize_t           n;
    ngx_fd_t          fd;
    ngx_str_t         name;
    ngx_file_info_t   fi;

    name = *path;

    if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    fd = ngx_open_file(name.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%V\" failed", &name);
        return NGX_CONF_ERROR;
    }

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR
        || ngx_file_size(&fi) > 4096)
    {
        ngx_close_file(fd);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "key file \"%V\" is unreadable or larger than 4k",
                           &name);
        return NGX_CONF_ERROR;
    }

    buf = ngx_pnalloc(cf->temp_pool, 4097);
    if (buf == NULL) {
        ngx_close_file(fd);
        return NGX_CONF_ERROR;
    }

    n = ngx_read_fd(fd, buf, 4096);
    ngx_close_file(fd);

    if (n < 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_read_fd_n " \"%V\" failed", &name);
        return NGX_CONF_ERROR;
    }

    start = buf;
    end = buf + n;

    while (start < end && (*start <= ' ')) {
        start++;
    }

    while (end > start && end[-1] <= ' ') {
        end--;
    }

    if (start == end) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "key file \"%V\" is empty",
                           &name);
        return NGX_CONF_ERROR;
    }

    key->data = start;
    key->len = end - start;

    return NGX_CONF_OK;
}
