
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * POST .../sessions/{id}/eval and PUT .../sessions/{id}/context: read
 * and check the body, run the cell (or load the context) on the
 * session's sandbox (ngx_http_rlm_cell.c), answer with its result.
 */


#include "ngx_http_rlm_cell.h"


/* the host's deadline of a cell: its wall time and this grace */
#define NGX_HTTP_RLM_CELL_MARGIN    5000

#define ngx_http_rlm_ident_start(c)                                           \
    (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z') || (c) == '_')
#define ngx_http_rlm_ident_char(c)                                            \
    (ngx_http_rlm_ident_start(c) || ((c) >= '0' && (c) <= '9'))


/* an API cell: the cell and what the body checks answered */
typedef struct {
    ngx_http_rlm_cell_t         cell;
    ngx_int_t                   answer_rc;
} ngx_http_rlm_eval_t;


static void ngx_http_rlm_eval_body(ngx_http_request_t *r);
static void ngx_http_rlm_eval_body_run(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_eval_parse(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_context_parse(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev);
static void ngx_http_rlm_eval_done(ngx_http_rlm_cell_t *cell, ngx_int_t rc);
static ngx_int_t ngx_http_rlm_eval_respond(ngx_http_rlm_eval_t *ev);
static ngx_int_t ngx_http_rlm_json_content_type(ngx_http_request_t *r);
static ngx_int_t ngx_http_rlm_eval_body_json(ngx_http_request_t *r,
    ngx_http_rlm_eval_t *ev, json_t **out);
static ngx_int_t ngx_http_rlm_eval_answered(ngx_http_rlm_eval_t *ev,
    ngx_int_t rc);


/*
 * Entry from the router with a referenced session; the reference now
 * belongs to the eval state and its cleanup.
 */

ngx_int_t
ngx_http_rlm_eval_handler(ngx_http_request_t *r, ngx_http_rlm_session_t *s,
    ngx_uint_t context)
{
    ngx_int_t                  rc;
    ngx_http_rlm_ctx_t        *ctx;
    ngx_http_rlm_eval_t       *ev;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    ctx = ngx_http_rlm_get_ctx(r);
    ev = ngx_pcalloc(r->pool, sizeof(ngx_http_rlm_eval_t));

    if (ctx == NULL || ev == NULL) {
        ngx_http_rlm_session_put(ngx_http_rlm_zone(), s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ev->cell.request = r;
    ev->cell.zone = ngx_http_rlm_zone();
    ev->cell.session = s;
    ev->cell.referenced = 1;
    ev->cell.context = context;
    ev->cell.api = 1;
    ev->cell.done = ngx_http_rlm_eval_done;

    if (ngx_http_rlm_cell_init(&ev->cell) != NGX_OK) {
        ngx_http_rlm_session_put(ngx_http_rlm_zone(), s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->eval = ev;

    if (r == r->main) {
        if (!context && ngx_http_rlm_json_content_type(r) != NGX_OK) {
            return ngx_http_rlm_refuse(r, NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                       "invalid_request_error",
                                       "unsupported_media_type", NULL,
                                       "the body must be JSON "
                                       "(Content-Type: application/json)");
        }

        if (r->headers_in.content_length_n
            > (off_t) (context ? rmcf->context_max_size
                               : NGX_HTTP_RLM_EVAL_BODY_MAX))
        {
            return ngx_http_rlm_refuse(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                       "invalid_request_error",
                                       "body_too_large", NULL,
                                       context ? "the context is larger "
                                                 "than rlm_context_max_size"
                                               : "the request body is too "
                                                 "large");
        }
    }

    /* a big context goes to a temp file and from there to the socket */

    if (!context) {
        r->request_body_in_single_buf = 1;
    }

    if (ngx_http_rlm_body_cap(r, context ? (off_t) rmcf->context_max_size
                                             : NGX_HTTP_RLM_EVAL_BODY_MAX)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_read_client_request_body(r, ngx_http_rlm_eval_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_eval_body(ngx_http_request_t *r)
{
    ngx_http_rlm_ctx_t   *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_rlm_module);

    ngx_http_rlm_enter_handler();
    ngx_http_rlm_eval_body_run(r, ctx->eval);
    ngx_http_rlm_leave_handler();
}


static void
ngx_http_rlm_eval_body_run(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev)
{
    ngx_int_t  rc;

    rc = ev->cell.context ? ngx_http_rlm_context_parse(r, ev)
                          : ngx_http_rlm_eval_parse(r, ev);

    if (rc == NGX_OK) {
        ngx_http_rlm_cell_start(&ev->cell);
        return;
    }

    /* the session goes back now, not when a subrequest's parent ends */
    ngx_http_rlm_cell_cancel(&ev->cell);

    ngx_http_rlm_finalize(r, rc == NGX_DECLINED ? ev->answer_rc : rc);
}


/* {"code": str, "timeout"?: seconds, "echo"?: bool} */

static ngx_int_t
ngx_http_rlm_eval_parse(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev)
{
    double                     secs;
    json_t                    *body, *code, *timeout, *echo;
    ngx_int_t                  rc;
    ngx_msec_t                 wall;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    rc = ngx_http_rlm_eval_body_json(r, ev, &body);
    if (rc != NGX_OK) {
        return rc;
    }

    code = json_object_get(body, "code");
    timeout = json_object_get(body, "timeout");
    echo = json_object_get(body, "echo");

    if (code == NULL) {
        json_decref(body);
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "missing_field", "code",
                   "\"code\" is required"));
    }

    if (!json_is_string(code)) {
        json_decref(body);
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "invalid_type", "code",
                   "\"code\" must be a string"));
    }

    wall = rmcf->cell_timeout;

    if (timeout && !json_is_null(timeout)) {
        secs = json_is_number(timeout) ? json_number_value(timeout) : -1;

        if (!(secs > 0)) {
            json_decref(body);
            return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_type", "timeout",
                       "\"timeout\" must be a positive number of seconds"));
        }

        if (secs * 1000 < (double) wall) {
            wall = (ngx_msec_t) (secs * 1000);
            if (wall == 0) {
                wall = 1;
            }
        }
    }

    if (echo && !json_is_null(echo) && !json_is_boolean(echo)) {
        json_decref(body);
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "invalid_type", "echo",
                   "\"echo\" must be a boolean"));
    }

    ev->cell.frame = json_pack("{s:s, s:O, s:I, s:b}", "op", "exec",
                          "code", code, "timeout_ms", (json_int_t) wall,
                          "echo", json_is_true(echo));

    json_decref(body);

    if (ev->cell.frame == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ev->cell.timeout = wall + NGX_HTTP_RLM_CELL_MARGIN;

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_eval_body_json(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev,
    json_t **out)
{
    size_t         len;
    u_char        *data, *p;
    json_t        *body;
    ngx_buf_t     *b;
    ngx_chain_t   *cl;
    json_error_t   jerr;
    u_char         msg[256];

    *out = NULL;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_BAD_REQUEST,
                                       "invalid_request_error",
                                       "invalid_json",
                                       "the request body must be a JSON "
                                       "object"));
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        len += b->in_file ? (size_t) (b->file_last - b->file_pos)
                          : (size_t) (b->last - b->pos);
    }

    if (len > NGX_HTTP_RLM_EVAL_BODY_MAX) {
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                       "invalid_request_error",
                                       "body_too_large",
                                       "the request body is too large"));
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        data = cl->buf->pos;

    } else {
        data = ngx_pnalloc(r->pool, len ? len : 1);
        if (data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        p = data;

        for ( /* void */ ; cl; cl = cl->next) {
            b = cl->buf;

            if (b->in_file) {
                ssize_t  n;

                n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                                  b->file_pos);
                if (n != b->file_last - b->file_pos) {
                    return NGX_HTTP_INTERNAL_SERVER_ERROR;
                }

                p += n;

            } else {
                p = ngx_cpymem(p, b->pos, b->last - b->pos);
            }
        }
    }

    body = json_loadb((char *) data, len, JSON_REJECT_DUPLICATES, &jerr);

    if (body == NULL || !json_is_object(body)) {
        if (body) {
            json_decref(body);
            ngx_cpystrn(msg, (u_char *) "the request body must be a JSON "
                        "object", sizeof(msg));

        } else {
            ngx_snprintf(msg, sizeof(msg) - 1, "the request body is not "
                         "valid JSON: %s (line %d, column %d)%Z", jerr.text,
                         jerr.line, jerr.column);
        }

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "rlm: client sent a bad body: %s", msg);

        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_BAD_REQUEST,
                                       "invalid_request_error",
                                       "invalid_json", (char *) msg));
    }

    *out = body;

    return NGX_OK;
}


/* PUT .../context: the body itself is the blob of a load_context frame */

static ngx_int_t
ngx_http_rlm_context_parse(ngx_http_request_t *r, ngx_http_rlm_eval_t *ev)
{
    size_t                     len;
    u_char                     namebuf[65];
    ngx_str_t                  format, name, *ct;
    ngx_buf_t                 *b;
    ngx_uint_t                 i;
    ngx_chain_t               *cl, *out, **ll;
    ngx_http_rlm_main_conf_t  *rmcf;

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    ngx_str_null(&format);

    if (ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK) {
        if (!(format.len == 4 && ngx_strncmp(format.data, "json", 4) == 0)
            && !(format.len == 4 && ngx_strncmp(format.data, "text", 4) == 0))
        {
            return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_value", "format",
                       "the \"format\" argument must be \"json\" or "
                       "\"text\""));
        }

    } else if (r != r->main) {
        ngx_str_set(&format, "json");

    } else {
        ct = r->headers_in.content_type ? &r->headers_in.content_type->value
                                        : NULL;

        if (ct && ngx_http_rlm_json_content_type(r) == NGX_OK) {
            ngx_str_set(&format, "json");

        } else if (ct && ct->len >= 5
                   && ngx_strncasecmp(ct->data, (u_char *) "text/", 5) == 0)
        {
            ngx_str_set(&format, "text");

        } else {
            return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r,
                       NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                       "invalid_request_error", "unsupported_media_type",
                       "the context must be sent as application/json or "
                       "text/* (or say ?format=json|text)"));
        }
    }

    ngx_str_set(&name, "context");

    if (ngx_http_arg(r, (u_char *) "name", 4, &name) == NGX_OK) {
        if (name.len == 0 || name.len > 64
            || !ngx_http_rlm_ident_start(name.data[0]))
        {
            goto bad_name;
        }

        for (i = 1; i < name.len; i++) {
            if (!ngx_http_rlm_ident_char(name.data[i])) {
                goto bad_name;
            }
        }
    }

    ngx_memcpy(namebuf, name.data, name.len);
    namebuf[name.len] = '\0';

    len = 0;
    out = NULL;
    ll = &out;

    if (r->request_body) {
        for (cl = r->request_body->bufs; cl; cl = cl->next) {
            b = cl->buf;
            len += b->in_file ? (size_t) (b->file_last - b->file_pos)
                              : (size_t) (b->last - b->pos);

            *ll = ngx_alloc_chain_link(r->pool);
            if (*ll == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            (*ll)->buf = b;
            (*ll)->next = NULL;
            ll = &(*ll)->next;
        }
    }

    if (len > rmcf->context_max_size) {
        return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                       "invalid_request_error",
                                       "body_too_large",
                                       "the context is larger than "
                                       "rlm_context_max_size"));
    }

    ev->cell.frame = json_pack("{s:s, s:s, s:s%}", "op", "load_context",
                          "name", (char *) namebuf, "format",
                          (char *) format.data, format.len);
    if (ev->cell.frame == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ev->cell.blob = out;
    ev->cell.blob_len = len;

    /* parsing 100 MB of JSON in the sandbox takes a while */
    ev->cell.timeout = 2 * rmcf->cell_timeout + 60000;

    return NGX_OK;

bad_name:

    return ngx_http_rlm_eval_answered(ev,
               ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
               "invalid_request_error", "invalid_value", "name",
               "the \"name\" argument must be a Python identifier of at "
               "most 64 characters"));
}


/*
 * An error answer was sent while checking the body: remember the result
 * of sending it for the finalization.
 */

static ngx_int_t
ngx_http_rlm_eval_answered(ngx_http_rlm_eval_t *ev, ngx_int_t rc)
{
    ev->answer_rc = rc;

    return NGX_DECLINED;
}

/* the cell's outcome as the API's answer */

static void
ngx_http_rlm_eval_done(ngx_http_rlm_cell_t *cell, ngx_int_t rc)
{
    ngx_http_request_t   *r;
    ngx_http_rlm_eval_t  *ev;

    ev = (ngx_http_rlm_eval_t *) cell;
    r = cell->request;

    if (rc == NGX_OK) {
        rc = ngx_http_rlm_eval_respond(ev);

    } else if (cell->err_code) {
        if (rc == NGX_HTTP_TOO_MANY_REQUESTS
            && ngx_http_rlm_set_header(r, "Retry-After", "1") != NGX_OK)
        {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;

        } else {
            rc = ngx_http_rlm_send_error(r, rc, cell->err_type,
                                         cell->err_code,
                                         cell->err_message
                                         ? (char *) cell->err_message
                                         : cell->err_code);
        }
    }

    ngx_http_rlm_finalize(r, rc);
}


static ngx_int_t
ngx_http_rlm_eval_respond(ngx_http_rlm_eval_t *ev)
{
    u_char                  hex[NGX_HTTP_RLM_ID_HEX];
    json_t                 *out, *res;
    ngx_int_t               rc;
    ngx_http_rlm_result_t  *result;

    result = &ev->cell.result;

    ngx_http_rlm_session_format_id(ev->cell.session->id, hex);

    if (ev->cell.context) {
        out = json_pack("{s:s, s:s%, s:o, s:I, s:o}",
                        "object", "rlm.context",
                        "session", (char *) hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                        "name", result->name.data
                                ? json_stringn((char *) result->name.data,
                                               result->name.len)
                                : json_null(),
                        "bytes", (json_int_t) ev->cell.blob_len,
                        "kind", result->kind.data
                                ? json_stringn((char *) result->kind.data,
                                               result->kind.len)
                                : json_null());

    } else {
        out = json_pack("{s:s, s:s%, s:I}", "object", "rlm.cell",
                        "session", (char *) hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                        "cell", (json_int_t) ev->cell.number);

        res = ngx_http_rlm_result_json(result);

        if (out && (res == NULL || json_object_update(out, res) != 0)) {
            json_decref(out);
            out = NULL;
        }

        json_decref(res);
    }

    if (out == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(ev->cell.request, NGX_HTTP_OK, out);
    json_decref(out);

    return rc;
}


/* no Content-Type, or application/json, or application/...+json */

static ngx_int_t
ngx_http_rlm_json_content_type(ngx_http_request_t *r)
{
    u_char     *p, *end;
    ngx_str_t  *ct;

    if (r->headers_in.content_type == NULL) {
        return NGX_OK;
    }

    ct = &r->headers_in.content_type->value;

    end = ngx_strlchr(ct->data, ct->data + ct->len, ';');
    if (end == NULL) {
        end = ct->data + ct->len;
    }

    while (end > ct->data && end[-1] == ' ') {
        end--;
    }

    p = ct->data;

    if ((size_t) (end - p) == sizeof("application/json") - 1
        && ngx_strncasecmp(p, (u_char *) "application/json",
                           sizeof("application/json") - 1) == 0)
    {
        return NGX_OK;
    }

    if (end - p > 17
        && ngx_strncasecmp(p, (u_char *) "application/", 12) == 0
        && ngx_strncasecmp(end - 5, (u_char *) "+json", 5) == 0)
    {
        return NGX_OK;
    }

    return NGX_DECLINED;
}
