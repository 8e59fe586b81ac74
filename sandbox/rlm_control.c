/*
 * The control socket: non-blocking clients, frames parsed from a per-client
 * buffer, one reply per request in order.  A release is answered only once
 * the sandbox is reaped (so "ok" means nothing is left running); meanwhile
 * that client's later requests wait, other clients are served.  kill and
 * watch carry the limits the host enforces from outside the sandbox.
 */

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <jansson.h>

#include "rlm_manager.h"
#include "rlm_frame.h"
#include "rlm_watch.h"


#define RLM_MAX_CLIENTS      1024
#define RLM_CONTROL_JSON_MAX (1024 * 1024)

/*
 * A list reply stays within the frame limit above, the tighter of ours
 * and nginx's (16 MiB).  Room kept for everything around the entries:
 * {"ok":true,"sandboxes":[],"truncated":false,"live":N}; the echoed seq
 * is counted separately.
 */
#define RLM_LIST_SLACK       256
/* bytes of one entry besides its id, session and digits, with its comma */
#define RLM_LIST_ENTRY_FIXED 40


typedef struct {
    int             fd;
    uint32_t        gen;
    unsigned char  *in;
    size_t          in_len;
    size_t          in_cap;
    unsigned char  *out;
    size_t          out_len;
    size_t          out_off;
    size_t          out_cap;
    int             waiting;        /* a release reply is pending */
    int             closing;        /* close once the output is flushed */
    int             want_out;
} rlm_client_t;


static rlm_conf_t    *rlm_cconf;
static int            rlm_epfd;
static int            rlm_listen_fd = -1;
static rlm_client_t   rlm_clients[RLM_MAX_CLIENTS];
static uint32_t       rlm_client_gen;


static void rlm_client_process(unsigned idx);


int
rlm_control_init(rlm_conf_t *conf, int epfd)
{
    struct sockaddr_un  sa;
    struct epoll_event  ev;
    unsigned            i;
    int                 fd;

    rlm_cconf = conf;
    rlm_epfd = epfd;

    for (i = 0; i < RLM_MAX_CLIENTS; i++) {
        rlm_clients[i].fd = -1;
    }

    if (strlen(conf->control_path) >= sizeof(sa.sun_path)) {
        rlm_log("control socket path too long: %s", conf->control_path);
        return -1;
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rlm_log("socket: %s", strerror(errno));
        return -1;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, conf->control_path);
    unlink(conf->control_path);

    if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0
        || chmod(conf->control_path, 0660) != 0
        || (conf->sock_owner_set
            && chown(conf->control_path, conf->sock_uid, conf->sock_gid)
               != 0)
        || listen(fd, 128) != 0)
    {
        rlm_log("control socket %s: %s", conf->control_path,
                strerror(errno));
        close(fd);
        return -1;
    }

    ev.events = EPOLLIN;
    ev.data.u64 = rlm_ev_pack(RLM_EV_LISTEN, 0);

    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return -1;
    }

    rlm_listen_fd = fd;

    return 0;
}


static void
rlm_client_close(unsigned idx)
{
    rlm_client_t  *c;

    c = &rlm_clients[idx];

    if (c->fd < 0) {
        return;
    }

    epoll_ctl(rlm_epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}


void
rlm_control_close_all(void)
{
    unsigned  i;

    for (i = 0; i < RLM_MAX_CLIENTS; i++) {
        rlm_client_close(i);
    }

    if (rlm_listen_fd >= 0) {
        close(rlm_listen_fd);
        unlink(rlm_cconf->control_path);
        rlm_listen_fd = -1;
    }
}


void
rlm_control_accept(void)
{
    struct epoll_event  ev;
    unsigned            i;
    int                 fd;

    for ( ;; ) {
        fd = accept4(rlm_listen_fd, NULL, NULL,
                     SOCK_CLOEXEC | SOCK_NONBLOCK);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }

            if (errno == EMFILE || errno == ENFILE) {
                rlm_log("accept: %s", strerror(errno));
            }

            return;
        }

        for (i = 0; i < RLM_MAX_CLIENTS; i++) {
            if (rlm_clients[i].fd < 0) {
                break;
            }
        }

        if (i == RLM_MAX_CLIENTS) {
            rlm_log("too many control clients");
            close(fd);
            continue;
        }

        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.u64 = rlm_ev_pack(RLM_EV_CLIENT, i);

        if (epoll_ctl(rlm_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            continue;
        }

        memset(&rlm_clients[i], 0, sizeof(rlm_client_t));
        rlm_clients[i].fd = fd;
        rlm_clients[i].gen = ++rlm_client_gen;
    }
}


static void
rlm_client_update_events(unsigned idx)
{
    rlm_client_t        *c;
    struct epoll_event   ev;
    int                  want;

    c = &rlm_clients[idx];
    want = c->out_off < c->out_len;

    if (want == c->want_out) {
        return;
    }

    c->want_out = want;
    ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0);
    ev.data.u64 = rlm_ev_pack(RLM_EV_CLIENT, idx);
    epoll_ctl(rlm_epfd, EPOLL_CTL_MOD, c->fd, &ev);
}


/* 0 ok, -1 the client is gone */
static int
rlm_client_flush(unsigned idx)
{
    rlm_client_t  *c;
    ssize_t        n;

    c = &rlm_clients[idx];

    while (c->out_off < c->out_len) {
        n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                 MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n > 0) {
            c->out_off += n;
            continue;
        }

        if (n < 0 && errno == EINTR) {
            continue;
        }

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }

        rlm_client_close(idx);
        return -1;
    }

    if (c->out_off == c->out_len) {
        c->out_off = 0;
        c->out_len = 0;

        if (c->closing) {
            rlm_client_close(idx);
            return -1;
        }
    }

    rlm_client_update_events(idx);

    return 0;
}


static void rlm_client_reply_raw(unsigned idx, const char *s, size_t len);


static void
rlm_client_reply(unsigned idx, json_t *reply, json_t *seq)
{
    char  *s;

    if (seq != NULL) {
        json_object_set(reply, "seq", seq);
    }

    s = json_dumps(reply, JSON_COMPACT);
    json_decref(reply);

    if (s == NULL) {
        rlm_clients[idx].closing = 1;
        return;
    }

    rlm_client_reply_raw(idx, s, strlen(s));
    free(s);
}


static json_t *
rlm_error(const char *code, const char *fmt, const char *arg)
{
    char  msg[256];

    snprintf(msg, sizeof(msg), fmt, arg);

    return json_pack("{s:b,s:{s:s,s:s}}", "ok", 0, "error", "code", code,
                     "message", msg);
}


static int
rlm_valid_session(const char *s)
{
    size_t  i, n;

    n = strlen(s);

    if (n == 0 || n > RLM_SESSION_LEN) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z')
              || (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '-'
              || s[i] == '_'))
        {
            return 0;
        }
    }

    return 1;
}


static json_t *
rlm_acquire_json(rlm_sandbox_t *sb, int warm)
{
    char  path[512];

    rlm_sock_path(sb->id, path, sizeof(path));

    return json_pack("{s:b,s:s,s:s,s:i,s:b,s:{s:i,s:i,s:i,s:i,s:i,s:i}}",
                     "ok", 1, "sandbox", sb->id, "path", path,
                     "pid", (int) sb->pid, "warm", warm,
                     "limits", "cpu_s", sb->limits.cpu_s,
                     "wall_ms", sb->limits.wall_ms,
                     "memory_mb", sb->limits.memory_mb,
                     "pids", sb->limits.pids,
                     "output_bytes", sb->limits.output_bytes,
                     "tmpfs_mb", sb->limits.tmpfs_mb);
}


char *
rlm_control_acquire_reply(rlm_sandbox_t *sb, int warm)
{
    json_t  *j;
    char    *s;

    j = rlm_acquire_json(sb, warm);
    if (j == NULL) {
        return NULL;
    }

    s = json_dumps(j, JSON_COMPACT);
    json_decref(j);

    return s;
}


static void
rlm_client_reply_raw(unsigned idx, const char *s, size_t len)
{
    rlm_client_t   *c;
    unsigned char  *p;
    size_t          need;

    c = &rlm_clients[idx];
    need = c->out_len + RLM_FRAME_HDR_LEN + len;

    if (need > c->out_cap) {
        p = realloc(c->out, need * 2);
        if (p == NULL) {
            c->closing = 1;
            return;
        }

        c->out = p;
        c->out_cap = need * 2;
    }

    rlm_frame_put_hdr(c->out + c->out_len, (uint32_t) len, 0);
    memcpy(c->out + c->out_len + RLM_FRAME_HDR_LEN, s, len);
    c->out_len = need;
}


static json_t *
rlm_op_acquire(unsigned idx, json_t *req, json_t *seq)
{
    rlm_limits_t    limits;
    rlm_sandbox_t  *sb;
    const char     *session, *code;
    char            err[160];
    int             slot, warm;

    session = json_string_value(json_object_get(req, "session"));

    if (session == NULL || !rlm_valid_session(session)) {
        return rlm_error("bad_request", "%s", "acquire needs a session id "
                         "of 1..64 characters [A-Za-z0-9_-]");
    }

    if (rlm_limits_parse(json_object_get(req, "limits"), &limits, err,
                         sizeof(err)) != 0)
    {
        return rlm_error("bad_request", "%s", err);
    }

    code = "internal";
    slot = rlm_pool_acquire(&limits, session, &warm, &code);

    if (slot < 0) {
        return rlm_error(code, "%s", strcmp(code, "limit") == 0
                         ? "too many sandboxes or memory cap reached"
                         : "cannot create a sandbox");
    }

    sb = rlm_pool_find_slot(slot);

    if (warm && seq == NULL && sb->warm_reply != NULL) {
        rlm_client_reply_raw(idx, sb->warm_reply, sb->warm_reply_len);
        return NULL;
    }

    return rlm_acquire_json(sb, warm);
}


static json_t *
rlm_op_status(json_t *req)
{
    rlm_sandbox_t  *sb;
    const char     *id;

    id = json_string_value(json_object_get(req, "sandbox"));
    sb = id ? rlm_pool_find(id) : NULL;

    if (sb == NULL) {
        return rlm_error("unknown_sandbox", "no sandbox \"%.40s\"",
                         id ? id : "");
    }

    if (rlm_pool_running(sb)) {
        return json_pack("{s:b,s:b,s:i,s:s,s:b}", "ok", 1, "alive", 1,
                         "pid", (int) sb->pid, "session", sb->session,
                         "warm", sb->warm);
    }

    /* being released, or killed and not reaped yet */
    if (sb->state != RLM_SB_DEAD) {
        return json_pack("{s:b,s:b,s:s}", "ok", 1, "alive", 0,
                         "reason", sb->reason);
    }

    return json_pack("{s:b,s:b,s:s,s:i,s:i}", "ok", 1, "alive", 0,
                     "reason", sb->reason ? sb->reason : "exited",
                     "signal", sb->signal, "exit_code", sb->exit_code);
}


/*
 * A running cell is abandoned by its host: SIGUSR1 makes it raise
 * KeyboardInterrupt (the sandbox ignores it between cells).
 */
static json_t *
rlm_op_interrupt(json_t *req)
{
    rlm_sandbox_t  *sb;
    const char     *id;
    int             sent;

    id = json_string_value(json_object_get(req, "sandbox"));
    sb = id ? rlm_pool_find(id) : NULL;

    if (sb == NULL) {
        return rlm_error("unknown_sandbox", "no sandbox \"%.40s\"",
                         id ? id : "");
    }

    sent = (rlm_pool_running(sb) && sb->pid > 0
            && kill(sb->pid, SIGUSR1) == 0);

    return json_pack("{s:b,s:b}", "ok", 1, "sent", sent);
}


/* the sandbox a request names, or NULL with *err set to the reply */
static rlm_sandbox_t *
rlm_named_sandbox(json_t *req, json_t **err)
{
    rlm_sandbox_t  *sb;
    const char     *id;

    id = json_string_value(json_object_get(req, "sandbox"));
    sb = id ? rlm_pool_find(id) : NULL;

    if (sb == NULL) {
        *err = rlm_error("unknown_sandbox", "no sandbox \"%.40s\"",
                         id ? id : "");
    }

    return sb;
}


/*
 * The host's hard limits, enforced here where the sandbox's code cannot
 * reach: kill ends the sandbox and everything in it for a limit the host
 * saw passed (its wall deadline); watch hands the manager a CPU budget to
 * enforce itself (rlm_watch.c).
 */
static json_t *
rlm_op_kill(json_t *req)
{
    rlm_sandbox_t  *sb;
    const char     *reason;
    json_t         *err;

    reason = json_string_value(json_object_get(req, "reason"));

    /* the record keeps a static string */
    if (reason != NULL && strcmp(reason, "wall_limit") == 0) {
        reason = "wall_limit";

    } else if (reason != NULL && strcmp(reason, "cpu_limit") == 0) {
        reason = "cpu_limit";

    } else {
        return rlm_error("bad_request", "%s", "kill needs a \"reason\": "
                         "\"wall_limit\" or \"cpu_limit\"");
    }

    sb = rlm_named_sandbox(req, &err);
    if (sb == NULL) {
        return err;
    }

    return json_pack("{s:b,s:b}", "ok", 1, "killed",
                     rlm_pool_kill(sb, reason));
}


static json_t *
rlm_op_watch(json_t *req)
{
    rlm_sandbox_t  *sb;
    json_t         *v, *err;
    json_int_t      ms;

    v = json_object_get(req, "cpu_ms");
    ms = json_is_integer(v) ? json_integer_value(v) : 0;

    if (ms < 1 || ms > RLM_WATCH_MAX_MS) {
        return rlm_error("bad_request", "%s", "watch needs \"cpu_ms\": an "
                         "integer of 1..86400000");
    }

    sb = rlm_named_sandbox(req, &err);
    if (sb == NULL) {
        return err;
    }

    /* a dead sandbox needs no watch: it uses no CPU */
    if (rlm_pool_running(sb) && rlm_watch_start(sb, (uint64_t) ms) != 0) {
        return rlm_error("internal", "%s", "cannot read the sandbox's CPU "
                         "usage");
    }

    return json_pack("{s:b}", "ok", 1);
}


static json_t *
rlm_op_unwatch(json_t *req)
{
    rlm_sandbox_t  *sb;
    json_t         *err;

    sb = rlm_named_sandbox(req, &err);
    if (sb == NULL) {
        return err;
    }

    rlm_watch_stop(sb);

    return json_pack("{s:b}", "ok", 1);
}


static json_t *
rlm_op_stats(void)
{
    return json_pack("{s:b,s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,"
                     "s:I,s:i}",
                     "ok", 1, "live", rlm_stats.live, "idle", rlm_stats.idle,
                     "dead", rlm_stats.dead,
                     "pool_target", rlm_cconf->pool,
                     "created", (json_int_t) rlm_stats.created,
                     "released", (json_int_t) rlm_stats.released,
                     "oom", (json_int_t) rlm_stats.oom,
                     "crashed", (json_int_t) rlm_stats.crashed,
                     "warm_acquires", (json_int_t) rlm_stats.warm_acquires,
                     "cold_acquires", (json_int_t) rlm_stats.cold_acquires,
                     "spawn_failures", (json_int_t) rlm_stats.spawn_failures,
                     "memory_mb", (json_int_t) rlm_stats.memory_mb,
                     "max_sandboxes", rlm_cconf->max_sandboxes);
}


static size_t
rlm_decimal_len(uint64_t n)
{
    size_t  len;

    for (len = 1; n >= 10; n /= 10) {
        len++;
    }

    return len;
}


/*
 * Every live sandbox: id, session label and ms since its acquire.  Each
 * entry's encoded size is counted as it is added; past the frame limit
 * the list stops with "truncated":true, and the next list starts at the
 * sandbox this one left out, so that successive lists cover every live
 * sandbox even when one reply cannot.
 */
static json_t *
rlm_op_list(json_t *seq)
{
    static unsigned  resume;

    rlm_sandbox_t  *sb;
    json_t         *list, *entry, *reply;
    uint64_t        now, age_ms;
    unsigned        n, k, i;
    size_t          budget, used, len;
    char           *s;
    int             truncated;

    budget = RLM_CONTROL_JSON_MAX - RLM_LIST_SLACK;

    if (seq != NULL) {
        s = json_dumps(seq, JSON_COMPACT | JSON_ENCODE_ANY);
        len = s ? strlen(s) : budget;
        free(s);
        budget = len < budget ? budget - len : 0;
    }

    list = json_array();
    if (list == NULL) {
        return rlm_error("internal", "%s", "out of memory");
    }

    now = rlm_now_us();
    n = rlm_pool_nslots();
    used = 0;
    truncated = 0;

    if (resume >= n) {
        resume = 0;
    }

    for (k = 0; k < n; k++) {
        i = (resume + k) % n;
        sb = rlm_pool_find_slot((int) i);

        if (!rlm_pool_running(sb)) {
            continue;
        }

        age_ms = now > sb->live_us ? (now - sb->live_us) / 1000 : 0;
        len = RLM_LIST_ENTRY_FIXED + strlen(sb->id) + strlen(sb->session)
              + rlm_decimal_len(age_ms);

        if (used + len > budget) {
            truncated = 1;
            resume = i;
            break;
        }

        entry = json_pack("{s:s,s:s,s:I}", "sandbox", sb->id,
                          "session", sb->session,
                          "live_ms", (json_int_t) age_ms);

        if (entry == NULL || json_array_append_new(list, entry) != 0) {
            json_decref(list);
            return rlm_error("internal", "%s", "out of memory");
        }

        used += len;
    }

    if (!truncated) {
        resume = 0;
    }

    reply = json_pack("{s:b,s:o,s:b,s:i}", "ok", 1, "sandboxes", list,
                      "truncated", truncated, "live", (int) rlm_stats.live);

    /* NULL would mean "no reply now" to the caller */
    return reply ? reply : rlm_error("internal", "%s", "out of memory");
}


/*
 * Returns the reply, or NULL when there is nothing to queue now: a release
 * answers once reaped, a warm acquire queued its prepared reply itself.
 */
static json_t *
rlm_handle(unsigned idx, json_t *req, json_t *seq)
{
    rlm_sandbox_t  *sb;
    const char     *op, *id;
    json_t         *v;
    int             rc;

    op = json_string_value(json_object_get(req, "op"));

    if (op == NULL) {
        return rlm_error("bad_request", "%s", "request without \"op\"");
    }

    if (strcmp(op, "ping") == 0) {
        return json_pack("{s:b}", "ok", 1);
    }

    if (strcmp(op, "hello") == 0) {
        v = json_object_get(req, "version");

        if (!json_is_integer(v)
            || json_integer_value(v) != RLM_PROTOCOL_VERSION)
        {
            return rlm_error("version", "%s", "this manager speaks "
                             "protocol version 1");
        }

        return json_pack("{s:b,s:i,s:i,s:I}", "ok", 1, "version",
                         RLM_PROTOCOL_VERSION, "pid", (int) getpid(),
                         "max_blob", (json_int_t) rlm_cconf->max_blob);
    }

    if (strcmp(op, "acquire") == 0) {
        return rlm_op_acquire(idx, req, seq);
    }

    if (strcmp(op, "status") == 0) {
        return rlm_op_status(req);
    }

    if (strcmp(op, "stats") == 0) {
        return rlm_op_stats();
    }

    if (strcmp(op, "interrupt") == 0) {
        return rlm_op_interrupt(req);
    }

    if (strcmp(op, "list") == 0) {
        return rlm_op_list(seq);
    }

    if (strcmp(op, "kill") == 0) {
        return rlm_op_kill(req);
    }

    if (strcmp(op, "watch") == 0) {
        return rlm_op_watch(req);
    }

    if (strcmp(op, "unwatch") == 0) {
        return rlm_op_unwatch(req);
    }

    if (strcmp(op, "release") == 0) {
        id = json_string_value(json_object_get(req, "sandbox"));
        sb = id ? rlm_pool_find(id) : NULL;

        if (sb == NULL) {
            return rlm_error("unknown_sandbox", "no sandbox \"%.40s\"",
                             id ? id : "");
        }

        rc = rlm_pool_release(sb);

        if (rc == 1) {
            sb->waiter = (int) idx;
            sb->waiter_gen = rlm_clients[idx].gen;
            sb->waiter_seq = seq ? json_incref(seq) : NULL;
            rlm_clients[idx].waiting = 1;
            return NULL;
        }

        return json_pack("{s:b}", "ok", 1);
    }

    return rlm_error("bad_request", "unknown op \"%.40s\"", op);
}


void
rlm_control_release_done(rlm_sandbox_t *sb)
{
    rlm_client_t  *c;
    unsigned       idx;

    if (sb->waiter < 0) {
        return;
    }

    idx = (unsigned) sb->waiter;
    c = &rlm_clients[idx];
    sb->waiter = -1;

    if (c->fd < 0 || c->gen != sb->waiter_gen) {
        return;
    }

    c->waiting = 0;
    rlm_client_reply(idx, json_pack("{s:b}", "ok", 1), sb->waiter_seq);

    if (rlm_client_flush(idx) == 0) {
        rlm_client_process(idx);
    }
}


/* parse and answer every complete frame in the input buffer */
static void
rlm_client_process(unsigned idx)
{
    rlm_client_t   *c;
    json_t         *req, *reply, *seq;
    json_error_t    jerr;
    uint32_t        jl, bl;
    size_t          used;

    c = &rlm_clients[idx];
    used = 0;

    while (!c->waiting && !c->closing
           && c->in_len - used >= RLM_FRAME_HDR_LEN)
    {
        rlm_frame_get_hdr(c->in + used, &jl, &bl);

        if (jl == 0 || jl > RLM_CONTROL_JSON_MAX || bl != 0) {
            rlm_client_reply(idx, rlm_error("bad_request", "%s",
                             "frame lengths out of range"), NULL);
            c->closing = 1;
            break;
        }

        if (c->in_len - used < RLM_FRAME_HDR_LEN + jl) {
            break;
        }

        req = json_loadb((char *) c->in + used + RLM_FRAME_HDR_LEN, jl,
                         JSON_REJECT_DUPLICATES, &jerr);
        used += RLM_FRAME_HDR_LEN + jl;

        if (req == NULL || !json_is_object(req)) {
            rlm_client_reply(idx, rlm_error("bad_request", "%s",
                             "a request must be one JSON object"), NULL);
            json_decref(req);
            c->closing = 1;
            break;
        }

        seq = json_object_get(req, "seq");
        reply = rlm_handle(idx, req, seq);

        if (reply != NULL) {
            rlm_client_reply(idx, reply, seq);
        }

        json_decref(req);
    }

    if (used > 0) {
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
    }

    rlm_client_flush(idx);
}


void
rlm_control_event(unsigned idx, uint32_t events)
{
    rlm_client_t   *c;
    unsigned char  *p;
    ssize_t         n;
    size_t          cap;
    uint32_t        gen;

    if (idx >= RLM_MAX_CLIENTS || rlm_clients[idx].fd < 0) {
        return;
    }

    c = &rlm_clients[idx];

    if (events & EPOLLOUT) {
        if (rlm_client_flush(idx) != 0) {
            return;
        }
    }

    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR))) {
        return;
    }

    for ( ;; ) {
        if (c->in_cap - c->in_len < 4096) {
            cap = c->in_cap ? c->in_cap * 2 : 8192;

            if (cap > RLM_CONTROL_JSON_MAX * 2 + 64) {
                /* a client that floods without reading its replies */
                rlm_client_close(idx);
                return;
            }

            p = realloc(c->in, cap);
            if (p == NULL) {
                rlm_client_close(idx);
                return;
            }

            c->in = p;
            c->in_cap = cap;
        }

        n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len,
                 MSG_DONTWAIT);

        if (n > 0) {
            c->in_len += n;

            if (!c->waiting) {
                gen = c->gen;
                rlm_client_process(idx);

                if (c->fd < 0 || c->gen != gen) {
                    return;
                }
            }

            continue;
        }

        if (n < 0 && errno == EINTR) {
            continue;
        }

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }

        /* EOF or error: answer nothing more */
        rlm_client_close(idx);
        return;
    }
}
