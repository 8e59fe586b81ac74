
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The `state` dict one completion tree shares: the blocks' changes merged
 * into the tree's copy, capped in size as a whole (rlm_state_max), and
 * the state_update frame a child's sandbox starts from, encoded once per
 * version of the dict and shared by every child that starts from it, so
 * a batch of children costs one copy, not one each.
 */


#include "ngx_http_rlm_loop.h"


/* an encoded state_update frame, shared; freed with its last user */
typedef struct {
    ngx_uint_t                  refs;
    ngx_uint_t                  version;
    size_t                      len;
    u_char                      data[1];
} ngx_http_rlm_state_text_t;


static ngx_http_rlm_state_text_t *ngx_http_rlm_state_encode(
    ngx_http_rlm_tree_t *tree, ngx_log_t *log);
static void ngx_http_rlm_state_unref(void *data);


/*
 * A block's state_delta (or the state an rlm_query call carries) into
 * the tree's copy of the shared dict.  The cap holds for the dict as it
 * would be after the change: a key set again counts once, so a block
 * whose change already came with its rlm_query call is not refused at
 * its end for the same bytes.  The change is made on a shallow copy
 * (the values are shared) that replaces the dict only if it fits.
 */

ngx_int_t
ngx_http_rlm_state_merge(ngx_http_rlm_loop_t *loop, json_t *delta)
{
    size_t                     i;
    json_t                    *v, *gone, *next;
    const char                *k;
    ngx_http_rlm_tree_t       *tree;
    ngx_http_rlm_main_conf_t  *rmcf;

    tree = loop->tree;

    if (!json_is_object(delta) || json_object_size(delta) == 0
        || tree->state == NULL)
    {
        return NGX_OK;
    }

    next = json_copy(tree->state);
    if (next == NULL) {
        return NGX_ERROR;
    }

    json_object_foreach(delta, k, v) {
        if (ngx_strcmp(k, "__deleted__") != 0
            && json_object_set(next, k, v) != 0)
        {
            json_decref(next);
            return NGX_ERROR;
        }
    }

    gone = json_object_get(delta, "__deleted__");

    json_array_foreach(gone, i, v) {
        if (json_is_string(v)) {
            json_object_del(next, json_string_value(v));
        }
    }

    /* what the tree shares is capped as a whole, not only per change */

    rmcf = ngx_http_get_module_main_conf(loop->request, ngx_http_rlm_module);

    if (json_dumpb(next, NULL, 0, JSON_COMPACT) > rmcf->state_max) {
        json_decref(next);
        return NGX_DECLINED;
    }

    json_decref(tree->state);
    tree->state = next;
    tree->state_version++;

    json_object_foreach(delta, k, v) {
        if (ngx_strcmp(k, "__deleted__") != 0) {
            json_object_del(tree->deleted, k);
        }
    }

    /* removals reach the other loops of the tree (rlm_query replies) */

    json_array_foreach(gone, i, v) {
        if (json_is_string(v)) {
            json_object_set_new(tree->deleted, json_string_value(v),
                                json_true());
        }
    }

    return NGX_OK;
}


/*
 * The child's first frame: {"op":"state_update","deleted":[],"state":...}
 * from the tree's shared text, sent from a buffer of the cell's own that
 * points into it.
 */

ngx_int_t
ngx_http_rlm_state_frame(ngx_http_rlm_loop_t *loop, ngx_http_rlm_cell_t *cell)
{
    ngx_buf_t                  *b;
    ngx_chain_t                *cl;
    ngx_http_rlm_tree_t        *tree;
    ngx_http_rlm_state_text_t  *st;

    tree = loop->tree;
    st = tree->state_text;

    if (st == NULL || st->version != tree->state_version) {
        ngx_http_rlm_state_release(tree);

        st = ngx_http_rlm_state_encode(tree, loop->log);
        if (st == NULL) {
            return NGX_ERROR;
        }

        tree->state_text = st;
    }

    b = ngx_calloc_buf(loop->pool);
    cl = ngx_alloc_chain_link(loop->pool);
    if (b == NULL || cl == NULL) {
        return NGX_ERROR;
    }

    b->pos = st->data;
    b->last = st->data + st->len;
    b->memory = 1;
    cl->buf = b;
    cl->next = NULL;

    st->refs++;

    cell->encoded = cl;
    cell->encoded_free = ngx_http_rlm_state_unref;
    cell->encoded_data = st;

    return NGX_OK;
}


void
ngx_http_rlm_state_release(ngx_http_rlm_tree_t *tree)
{
    if (tree->state_text) {
        ngx_http_rlm_state_unref(tree->state_text);
        tree->state_text = NULL;
    }
}


static ngx_http_rlm_state_text_t *
ngx_http_rlm_state_encode(ngx_http_rlm_tree_t *tree, ngx_log_t *log)
{
    size_t                      len, slen;
    u_char                     *p;
    uint32_t                    n;
    ngx_http_rlm_state_text_t  *st;

    static u_char  prefix[] = "{\"op\":\"state_update\",\"deleted\":[],"
                              "\"state\":";

    slen = json_dumpb(tree->state, NULL, 0, JSON_COMPACT);
    if (slen == 0) {
        return NULL;
    }

    len = sizeof(prefix) - 1 + slen + 1;

    if (len > NGX_HTTP_RLM_FRAME_JSON_MAX) {
        return NULL;
    }

    st = ngx_alloc(offsetof(ngx_http_rlm_state_text_t, data) + 8 + len, log);
    if (st == NULL) {
        return NULL;
    }

    st->refs = 1;
    st->version = tree->state_version;
    st->len = 8 + len;

    p = st->data;

    n = htonl((uint32_t) len);
    p = ngx_cpymem(p, &n, 4);
    n = 0;
    p = ngx_cpymem(p, &n, 4);
    p = ngx_cpymem(p, prefix, sizeof(prefix) - 1);

    if (json_dumpb(tree->state, (char *) p, slen, JSON_COMPACT) != slen) {
        ngx_free(st);
        return NULL;
    }

    p += slen;
    *p = '}';

    return st;
}


static void
ngx_http_rlm_state_unref(void *data)
{
    ngx_http_rlm_state_text_t  *st = data;

    if (--st->refs == 0) {
        ngx_free(st);
    }
}
