
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The session table in shared memory: a slab pool with an rbtree keyed
 * by the 128-bit session id, a queue in last-used order for expiry, and
 * per session a FIFO of the cells waiting for their turn.  Every worker
 * serves every session; the zone survives reloads like limit_req's.
 *
 * Lifetime: a session is referenced by every request working on it
 * (refs).  Deleting or expiring unlinks it at once; its memory goes when
 * the last reference is dropped.
 */


#include <sys/random.h>

#include "ngx_http_rlm_module.h"


/* idle sessions expired per janitor tick: 16 per batch, 256 at most */
#define NGX_HTTP_RLM_EXPIRE_BATCHES  16


static ngx_uint_t ngx_http_rlm_session_expire_batch(ngx_http_rlm_zone_t *z,
    time_t idle, ngx_log_t *log);
static void ngx_http_rlm_session_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static void ngx_http_rlm_session_unlink_locked(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s);
static ngx_uint_t ngx_http_rlm_session_owner_ok(ngx_http_rlm_session_t *s,
    ngx_str_t *owner);


ngx_int_t
ngx_http_rlm_session_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_rlm_zone_t  *ozone = data;

    size_t                len;
    ngx_http_rlm_zone_t  *z;

    z = shm_zone->data;

    if (ozone) {
        /* a reload: keep the sessions of the old cycle */
        z->sh = ozone->sh;
        z->shpool = ozone->shpool;
        return NGX_OK;
    }

    z->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        z->sh = z->shpool->data;
        return NGX_OK;
    }

    z->sh = ngx_slab_calloc(z->shpool, sizeof(ngx_http_rlm_shctx_t));
    if (z->sh == NULL) {
        return NGX_ERROR;
    }

    z->shpool->data = z->sh;

    ngx_rbtree_init(&z->sh->rbtree, &z->sh->sentinel,
                    ngx_http_rlm_session_rbtree_insert);
    ngx_queue_init(&z->sh->lru);
    ngx_queue_init(&z->sh->spares);

    len = sizeof(" in rlm_sessions_zone \"\"") + shm_zone->shm.name.len;

    z->shpool->log_ctx = ngx_slab_alloc(z->shpool, len);
    if (z->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(z->shpool->log_ctx, " in rlm_sessions_zone \"%V\"%Z",
                &shm_zone->shm.name);

    z->shpool->log_nomem = 0;

    return NGX_OK;
}


static void
ngx_http_rlm_session_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t       **p;
    ngx_http_rlm_session_t   *s, *t;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            s = (ngx_http_rlm_session_t *) node;
            t = (ngx_http_rlm_session_t *) temp;

            p = (ngx_memcmp(s->id, t->id, NGX_HTTP_RLM_ID_BYTES) < 0)
                ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}


/* ids: exactly 32 lowercase hex digits, nothing else is accepted */

ngx_int_t
ngx_http_rlm_session_parse_id(u_char *hex, size_t len, u_char *id)
{
    u_char      c, v;
    ngx_uint_t  i;

    if (len != NGX_HTTP_RLM_ID_HEX) {
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_HTTP_RLM_ID_HEX; i++) {
        c = hex[i];

        if (c >= '0' && c <= '9') {
            v = c - '0';

        } else if (c >= 'a' && c <= 'f') {
            v = c - 'a' + 10;

        } else {
            return NGX_ERROR;
        }

        if (i % 2 == 0) {
            id[i / 2] = (u_char) (v << 4);

        } else {
            id[i / 2] |= v;
        }
    }

    return NGX_OK;
}


void
ngx_http_rlm_session_format_id(u_char *id, u_char *hex)
{
    (void) ngx_hex_dump(hex, id, NGX_HTTP_RLM_ID_BYTES);
}


/*
 * rlm_node_id: the node whose ids these are, -1 for a single node.  Set
 * from the cycle's configuration in the master before the workers fork
 * (ngx_http_rlm_init_module()).
 */

static ngx_int_t  ngx_http_rlm_node = -1;


void
ngx_http_rlm_session_set_node(ngx_int_t node)
{
    ngx_http_rlm_node = node;
}


ngx_int_t
ngx_http_rlm_session_node(void)
{
    return ngx_http_rlm_node;
}


/* an id another node made (never with a single node) */

ngx_int_t
ngx_http_rlm_session_foreign(u_char *id)
{
    return ngx_http_rlm_node >= 0 && id[0] != (u_char) ngx_http_rlm_node;
}


/*
 * 16 random bytes; with rlm_node_id, the first is the node's id, so the
 * id's first two hex digits name the node that owns the session (ids of
 * sessions, spares, child loops and completions alike)
 */

ngx_int_t
ngx_http_rlm_session_random_id(u_char *id, ngx_log_t *log)
{
    ssize_t  n;

    /* the kernel's CSPRNG; never blocks once the pool is initialised */

    n = getrandom(id, NGX_HTTP_RLM_ID_BYTES, GRND_NONBLOCK);

    if (n != NGX_HTTP_RLM_ID_BYTES) {
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno, "getrandom() failed");
        return NGX_ERROR;
    }

    if (ngx_http_rlm_node >= 0) {
        id[0] = (u_char) ngx_http_rlm_node;
    }

    return NGX_OK;
}


static ngx_rbtree_key_t
ngx_http_rlm_session_key(u_char *id)
{
    ngx_rbtree_key_t  key;

    ngx_memcpy(&key, id, sizeof(ngx_rbtree_key_t));

    return key;
}


ngx_http_rlm_session_t *
ngx_http_rlm_session_lookup_locked(ngx_http_rlm_zone_t *z, u_char *id)
{
    ngx_int_t                rc;
    ngx_rbtree_key_t         key;
    ngx_rbtree_node_t       *node, *sentinel;
    ngx_http_rlm_session_t  *s;

    key = ngx_http_rlm_session_key(id);

    node = z->sh->rbtree.root;
    sentinel = z->sh->rbtree.sentinel;

    while (node != sentinel) {

        if (key < node->key) {
            node = node->left;
            continue;
        }

        if (key > node->key) {
            node = node->right;
            continue;
        }

        s = (ngx_http_rlm_session_t *) node;

        rc = ngx_memcmp(id, s->id, NGX_HTTP_RLM_ID_BYTES);

        if (rc == 0) {
            return s;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    return NULL;
}


/*
 * Takes a place in the table for a session being created (its sandbox is
 * acquired next).  NGX_OK, NGX_DECLINED: the id exists, NGX_BUSY: the
 * session limit is reached, NGX_ERROR: the zone is full.
 */

ngx_int_t
ngx_http_rlm_session_reserve(ngx_http_rlm_zone_t *z, u_char *id,
    ngx_str_t *owner, ngx_uint_t max, ngx_http_rlm_session_t **sp)
{
    ngx_http_rlm_session_t  *s;

    if (owner->len > NGX_HTTP_RLM_OWNER_LEN) {
        return NGX_ERROR;
    }

    ngx_shmtx_lock(&z->shpool->mutex);

    if (ngx_http_rlm_session_lookup_locked(z, id)) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_DECLINED;
    }

    if (z->sh->count >= max) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_BUSY;
    }

    s = ngx_slab_calloc_locked(z->shpool, sizeof(ngx_http_rlm_session_t));
    if (s == NULL) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_ERROR;
    }

    /* until the sandbox is there, busy_pid names the creating worker */

    s->state = NGX_HTTP_RLM_SESSION_CREATING;
    s->busy_pid = ngx_pid;
    ngx_queue_init(&s->waiters);

    ngx_http_rlm_session_link_locked(z, s, id, owner);

    ngx_shmtx_unlock(&z->shpool->mutex);

    *sp = s;

    return NGX_OK;
}


/*
 * Enters s into the table under id and owner (checked by the caller: the
 * id is free, the owner fits), referenced by its creator.
 */

void
ngx_http_rlm_session_link_locked(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, u_char *id, ngx_str_t *owner)
{
    if (id != s->id) {
        ngx_memcpy(s->id, id, NGX_HTTP_RLM_ID_BYTES);
    }

    s->node.key = ngx_http_rlm_session_key(id);
    s->refs = 1;
    s->created = ngx_time();
    s->last_used = s->created;
    s->owner_len = owner->len;

    /* no owner is an empty ngx_str_t, whose data may be NULL */
    if (owner->len) {
        ngx_memcpy(s->owner, owner->data, owner->len);
    }

    ngx_rbtree_insert(&z->sh->rbtree, &s->node);
    ngx_queue_insert_head(&z->sh->lru, &s->lru);
    z->sh->count++;
}


/*
 * Fills in the sandbox the manager acquired: {"sandbox","path","pid"}.
 * NGX_DECLINED, with nothing changed, when the reply names no sandbox.
 */

ngx_int_t
ngx_http_rlm_session_activate(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, json_t *reply)
{
    size_t       len;
    const char  *sandbox, *path;
    json_int_t   pid;

    sandbox = json_string_value(json_object_get(reply, "sandbox"));
    path = json_string_value(json_object_get(reply, "path"));
    pid = json_integer_value(json_object_get(reply, "pid"));

    if (sandbox == NULL || path == NULL) {
        return NGX_DECLINED;
    }

    ngx_shmtx_lock(&z->shpool->mutex);

    len = ngx_min(ngx_strlen(sandbox), NGX_HTTP_RLM_SANDBOX_LEN);
    ngx_memcpy(s->sandbox, sandbox, len);
    s->sandbox[len] = '\0';

    len = ngx_min(ngx_strlen(path), NGX_HTTP_RLM_PATH_LEN - 1);
    ngx_memcpy(s->path, path, len);
    s->path[len] = '\0';

    s->sandbox_pid = (ngx_pid_t) pid;
    s->generation = z->sh->super.starts;
    s->busy_pid = 0;

    if (!s->deleted) {
        s->state = NGX_HTTP_RLM_SESSION_ACTIVE;
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return NGX_OK;
}


/* creation failed: the place is given back */

void
ngx_http_rlm_session_abort(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s)
{
    ngx_shmtx_lock(&z->shpool->mutex);

    ngx_http_rlm_session_unlink_locked(z, s);

    if (--s->refs == 0) {
        ngx_http_rlm_session_free_locked(z, s);
    }

    ngx_shmtx_unlock(&z->shpool->mutex);
}


/*
 * Finds a session visible to this owner and takes a reference on it.
 * Sessions still being created are invisible.
 */

ngx_http_rlm_session_t *
ngx_http_rlm_session_get(ngx_http_rlm_zone_t *z, u_char *id,
    ngx_str_t *owner)
{
    ngx_http_rlm_session_t  *s;

    ngx_shmtx_lock(&z->shpool->mutex);

    s = ngx_http_rlm_session_lookup_locked(z, id);

    if (s == NULL
        || s->state == NGX_HTTP_RLM_SESSION_CREATING
        || !ngx_http_rlm_session_owner_ok(s, owner))
    {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NULL;
    }

    s->refs++;

    ngx_shmtx_unlock(&z->shpool->mutex);

    return s;
}


void
ngx_http_rlm_session_put(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s)
{
    ngx_shmtx_lock(&z->shpool->mutex);

    if (--s->refs == 0 && s->deleted) {
        ngx_http_rlm_session_free_locked(z, s);
    }

    ngx_shmtx_unlock(&z->shpool->mutex);
}


/*
 * Unlinks a session; its sandbox id is copied out for the release.
 * NGX_DECLINED if somebody else deleted it first.
 */

ngx_int_t
ngx_http_rlm_session_delete(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, u_char *sandbox)
{
    ngx_shmtx_lock(&z->shpool->mutex);

    if (s->deleted) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_DECLINED;
    }

    ngx_memcpy(sandbox, s->sandbox, NGX_HTTP_RLM_SANDBOX_LEN + 1);

    ngx_http_rlm_session_unlink_locked(z, s);
    ngx_cpystrn(s->reason, (u_char *) "session deleted",
                NGX_HTTP_RLM_REASON_LEN);

    ngx_shmtx_unlock(&z->shpool->mutex);

    return NGX_OK;
}


/*
 * The holder of a reference ends the session: unlinked (unless somebody
 * deleted it first), its sandbox released, the reference dropped.
 */

void
ngx_http_rlm_session_discard(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s)
{
    u_char  sandbox[NGX_HTTP_RLM_SANDBOX_LEN + 1];

    if (ngx_http_rlm_session_delete(z, s, sandbox) == NGX_OK) {
        (void) ngx_atomic_fetch_add(&z->sh->stats.sessions_deleted, 1);
        ngx_http_rlm_control_release(ngx_cycle->log, sandbox);
    }

    ngx_http_rlm_session_put(z, s);
}


ngx_uint_t
ngx_http_rlm_session_deleted(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s)
{
    ngx_uint_t  deleted;

    ngx_shmtx_lock(&z->shpool->mutex);
    deleted = s->deleted;
    ngx_shmtx_unlock(&z->shpool->mutex);

    return deleted;
}


/* 1 if this call marked it lost, 0 if it was already */

ngx_uint_t
ngx_http_rlm_session_lost(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s,
    const char *reason)
{
    ngx_uint_t  changed;

    changed = 0;

    ngx_shmtx_lock(&z->shpool->mutex);

    if (s->state != NGX_HTTP_RLM_SESSION_LOST) {
        s->state = NGX_HTTP_RLM_SESSION_LOST;
        ngx_cpystrn(s->reason, (u_char *) reason, NGX_HTTP_RLM_REASON_LEN);
        changed = 1;
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return changed;
}


/* 1 if the session's sandbox is gone; why, into reason (len > 0) */

ngx_uint_t
ngx_http_rlm_session_is_lost(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, u_char *reason, size_t len)
{
    ngx_uint_t  lost;

    ngx_shmtx_lock(&z->shpool->mutex);

    lost = (s->state == NGX_HTTP_RLM_SESSION_LOST);

    if (lost) {
        ngx_cpystrn(reason, s->reason, len);
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return lost;
}


static void
ngx_http_rlm_session_unlink_locked(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s)
{
    if (s->deleted) {
        return;
    }

    s->deleted = 1;
    ngx_rbtree_delete(&z->sh->rbtree, &s->node);
    ngx_queue_remove(&s->lru);
    z->sh->count--;
}


void
ngx_http_rlm_session_free_locked(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s)
{
    ngx_queue_t            *q;
    ngx_http_rlm_waiter_t  *w;

    /* waiters of dead workers may be left over */

    while (!ngx_queue_empty(&s->waiters)) {
        q = ngx_queue_head(&s->waiters);
        ngx_queue_remove(q);
        w = ngx_queue_data(q, ngx_http_rlm_waiter_t, queue);
        ngx_slab_free_locked(z->shpool, w);
    }

    ngx_slab_free_locked(z->shpool, s);
}


static ngx_uint_t
ngx_http_rlm_session_owner_ok(ngx_http_rlm_session_t *s, ngx_str_t *owner)
{
    return s->owner_len == owner->len
           && (owner->len == 0
               || ngx_memcmp(s->owner, owner->data, owner->len) == 0);
}


static json_t *
ngx_http_rlm_session_json_locked(ngx_http_rlm_session_t *s)
{
    u_char   hex[NGX_HTTP_RLM_ID_HEX];
    json_t  *o, *v;

    ngx_http_rlm_session_format_id(s->id, hex);

    o = json_pack("{s:s%, s:s, s:I, s:I, s:s, s:n, s:I, s:b, s:I,"
                  " s:{s:I}, s:{s:I, s:f, s:I, s:I}}",
                  "id", (char *) hex, (size_t) NGX_HTTP_RLM_ID_HEX,
                  "object", "rlm.session",
                  "created", (json_int_t) s->created,
                  "last_used", (json_int_t) s->last_used,
                  "status", s->state == NGX_HTTP_RLM_SESSION_LOST
                            ? "sandbox_lost" : "active",
                  "owner",
                  "cells", (json_int_t) s->cells,
                  "busy", (int) s->busy,
                  "queued", (json_int_t) s->nwaiting,
                  "sandbox", "pid", (json_int_t) s->sandbox_pid,
                  "usage", "cells", (json_int_t) s->cells,
                  "cell_ms", (double) s->cell_us / 1000.0,
                  "context_bytes", (json_int_t) s->context_bytes,
                  "errors", (json_int_t) s->errors);

    if (o == NULL) {
        return NULL;
    }

    v = json_object_get(o, "usage");

    json_object_set_new(v, "completions", json_integer(s->completions));
    json_object_set_new(v, "prompt_tokens", json_integer(s->prompt_tokens));
    json_object_set_new(v, "completion_tokens",
                        json_integer(s->completion_tokens));
    json_object_set_new(v, "total_tokens",
                        json_integer(s->prompt_tokens
                                     + s->completion_tokens));

    if (s->owner_len) {
        json_object_set_new(o, "owner",
                            json_stringn((char *) s->owner, s->owner_len));
    }

    if (s->state == NGX_HTTP_RLM_SESSION_LOST) {
        json_object_set_new(o, "reason", json_string((char *) s->reason));
    }

    return o;
}


json_t *
ngx_http_rlm_session_json(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s)
{
    json_t  *o;

    ngx_shmtx_lock(&z->shpool->mutex);
    o = ngx_http_rlm_session_json_locked(s);
    ngx_shmtx_unlock(&z->shpool->mutex);

    return o;
}


/* newest first: the lru queue holds the most recently used first */

json_t *
ngx_http_rlm_session_list(ngx_http_rlm_zone_t *z, ngx_str_t *owner)
{
    json_t                  *list, *o;
    ngx_queue_t             *q;
    ngx_http_rlm_session_t  *s;

    list = json_array();
    if (list == NULL) {
        return NULL;
    }

    ngx_shmtx_lock(&z->shpool->mutex);

    for (q = ngx_queue_head(&z->sh->lru);
         q != ngx_queue_sentinel(&z->sh->lru);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_rlm_session_t, lru);

        if (s->state == NGX_HTTP_RLM_SESSION_CREATING
            || !ngx_http_rlm_session_owner_ok(s, owner))
        {
            continue;
        }

        o = ngx_http_rlm_session_json_locked(s);

        if (o == NULL || json_array_append_new(list, o) != 0) {
            ngx_shmtx_unlock(&z->shpool->mutex);
            json_decref(list);
            return NULL;
        }
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return list;
}


/* live sessions of one owner (created or being created), children too */

ngx_uint_t
ngx_http_rlm_session_count_owner(ngx_http_rlm_zone_t *z, ngx_str_t *owner)
{
    ngx_uint_t               n;
    ngx_queue_t             *q;
    ngx_http_rlm_session_t  *s;

    n = 0;

    ngx_shmtx_lock(&z->shpool->mutex);

    for (q = ngx_queue_head(&z->sh->lru);
         q != ngx_queue_sentinel(&z->sh->lru);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_rlm_session_t, lru);

        if (!s->deleted && ngx_http_rlm_session_owner_ok(s, owner)) {
            n++;
        }
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    return n;
}


/*
 * Cells of one session run one at a time, in arrival order.  NGX_OK: the
 * caller runs now; NGX_AGAIN: *wp is its place in the queue, poll it;
 * NGX_BUSY: the queue is full; NGX_ERROR: no memory.
 */

/*
 * Whether only this worker stands before w: the running cell (if any)
 * and every waiter ahead are ours, so the cell that ends before w's turn
 * ends here and wakes w; no other worker's cell has to be polled for.
 * Called with the zone locked.
 */

static ngx_uint_t
ngx_http_rlm_session_turn_local(ngx_http_rlm_session_t *s,
    ngx_http_rlm_waiter_t *w)
{
    ngx_queue_t            *q;
    ngx_http_rlm_waiter_t  *o;

    if (s->busy && s->busy_pid != ngx_pid) {
        return 0;
    }

    for (q = ngx_queue_head(&s->waiters);
         q != ngx_queue_sentinel(&s->waiters) && q != &w->queue;
         q = ngx_queue_next(q))
    {
        o = ngx_queue_data(q, ngx_http_rlm_waiter_t, queue);

        if (o->pid != ngx_pid) {
            return 0;
        }
    }

    return 1;
}


ngx_int_t
ngx_http_rlm_session_enter(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s,
    ngx_uint_t max_waiting, ngx_http_rlm_waiter_t **wp, ngx_uint_t *local)
{
    ngx_http_rlm_waiter_t  *w;

    *wp = NULL;
    *local = 0;

    ngx_shmtx_lock(&z->shpool->mutex);

    s->last_used = ngx_time();

    if (!s->deleted) {
        ngx_queue_remove(&s->lru);
        ngx_queue_insert_head(&z->sh->lru, &s->lru);
    }

    if (s->busy && !ngx_http_rlm_pid_alive(s->busy_pid)) {
        /* the worker running the cell died */
        s->busy = 0;
    }

    if (!s->busy && ngx_queue_empty(&s->waiters)) {
        s->busy = 1;
        s->busy_pid = ngx_pid;
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_OK;
    }

    if (s->nwaiting >= max_waiting) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_BUSY;
    }

    w = ngx_slab_alloc_locked(z->shpool, sizeof(ngx_http_rlm_waiter_t));
    if (w == NULL) {
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_ERROR;
    }

    w->pid = ngx_pid;
    ngx_queue_insert_tail(&s->waiters, &w->queue);
    s->nwaiting++;

    *local = ngx_http_rlm_session_turn_local(s, w);

    ngx_shmtx_unlock(&z->shpool->mutex);

    *wp = w;

    return NGX_AGAIN;
}


/*
 * NGX_OK: w's turn has come (w is freed); NGX_AGAIN: not yet, and *local
 * tells whether a cell of this worker will wake w.
 */

ngx_int_t
ngx_http_rlm_session_poll(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s,
    ngx_http_rlm_waiter_t *w, ngx_uint_t *local)
{
    ngx_queue_t            *q;
    ngx_http_rlm_waiter_t  *head;

    ngx_shmtx_lock(&z->shpool->mutex);

    if (s->busy && !ngx_http_rlm_pid_alive(s->busy_pid)) {
        s->busy = 0;
    }

    /* waiters left by workers that died are skipped */

    for ( ;; ) {
        q = ngx_queue_head(&s->waiters);
        head = ngx_queue_data(q, ngx_http_rlm_waiter_t, queue);

        if (head == w || ngx_http_rlm_pid_alive(head->pid)) {
            break;
        }

        ngx_queue_remove(q);
        s->nwaiting--;
        ngx_slab_free_locked(z->shpool, head);
    }

    if (s->busy || head != w) {
        *local = ngx_http_rlm_session_turn_local(s, w);
        ngx_shmtx_unlock(&z->shpool->mutex);
        return NGX_AGAIN;
    }

    ngx_queue_remove(&w->queue);
    s->nwaiting--;
    ngx_slab_free_locked(z->shpool, w);

    s->busy = 1;
    s->busy_pid = ngx_pid;

    ngx_shmtx_unlock(&z->shpool->mutex);

    return NGX_OK;
}


/* a waiting request went away */

void
ngx_http_rlm_session_leave(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s,
    ngx_http_rlm_waiter_t *w)
{
    ngx_shmtx_lock(&z->shpool->mutex);

    ngx_queue_remove(&w->queue);
    s->nwaiting--;
    ngx_slab_free_locked(z->shpool, w);

    ngx_shmtx_unlock(&z->shpool->mutex);
}


/* the running cell ended: counters, and the next waiter may go */

uint64_t
ngx_http_rlm_session_done(ngx_http_rlm_zone_t *z, ngx_http_rlm_session_t *s,
    ngx_uint_t cell_us, ngx_uint_t error, size_t context_bytes)
{
    uint64_t  cells;

    ngx_shmtx_lock(&z->shpool->mutex);

    s->busy = 0;
    s->busy_pid = 0;
    s->last_used = ngx_time();

    if (context_bytes) {
        s->context_bytes += context_bytes;

    } else {
        s->cells++;
        s->cell_us += cell_us;
        s->errors += error;
    }

    cells = s->cells;

    ngx_shmtx_unlock(&z->shpool->mutex);

    return cells;
}


/* a consistent copy of what a cell needs to reach the sandbox */

void
ngx_http_rlm_session_copy_sandbox(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, ngx_str_t *path, u_char *sandbox,
    ngx_uint_t *generation, ngx_uint_t *state, u_char *reason)
{
    ngx_shmtx_lock(&z->shpool->mutex);

    path->len = ngx_strlen(s->path);
    ngx_memcpy(path->data, s->path, path->len + 1);
    ngx_memcpy(sandbox, s->sandbox, NGX_HTTP_RLM_SANDBOX_LEN + 1);
    ngx_memcpy(reason, s->reason, NGX_HTTP_RLM_REASON_LEN);
    *generation = s->generation;
    *state = s->deleted ? NGX_HTTP_RLM_SESSION_LOST : s->state;

    ngx_shmtx_unlock(&z->shpool->mutex);
}


/*
 * Expires sessions idle for longer than idle seconds, oldest first.
 * Sessions in use (a request holds them) are left alone.  Their
 * sandboxes are released after the lock is dropped.
 */

void
ngx_http_rlm_session_expire(ngx_http_rlm_zone_t *z, time_t idle,
    ngx_log_t *log)
{
    ngx_uint_t  batches;

    /*
     * In batches of 16 (the lock is not held while their sandboxes are
     * released), at most NGX_HTTP_RLM_EXPIRE_BATCHES per janitor tick.
     */

    for (batches = 0; batches < NGX_HTTP_RLM_EXPIRE_BATCHES; batches++) {
        if (ngx_http_rlm_session_expire_batch(z, idle, log) < 16) {
            break;
        }
    }
}


static ngx_uint_t
ngx_http_rlm_session_expire_batch(ngx_http_rlm_zone_t *z, time_t idle,
    ngx_log_t *log)
{
    time_t                   now;
    ngx_uint_t               i, n;
    ngx_queue_t             *q;
    ngx_http_rlm_session_t  *s;
    u_char                   sandboxes[16][NGX_HTTP_RLM_SANDBOX_LEN + 1];

    now = ngx_time();
    n = 0;

    ngx_shmtx_lock(&z->shpool->mutex);

    q = ngx_queue_last(&z->sh->lru);

    while (q != ngx_queue_sentinel(&z->sh->lru) && n < 16) {
        s = ngx_queue_data(q, ngx_http_rlm_session_t, lru);
        q = ngx_queue_prev(q);

        if (now - s->last_used <= idle) {
            break;
        }

        if (s->state == NGX_HTTP_RLM_SESSION_CREATING
            && !ngx_http_rlm_pid_alive(s->busy_pid))
        {
            /*
             * its worker died before the manager answered: the reference
             * was that worker's, the sandbox (if any) an orphan the sweep
             * releases
             */
            ngx_http_rlm_session_unlink_locked(z, s);
            ngx_http_rlm_session_free_locked(z, s);
            continue;
        }

        if (s->refs > 0 || s->busy) {
            continue;
        }

        ngx_memcpy(sandboxes[n++], s->sandbox, NGX_HTTP_RLM_SANDBOX_LEN + 1);

        ngx_http_rlm_session_unlink_locked(z, s);
        ngx_http_rlm_session_free_locked(z, s);

        (void) ngx_atomic_fetch_add(&z->sh->stats.sessions_expired, 1);
    }

    ngx_shmtx_unlock(&z->shpool->mutex);

    for (i = 0; i < n; i++) {
        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "rlm: session idle for more than %T s expired, "
                      "releasing sandbox \"%s\"", idle, sandboxes[i]);

        ngx_http_rlm_control_release(log, sandboxes[i]);
    }

    return n;
}


ngx_uint_t
ngx_http_rlm_pid_alive(ngx_pid_t pid)
{
    if (pid <= 0 || pid == ngx_pid) {
        return 1;
    }

    return kill(pid, 0) == 0 || ngx_errno != ESRCH;
}


/* a completion starts in the session: its number, from 0 */

uint64_t
ngx_http_rlm_session_begin_completion(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s)
{
    uint64_t  n;

    ngx_shmtx_lock(&z->shpool->mutex);
    n = s->completions++;
    s->last_used = ngx_time();
    ngx_shmtx_unlock(&z->shpool->mutex);

    return n;
}


void
ngx_http_rlm_session_add_tokens(ngx_http_rlm_zone_t *z,
    ngx_http_rlm_session_t *s, uint64_t prompt, uint64_t completion)
{
    ngx_shmtx_lock(&z->shpool->mutex);
    s->prompt_tokens += prompt;
    s->completion_tokens += completion;
    ngx_shmtx_unlock(&z->shpool->mutex);
}
