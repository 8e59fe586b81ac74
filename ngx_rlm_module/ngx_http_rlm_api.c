
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The sessions API (rlm_sessions_api): routing on the URI tail after its
 * last "/sessions" segment, and the session routes themselves: create
 * (acquiring a sandbox from the manager), list, show, delete.  Cells and
 * contexts are in ngx_http_rlm_eval.c.
 */


#include "ngx_http_rlm_module.h"


typedef enum {
    NGX_HTTP_RLM_ROUTE_COLLECTION = 0,
    NGX_HTTP_RLM_ROUTE_SESSION,
    NGX_HTTP_RLM_ROUTE_EVAL,
    NGX_HTTP_RLM_ROUTE_CONTEXT
} ngx_http_rlm_route_e;


static ngx_int_t ngx_http_rlm_api_route(ngx_http_request_t *r,
    ngx_http_rlm_route_e *route, ngx_str_t *id);
static ngx_int_t ngx_http_rlm_api_collection(ngx_http_request_t *r);
static void ngx_http_rlm_api_create_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_rlm_api_create(ngx_http_request_t *r);
static void ngx_http_rlm_api_opened(ngx_http_rlm_open_t *op);
static ngx_int_t ngx_http_rlm_api_list(ngx_http_request_t *r);
static ngx_int_t ngx_http_rlm_api_show(ngx_http_request_t *r,
    ngx_http_rlm_session_t *s);
static ngx_int_t ngx_http_rlm_api_delete(ngx_http_request_t *r,
    ngx_http_rlm_session_t *s);
static ngx_int_t ngx_http_rlm_api_not_allowed(ngx_http_request_t *r,
    const char *allow);


ngx_int_t
ngx_http_rlm_sessions_handler(ngx_http_request_t *r)
{
    ngx_int_t                rc;
    ngx_str_t                id;
    ngx_http_rlm_route_e     route;
    ngx_http_rlm_zone_t     *z;
    ngx_http_rlm_session_t  *s;

    if (ngx_http_rlm_api_route(r, &route, &id) != NGX_OK) {
        return ngx_http_rlm_refuse(r, NGX_HTTP_NOT_FOUND,
                                   "invalid_request_error", "not_found",
                                   NULL, "no such route in the sessions "
                                   "API");
    }

    if (route == NGX_HTTP_RLM_ROUTE_COLLECTION) {
        return ngx_http_rlm_api_collection(r);
    }

    /* check the method before the id: 405 wins over 400 and 404 */

    switch (route) {

    case NGX_HTTP_RLM_ROUTE_SESSION:
        if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_DELETE))) {
            return ngx_http_rlm_api_not_allowed(r, "GET, HEAD, DELETE");
        }
        break;

    case NGX_HTTP_RLM_ROUTE_EVAL:
        if (r->method != NGX_HTTP_POST) {
            return ngx_http_rlm_api_not_allowed(r, "POST");
        }
        break;

    default: /* NGX_HTTP_RLM_ROUTE_CONTEXT */
        if (!(r->method & (NGX_HTTP_PUT|NGX_HTTP_POST))) {
            return ngx_http_rlm_api_not_allowed(r, "PUT, POST");
        }
        break;
    }

    s = ngx_http_rlm_api_session(r, &id, &rc);
    if (s == NULL) {
        return rc;
    }

    z = ngx_http_rlm_zone();

    switch (route) {

    case NGX_HTTP_RLM_ROUTE_SESSION:
        if (r->method == NGX_HTTP_DELETE) {
            rc = ngx_http_rlm_api_delete(r, s);

        } else {
            rc = ngx_http_rlm_api_show(r, s);
        }

        ngx_http_rlm_session_put(z, s);
        return rc;

    case NGX_HTTP_RLM_ROUTE_EVAL:
        return ngx_http_rlm_eval_handler(r, s, 0);

    default:
        return ngx_http_rlm_eval_handler(r, s, 1);
    }
}


/*
 * The route is what follows the last "/sessions" segment of the URI:
 * nothing, "/{id}", "/{id}/eval" or "/{id}/context".
 */

static ngx_int_t
ngx_http_rlm_api_route(ngx_http_request_t *r, ngx_http_rlm_route_e *route,
    ngx_str_t *id)
{
    u_char  *p, *end, *tail, *slash;
    size_t   len;

    static u_char  seg[] = "/sessions";

    p = r->uri.data;
    end = r->uri.data + r->uri.len;
    tail = NULL;

    while (p + sizeof(seg) - 1 <= end) {
        p = ngx_strlcasestrn(p, end, seg, sizeof(seg) - 2);
        if (p == NULL) {
            break;
        }

        if (p + sizeof(seg) - 1 == end || p[sizeof(seg) - 1] == '/') {
            tail = p + sizeof(seg) - 1;
        }

        p++;
    }

    if (tail == NULL) {
        return NGX_DECLINED;
    }

    if (tail == end || (tail + 1 == end && *tail == '/')) {
        *route = NGX_HTTP_RLM_ROUTE_COLLECTION;
        return NGX_OK;
    }

    /* tail starts with '/' */

    tail++;

    slash = ngx_strlchr(tail, end, '/');

    if (slash == NULL) {
        id->data = tail;
        id->len = end - tail;
        *route = NGX_HTTP_RLM_ROUTE_SESSION;
        return NGX_OK;
    }

    id->data = tail;
    id->len = slash - tail;

    p = slash + 1;
    len = end - p;

    if (len > 0 && p[len - 1] == '/') {
        len--;
    }

    if (len == 4 && ngx_strncmp(p, "eval", 4) == 0) {
        *route = NGX_HTTP_RLM_ROUTE_EVAL;
        return NGX_OK;
    }

    if (len == 7 && ngx_strncmp(p, "context", 7) == 0) {
        *route = NGX_HTTP_RLM_ROUTE_CONTEXT;
        return NGX_OK;
    }

    if (len == 0) {
        *route = NGX_HTTP_RLM_ROUTE_SESSION;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * The session a route names, as its owner sees it, held (give it back
 * with ngx_http_rlm_session_put()).  NULL when there is none to serve: a
 * malformed id is a 400, an unknown one or another owner's a 404; the
 * answer is sent here and *rc is what the handler returns.
 */

ngx_http_rlm_session_t *
ngx_http_rlm_api_session(ngx_http_request_t *r, ngx_str_t *id,
    ngx_int_t *rc)
{
    u_char                   idbuf[NGX_HTTP_RLM_ID_BYTES];
    ngx_str_t                owner;
    ngx_http_rlm_ctx_t      *ctx;
    ngx_http_rlm_session_t  *s;

    if (ngx_http_rlm_session_parse_id(id->data, id->len, idbuf) != NGX_OK) {
        *rc = ngx_http_rlm_refuse(r, NGX_HTTP_BAD_REQUEST,
                                  "invalid_request_error",
                                  "invalid_session_id", NULL,
                                  "a session id is 32 lowercase hex "
                                  "characters");
        return NULL;
    }

    *rc = NGX_HTTP_INTERNAL_SERVER_ERROR;

    ctx = ngx_http_rlm_get_ctx(r);
    if (ctx == NULL) {
        return NULL;
    }

    ngx_memcpy(ctx->session_id, id->data, NGX_HTTP_RLM_ID_HEX);
    ctx->has_session = 1;

    if (ngx_http_rlm_api_owner(r, &owner) != NGX_OK) {
        return NULL;
    }

    s = ngx_http_rlm_session_get(ngx_http_rlm_zone(), idbuf, &owner);

    if (s == NULL) {
        *rc = ngx_http_rlm_refuse(r, NGX_HTTP_NOT_FOUND,
                                  "invalid_request_error",
                                  "session_not_found", "id",
                                  "no such session");
        return NULL;
    }

    *rc = NGX_OK;

    return s;
}


ngx_int_t
ngx_http_rlm_api_owner(ngx_http_request_t *r, ngx_str_t *owner)
{
    ngx_http_rlm_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_rlm_module);

    ngx_str_null(owner);

    if (rlcf->owner == NULL) {
        return NGX_OK;
    }

    if (ngx_http_complex_value(r, rlcf->owner, owner) != NGX_OK) {
        return NGX_ERROR;
    }

    if (owner->len > NGX_HTTP_RLM_OWNER_LEN) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "rlm: session owner is longer than %d bytes",
                      NGX_HTTP_RLM_OWNER_LEN);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_rlm_api_collection(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        return ngx_http_rlm_api_list(r);
    }

    if (r->method != NGX_HTTP_POST) {
        return ngx_http_rlm_api_not_allowed(r, "GET, HEAD, POST");
    }

    if (r == r->main && r->headers_in.content_type
        && r->headers_in.content_length_n != 0)
    {
        /* same rule as eval: a body, if any, is JSON */

        u_char     *p;
        ngx_str_t  *ct;

        ct = &r->headers_in.content_type->value;
        p = ngx_strlchr(ct->data, ct->data + ct->len, ';');

        if (ngx_strlcasestrn(ct->data, p ? p : ct->data + ct->len,
                             (u_char *) "json", 3) == NULL)
        {
            return ngx_http_rlm_refuse(r, NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                       "invalid_request_error",
                                       "unsupported_media_type", NULL,
                                       "the body must be JSON "
                                       "(Content-Type: application/json)");
        }
    }

    if (r->headers_in.content_length_n > 65536) {
        return ngx_http_rlm_refuse(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                   "invalid_request_error", "body_too_large",
                                   NULL, "the request body is too large");
    }

    r->request_body_in_single_buf = 1;

    if (ngx_http_rlm_body_cap(r, 65536) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_read_client_request_body(r, ngx_http_rlm_api_create_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_api_create_body(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    ngx_http_rlm_enter_handler();

    rc = ngx_http_rlm_api_create(r);

    if (rc != NGX_DONE) {
        ngx_http_finalize_request(r, rc);
    }

    ngx_http_rlm_leave_handler();
}


static ngx_int_t
ngx_http_rlm_api_create(ngx_http_request_t *r)
{
    u_char                id[NGX_HTTP_RLM_ID_BYTES];
    json_t               *body, *jid;
    size_t                len;
    ngx_int_t             rc;
    ngx_str_t             owner;
    ngx_buf_t            *b;
    ngx_uint_t            any_id;
    json_error_t          jerr;
    ngx_http_rlm_ctx_t   *ctx;
    ngx_http_rlm_open_t  *op;

    ctx = ngx_http_rlm_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    any_id = 0;
    jid = NULL;
    body = NULL;
    len = 0;
    b = NULL;

    if (r->request_body && r->request_body->bufs) {
        b = r->request_body->bufs->buf;

        if (r->request_body->bufs->next || b->in_file) {
            return ngx_http_rlm_send_error(r,
                       NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                       "invalid_request_error", "body_too_large",
                       "the request body is too large");
        }

        len = b->last - b->pos;
    }

    if (len) {
        body = json_loadb((char *) b->pos, len, JSON_REJECT_DUPLICATES,
                          &jerr);

        if (body == NULL || !json_is_object(body)) {
            json_decref(body);
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "rlm: client sent a bad session body");
            return ngx_http_rlm_send_error(r, NGX_HTTP_BAD_REQUEST,
                                           "invalid_request_error",
                                           "invalid_json",
                                           "the request body must be "
                                           "empty or a JSON object");
        }

        jid = json_object_get(body, "id");
    }

    if (jid && !json_is_null(jid)) {
        if (!json_is_string(jid)) {
            json_decref(body);
            return ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_type", "id",
                       "\"id\" must be a string");
        }

        if (ngx_http_rlm_session_parse_id((u_char *) json_string_value(jid),
                                          json_string_length(jid), id)
            != NGX_OK)
        {
            json_decref(body);
            return ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_session_id", "id",
                       "a session id is 32 lowercase hex characters");
        }

        /*
         * several nodes: an id names its owner, so this node makes only
         * sessions whose id starts with its own id (rlm.cluster forwards a
         * creation naming another node there before it gets here)
         */

        if (ngx_http_rlm_session_foreign(id)) {
            json_decref(body);
            return ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "invalid_session_id", "id",
                       "a session id made on this node starts with its "
                       "rlm_node_id in two hex digits");
        }

    } else if (ngx_http_rlm_session_random_id(id, r->connection->log)
               != NGX_OK)
    {
        json_decref(body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;

    } else {
        any_id = 1;
    }

    json_decref(body);

    if (ngx_http_rlm_api_owner(r, &owner) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    op = ngx_pcalloc(r->pool, sizeof(ngx_http_rlm_open_t));
    if (op == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    op->handler = ngx_http_rlm_api_opened;
    op->data = r;
    op->any_id = any_id;

    ngx_http_rlm_session_format_id(id, ctx->session_id);
    ctx->has_session = 1;

    rc = ngx_http_rlm_session_open(op, r->pool, id, &owner);

    if (rc != NGX_AGAIN) {
        return ngx_http_rlm_open_send_error(r, op);
    }

    return NGX_DONE;
}


static void
ngx_http_rlm_api_opened(ngx_http_rlm_open_t *op)
{
    u_char              *loc;
    json_t              *o;
    ngx_int_t            rc;
    ngx_http_request_t  *r;
    ngx_http_rlm_ctx_t  *ctx;

    r = op->data;

    if (op->session == NULL) {
        rc = ngx_http_rlm_open_send_error(r, op);
        goto done;
    }

    ctx = ngx_http_rlm_get_ctx(r);

    if (ctx) {
        /* a spare's id, when the open took one */
        ngx_memcpy(ctx->session_id, op->hex, NGX_HTTP_RLM_ID_HEX);
    }

    o = ngx_http_rlm_session_json(op->zone, op->session);

    /* the creator's reference ends here; the session lives on */

    ngx_http_rlm_session_put(op->zone, op->session);

    if (o == NULL || ctx == NULL) {
        json_decref(o);
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto done;
    }

    loc = ngx_pnalloc(r->pool, r->uri.len + 1 + NGX_HTTP_RLM_ID_HEX + 1);
    if (loc == NULL) {
        json_decref(o);
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto done;
    }

    if (r->uri.len && r->uri.data[r->uri.len - 1] == '/') {
        ngx_sprintf(loc, "%V%*s%Z", &r->uri, (size_t) NGX_HTTP_RLM_ID_HEX,
                    ctx->session_id);

    } else {
        ngx_sprintf(loc, "%V/%*s%Z", &r->uri, (size_t) NGX_HTTP_RLM_ID_HEX,
                    ctx->session_id);
    }

    if (ngx_http_rlm_set_header(r, "Location", (char *) loc) != NGX_OK) {
        json_decref(o);
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto done;
    }

    rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_CREATED, o);
    json_decref(o);

done:

    ngx_http_rlm_finalize(r, rc);
}


static ngx_int_t
ngx_http_rlm_api_list(ngx_http_request_t *r)
{
    json_t     *list, *o;
    ngx_int_t   rc;
    ngx_str_t   owner;

    if (ngx_http_rlm_api_owner(r, &owner) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    list = ngx_http_rlm_session_list(ngx_http_rlm_zone(), &owner);
    if (list == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    o = json_pack("{s:s, s:o}", "object", "list", "data", list);
    if (o == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, o);
    json_decref(o);

    return rc;
}


static ngx_int_t
ngx_http_rlm_api_show(ngx_http_request_t *r, ngx_http_rlm_session_t *s)
{
    json_t     *o;
    ngx_int_t   rc;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    o = ngx_http_rlm_session_json(ngx_http_rlm_zone(), s);
    if (o == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, o);
    json_decref(o);

    return rc;
}


static ngx_int_t
ngx_http_rlm_api_delete(ngx_http_request_t *r, ngx_http_rlm_session_t *s)
{
    u_char                sandbox[NGX_HTTP_RLM_SANDBOX_LEN + 1];
    u_char                hex[NGX_HTTP_RLM_ID_HEX];
    json_t               *o;
    ngx_int_t             rc;
    ngx_http_rlm_zone_t  *z;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    z = ngx_http_rlm_zone();

    if (ngx_http_rlm_session_delete(z, s, sandbox) != NGX_OK) {
        return ngx_http_rlm_send_error_param(r, NGX_HTTP_NOT_FOUND,
                                             "invalid_request_error",
                                             "session_not_found", "id",
                                             "no such session");
    }

    (void) ngx_atomic_fetch_add(&z->sh->stats.sessions_deleted, 1);

    /*
     * The sandbox is released in the background: the client need not wait
     * for the manager to reap it, and a running cell sees its channel
     * close and reports sandbox_lost.
     */

    ngx_http_rlm_control_release(ngx_cycle->log, sandbox);

    ngx_http_rlm_session_format_id(s->id, hex);

    o = json_pack("{s:s%, s:s, s:b}",
                  "id", (char *) hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                  "object", "rlm.session", "deleted", 1);
    if (o == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, o);
    json_decref(o);

    return rc;
}


static ngx_int_t
ngx_http_rlm_api_not_allowed(ngx_http_request_t *r, const char *allow)
{
    ngx_int_t  rc;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_rlm_set_header(r, "Allow", allow) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_ALLOWED,
                                   "invalid_request_error",
                                   "method_not_allowed",
                                   "this method is not allowed here");
}

