/*
 * rlm-sandboxctl: command-line client of rlm-sandboxd.
 *
 *   rlm-sandboxctl run [options] [FILE ...]   run cells in one session
 *   rlm-sandboxctl stats|ping|list --manager SOCK
 *   rlm-sandboxctl status --manager SOCK SANDBOX
 *
 * Without --manager, "run" starts a private manager (from $RLM_SANDBOXD or
 * next to this program) in a temporary runtime directory and stops it at
 * the end.  Every result frame is printed as one JSON line; host callbacks
 * are answered with a fixed text (--reply) or scripted replies (--replies).
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <jansson.h>

#include "rlm_frame.h"


typedef struct {
    const char   *manager;
    const char   *limits;
    const char   *reply;
    json_t       *replies;
    size_t        replies_next;
    const char   *context;
    const char   *context_json;
    const char   *context_name;
    const char   *state;
    const char   *get_var;
    const char   *session;
    const char   *tools;
    int           echo;
    int           show_calls;
    int           vars;
    int           keep;
    long          timeout_ms;
    long          output_bytes;
    const char   *daemon_args[32];
    int           ndaemon_args;
} rlm_ctl_opts_t;


extern char  **environ;

static char   rlm_tmpdir[PATH_MAX];
static pid_t  rlm_daemon_pid = -1;


/* dst = a + b + c, refusing to truncate */
static int
rlm_join(char *dst, size_t len, const char *a, const char *b, const char *c)
{
    size_t  la, lb, lc;

    la = strlen(a);
    lb = strlen(b);
    lc = strlen(c);

    if (la + lb + lc + 1 > len) {
        dst[0] = '\0';
        return -1;
    }

    memcpy(dst, a, la);
    memcpy(dst + la, b, lb);
    memcpy(dst + la + lb, c, lc + 1);

    return 0;
}


static void
rlm_die(const char *fmt, const char *arg)
{
    fprintf(stderr, "rlm-sandboxctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}


static int
rlm_connect(const char *path)
{
    struct sockaddr_un  sa;
    int                 fd, sndbuf;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);

    if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }

    /* context blobs: a large send buffer means fewer wake-ups per MiB */
    sndbuf = 4 * 1024 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));

    return fd;
}


/* send a JSON object, return the reply object (NULL on I/O error) */
static json_t *
rlm_request(int fd, json_t *req, const void *blob, size_t blob_len,
    char **raw)
{
    char          *s, *json, *rblob;
    uint32_t       jl, bl;
    json_t        *rep;
    json_error_t   jerr;
    int            rc;

    s = json_dumps(req, JSON_COMPACT);
    json_decref(req);

    if (s == NULL) {
        return NULL;
    }

    rc = rlm_frame_send(fd, s, strlen(s), blob, blob_len);
    free(s);

    if (rc != 0) {
        return NULL;
    }

    if (rlm_frame_recv(fd, &json, &jl, &rblob, &bl, 0) != 1) {
        return NULL;
    }

    free(rblob);
    rep = json_loadb(json, jl, 0, &jerr);

    if (raw != NULL) {
        *raw = json;

    } else {
        free(json);
    }

    return rep;
}


static char *
rlm_read_file(const char *path, size_t *len)
{
    FILE    *f;
    char    *buf, *p;
    size_t   cap, n;

    f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL) {
        rlm_die("cannot open %s", path);
    }

    cap = 65536;
    *len = 0;
    buf = malloc(cap + 1);

    while (buf != NULL) {
        n = fread(buf + *len, 1, cap - *len, f);
        *len += n;

        if (*len < cap) {
            break;
        }

        cap *= 2;
        p = realloc(buf, cap + 1);
        if (p == NULL) {
            free(buf);
            buf = NULL;
            break;
        }

        buf = p;
    }

    if (f != stdin) {
        fclose(f);
    }

    if (buf == NULL) {
        rlm_die("out of memory reading %s", path);
    }

    buf[*len] = '\0';
    return buf;
}


static void
rlm_random_hex(char *out, size_t nbytes)
{
    unsigned char  b[64];
    size_t         i;
    int            fd;

    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, nbytes) != (ssize_t) nbytes) {
        for (i = 0; i < nbytes; i++) {
            b[i] = (unsigned char) (rand() ^ getpid() ^ time(NULL));
        }
    }

    if (fd >= 0) {
        close(fd);
    }

    for (i = 0; i < nbytes; i++) {
        sprintf(out + 2 * i, "%02x", b[i]);
    }
}


static void
rlm_stop_daemon(void)
{
    char            path[PATH_MAX + 64];
    DIR            *d;
    struct dirent  *de;
    int             status;

    if (rlm_daemon_pid > 0) {
        kill(rlm_daemon_pid, SIGTERM);
        waitpid(rlm_daemon_pid, &status, 0);
        rlm_daemon_pid = -1;
    }

    if (rlm_tmpdir[0] == '\0') {
        return;
    }

    /* remove only what a manager leaves; never recurse into mounts */

    rlm_join(path, sizeof(path), rlm_tmpdir, "/s", "");
    d = opendir(path);

    if (d != NULL) {
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] != '.'
                && rlm_join(path, sizeof(path), rlm_tmpdir, "/s/",
                            de->d_name) == 0)
            {
                unlink(path);
            }
        }

        closedir(d);
    }

    rlm_join(path, sizeof(path), rlm_tmpdir, "/s", "");
    rmdir(path);
    rlm_join(path, sizeof(path), rlm_tmpdir, "/control.sock", "");
    unlink(path);
    rlm_join(path, sizeof(path), rlm_tmpdir, "/manager.lock", "");
    unlink(path);
    rlm_join(path, sizeof(path), rlm_tmpdir, "/jail-root", "");
    rmdir(path);
    rmdir(rlm_tmpdir);
    rlm_tmpdir[0] = '\0';
}


static void
rlm_on_signal(int signo)
{
    (void) signo;
    rlm_stop_daemon();
    _exit(130);
}


static const char *
rlm_daemon_path(const char *argv0, char *buf, size_t len)
{
    const char  *env;
    char         self[PATH_MAX];
    ssize_t      n;
    char        *slash;

    env = getenv("RLM_SANDBOXD");
    if (env != NULL && env[0] != '\0') {
        return env;
    }

    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        snprintf(self, sizeof(self), "%s", argv0);

    } else {
        self[n] = '\0';
    }

    slash = strrchr(self, '/');
    if (slash == NULL) {
        return "rlm-sandboxd";
    }

    *slash = '\0';

    if (rlm_join(buf, len, self, "/rlm-sandboxd", "") != 0) {
        return "rlm-sandboxd";
    }

    return buf;
}


/* start a private manager; returns the control socket path */
static const char *
rlm_start_daemon(const char *argv0, rlm_ctl_opts_t *o, char *ctl,
    size_t ctllen)
{
    const char     *argv[64];
    char           *envp[4];
    char            dpath[PATH_MAX];
    const char     *daemon;
    struct pollfd   pfd;
    int             p[2], i, n;
    char            c;

    snprintf(rlm_tmpdir, sizeof(rlm_tmpdir), "/tmp/rlmctl.XXXXXX");

    if (mkdtemp(rlm_tmpdir) == NULL) {
        rlm_die("mkdtemp: %s", strerror(errno));
    }

    chmod(rlm_tmpdir, 0755);
    daemon = rlm_daemon_path(argv0, dpath, sizeof(dpath));

    if (pipe(p) != 0) {
        rlm_die("pipe: %s", strerror(errno));
    }

    n = 0;
    argv[n++] = daemon;
    argv[n++] = "--runtime-dir";
    argv[n++] = rlm_tmpdir;
    argv[n++] = "--ready-fd";
    argv[n++] = "3";

    for (i = 0; i < o->ndaemon_args && n < 62; i++) {
        argv[n++] = o->daemon_args[i];
    }

    argv[n] = NULL;

    /* the manager gets no environment but sanitizer settings */

    n = 0;

    for (i = 0; environ[i] != NULL && n < 3; i++) {
        if (strncmp(environ[i], "ASAN_OPTIONS=", 13) == 0
            || strncmp(environ[i], "UBSAN_OPTIONS=", 14) == 0
            || strncmp(environ[i], "LSAN_OPTIONS=", 13) == 0)
        {
            envp[n++] = environ[i];
        }
    }

    envp[n] = NULL;

    rlm_daemon_pid = fork();

    if (rlm_daemon_pid < 0) {
        rlm_die("fork: %s", strerror(errno));
    }

    if (rlm_daemon_pid == 0) {
        close(p[0]);

        if (p[1] != 3) {
            dup2(p[1], 3);
            close(p[1]);
        }

        execve(daemon, (char **) argv, envp);
        fprintf(stderr, "rlm-sandboxctl: exec %s: %s\n", daemon,
                strerror(errno));
        _exit(127);
    }

    close(p[1]);
    signal(SIGINT, rlm_on_signal);
    signal(SIGTERM, rlm_on_signal);

    pfd.fd = p[0];
    pfd.events = POLLIN;

    if (poll(&pfd, 1, 60000) != 1 || read(p[0], &c, 1) != 1) {
        close(p[0]);
        rlm_stop_daemon();
        rlm_die("%s did not start", daemon);
    }

    close(p[0]);
    rlm_join(ctl, ctllen, rlm_tmpdir, "/control.sock", "");

    return ctl;
}


static json_t *
rlm_reply_for(rlm_ctl_opts_t *o, json_t *call)
{
    json_t      *rep, *args, *prompts, *list, *p;
    const char  *fn, *prompt;
    char        *text, *at;
    size_t       i, need;

    if (o->replies != NULL && o->replies_next < json_array_size(o->replies)) {
        rep = json_deep_copy(json_array_get(o->replies, o->replies_next++));
        json_object_set_new(rep, "op", json_string("reply"));
        json_object_set(rep, "id", json_object_get(call, "id"));
        return rep;
    }

    fn = json_string_value(json_object_get(call, "fn"));
    args = json_object_get(call, "args");

    /* --reply may contain {prompt}: replaced by the call's prompt */

    if (fn != NULL && strstr(fn, "batched") != NULL) {
        prompts = json_object_get(args, "prompts");
        list = json_array();

        json_array_foreach(prompts, i, p) {
            prompt = json_is_string(p) ? json_string_value(p) : "";
            at = strstr(o->reply, "{prompt}");

            if (at == NULL) {
                json_array_append_new(list, json_string(o->reply));
                continue;
            }

            need = strlen(o->reply) + strlen(prompt) + 1;
            text = malloc(need);
            snprintf(text, need, "%.*s%s%s", (int) (at - o->reply), o->reply,
                     prompt, at + 8);
            json_array_append_new(list, json_string(text));
            free(text);
        }

        return json_pack("{s:s,s:O,s:b,s:o}", "op", "reply", "id",
                         json_object_get(call, "id"), "ok", 1, "result",
                         list);
    }

    prompt = json_string_value(json_object_get(args, "prompt"));
    if (prompt == NULL) {
        prompt = json_string_value(json_object_get(args, "name"));
    }

    if (prompt == NULL) {
        prompt = "";
    }

    at = strstr(o->reply, "{prompt}");

    if (at == NULL) {
        return json_pack("{s:s,s:O,s:b,s:s}", "op", "reply", "id",
                         json_object_get(call, "id"), "ok", 1, "result",
                         o->reply);
    }

    need = strlen(o->reply) + strlen(prompt) + 1;
    text = malloc(need);
    snprintf(text, need, "%.*s%s%s", (int) (at - o->reply), o->reply,
             prompt, at + 8);
    rep = json_pack("{s:s,s:O,s:b,s:s}", "op", "reply", "id",
                    json_object_get(call, "id"), "ok", 1, "result", text);
    free(text);

    return rep;
}


/*
 * Send one request on the channel, answer callbacks until the result and
 * print it.  Returns 0, or -1 when the channel closed.
 */
static int
rlm_channel_request(int fd, rlm_ctl_opts_t *o, json_t *req,
    const void *blob, size_t blob_len)
{
    char          *s, *json, *rblob;
    uint32_t       jl, bl;
    json_t        *msg, *rep;
    json_error_t   jerr;
    const char    *type;
    int            rc;

    s = json_dumps(req, JSON_COMPACT);
    json_decref(req);

    /* on a failed send, still read: the peer may have said why */
    rlm_frame_send(fd, s, strlen(s), blob, blob_len);
    free(s);

    for ( ;; ) {
        if (rlm_frame_recv(fd, &json, &jl, &rblob, &bl, 0) != 1) {
            return -1;
        }

        free(rblob);
        msg = json_loadb(json, jl, 0, &jerr);
        type = json_string_value(json_object_get(msg, "type"));

        if (type != NULL && strcmp(type, "call") == 0) {
            if (o->show_calls) {
                printf("%s\n", json);
                fflush(stdout);
            }

            free(json);
            rep = rlm_reply_for(o, msg);
            json_decref(msg);
            s = json_dumps(rep, JSON_COMPACT);
            json_decref(rep);
            rc = rlm_frame_send(fd, s, strlen(s), NULL, 0);
            free(s);

            if (rc != 0) {
                return -1;
            }

            continue;
        }

        printf("%s\n", json);
        fflush(stdout);
        free(json);
        json_decref(msg);

        return 0;
    }
}


/* the channel closed without a result: ask the manager why */
static void
rlm_report_lost(const char *ctl, const char *sandbox)
{
    json_t      *rep, *reason;
    const char  *r, *status;
    int          fd, i;

    rep = NULL;

    for (i = 0; i < 200; i++) {
        fd = rlm_connect(ctl);
        if (fd < 0) {
            break;
        }

        rep = rlm_request(fd, json_pack("{s:s,s:s}", "op", "status",
                                        "sandbox", sandbox), NULL, 0, NULL);
        close(fd);

        if (rep == NULL || json_is_false(json_object_get(rep, "alive"))) {
            break;
        }

        json_decref(rep);
        rep = NULL;
        usleep(10000);
    }

    reason = rep ? json_object_get(rep, "reason") : NULL;
    r = reason ? json_string_value(reason) : "unknown";

    if (strcmp(r, "oom") == 0) {
        status = "oom";

    } else if (strcmp(r, "wall_limit") == 0 || strcmp(r, "cpu_limit") == 0) {
        status = "timeout";

    } else if (strcmp(r, "crashed") == 0 || strcmp(r, "killed") == 0) {
        status = "crashed";

    } else {
        status = "sandbox_lost";
    }

    printf("{\"type\":\"result\",\"status\":\"%s\",\"reason\":\"%s\","
           "\"signal\":%d,\"exit_code\":%d}\n", status, r,
           rep ? (int) json_integer_value(json_object_get(rep, "signal")) : 0,
           rep ? (int) json_integer_value(json_object_get(rep, "exit_code"))
               : 0);
    fflush(stdout);
    json_decref(rep);
}


static int
rlm_is_blank(const char *s, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') {
            return 0;
        }
    }

    return 1;
}


static int
rlm_run_cell(int fd, rlm_ctl_opts_t *o, const char *code, size_t len)
{
    json_t  *req;

    req = json_pack("{s:s,s:s%,s:b}", "op", "exec", "code", code, len,
                    "echo", o->echo);

    if (o->timeout_ms > 0) {
        json_object_set_new(req, "timeout_ms", json_integer(o->timeout_ms));
    }

    if (o->output_bytes >= 0) {
        json_object_set_new(req, "output_bytes",
                            json_integer(o->output_bytes));
    }

    return rlm_channel_request(fd, o, req, NULL, 0);
}


/* cells of stdin are separated by lines that are exactly "#%%" */
static int
rlm_run_stdin(int fd, rlm_ctl_opts_t *o)
{
    char    *buf, *cell, *p, *line_end;
    size_t   len;

    buf = rlm_read_file("-", &len);
    cell = buf;
    p = buf;

    while (p < buf + len) {
        line_end = memchr(p, '\n', buf + len - p);
        if (line_end == NULL) {
            line_end = buf + len;
        }

        if (line_end - p == 3 && memcmp(p, "#%%", 3) == 0) {
            if (!rlm_is_blank(cell, p - cell)
                && rlm_run_cell(fd, o, cell, p - cell) != 0)
            {
                free(buf);
                return -1;
            }

            cell = line_end < buf + len ? line_end + 1 : line_end;
        }

        p = line_end + 1;
    }

    if (cell < buf + len && !rlm_is_blank(cell, buf + len - cell)
        && rlm_run_cell(fd, o, cell, buf + len - cell) != 0)
    {
        free(buf);
        return -1;
    }

    free(buf);
    return 0;
}


static int
rlm_cmd_run(const char *argv0, rlm_ctl_opts_t *o, int nfiles, char **files)
{
    char          ctlbuf[PATH_MAX], session[80];
    const char   *ctl, *path, *sandbox;
    json_t       *limits, *req, *rep, *st;
    json_error_t  jerr;
    char         *data, *sid;
    size_t        len;
    int           cfd, fd, i, rc;

    limits = NULL;

    if (o->limits != NULL) {
        limits = json_loads(o->limits, 0, &jerr);
        if (!json_is_object(limits)) {
            rlm_die("--limits is not a JSON object: %s", o->limits);
        }
    }

    ctl = o->manager ? o->manager
                     : rlm_start_daemon(argv0, o, ctlbuf, sizeof(ctlbuf));

    cfd = rlm_connect(ctl);
    if (cfd < 0) {
        rlm_stop_daemon();
        rlm_die("cannot connect to %s", ctl);
    }

    if (o->session != NULL) {
        snprintf(session, sizeof(session), "%s", o->session);

    } else {
        rlm_random_hex(session, 16);
    }

    req = json_pack("{s:s,s:s}", "op", "acquire", "session", session);
    if (limits != NULL) {
        json_object_set_new(req, "limits", limits);
    }

    rep = rlm_request(cfd, req, NULL, 0, NULL);

    if (rep == NULL || !json_is_true(json_object_get(rep, "ok"))) {
        sid = rep ? json_dumps(rep, JSON_COMPACT) : NULL;
        fprintf(stderr, "rlm-sandboxctl: acquire failed: %s\n",
                sid ? sid : "no reply");
        free(sid);
        json_decref(rep);
        close(cfd);
        rlm_stop_daemon();
        return 1;
    }

    path = json_string_value(json_object_get(rep, "path"));
    sandbox = json_string_value(json_object_get(rep, "sandbox"));

    fd = rlm_connect(path);
    if (fd < 0) {
        fprintf(stderr, "rlm-sandboxctl: connect %s: %s\n", path,
                strerror(errno));
        rlm_stop_daemon();
        return 1;
    }

    rc = 0;

    if (o->tools != NULL) {
        st = json_loads(o->tools, 0, &jerr);
        rc = rlm_channel_request(fd, o, json_pack("{s:s,s:o}", "op",
                                 "define_tools", "names",
                                 st ? st : json_array()), NULL, 0);
    }

    if (rc == 0 && (o->context != NULL || o->context_json != NULL)) {
        data = rlm_read_file(o->context ? o->context : o->context_json,
                             &len);
        req = json_pack("{s:s,s:s,s:s}", "op", "load_context", "name",
                        o->context_name, "format",
                        o->context ? "text" : "json");
        rc = rlm_channel_request(fd, o, req, data, len);
        free(data);
    }

    if (rc == 0 && o->state != NULL) {
        st = json_loads(o->state, 0, &jerr);
        if (!json_is_object(st)) {
            rlm_die("--state is not a JSON object: %s", o->state);
        }

        rc = rlm_channel_request(fd, o, json_pack("{s:s,s:o}", "op",
                                 "state_update", "state", st), NULL, 0);
    }

    if (rc == 0 && nfiles == 0) {
        rc = rlm_run_stdin(fd, o);
    }

    for (i = 0; rc == 0 && i < nfiles; i++) {
        data = rlm_read_file(files[i], &len);
        rc = rlm_run_cell(fd, o, data, len);
        free(data);
    }

    if (rc == 0 && o->vars) {
        rc = rlm_channel_request(fd, o, json_pack("{s:s}", "op", "vars"),
                                 NULL, 0);
    }

    if (rc == 0 && o->get_var != NULL) {
        rc = rlm_channel_request(fd, o, json_pack("{s:s,s:s}", "op",
                                 "get_var", "name", o->get_var), NULL, 0);
    }

    close(fd);

    if (rc != 0) {
        rlm_report_lost(ctl, sandbox);
    }

    if (!o->keep) {
        json_decref(rlm_request(cfd, json_pack("{s:s,s:s}", "op", "release",
                                               "sandbox", sandbox),
                                NULL, 0, NULL));

    } else {
        fprintf(stderr, "sandbox %s pid %d\n", sandbox,
                (int) json_integer_value(json_object_get(rep, "pid")));
    }

    json_decref(rep);
    close(cfd);
    rlm_stop_daemon();

    return rc == 0 ? 0 : 3;
}


static int
rlm_cmd_simple(rlm_ctl_opts_t *o, const char *op, const char *sandbox)
{
    json_t  *req, *rep;
    char    *raw;
    int      fd, ok;

    if (o->manager == NULL) {
        rlm_die("%s needs --manager SOCK", op);
    }

    fd = rlm_connect(o->manager);
    if (fd < 0) {
        rlm_die("cannot connect to %s", o->manager);
    }

    req = json_pack("{s:s}", "op", op);
    if (sandbox != NULL) {
        json_object_set_new(req, "sandbox", json_string(sandbox));
    }

    raw = NULL;
    rep = rlm_request(fd, req, NULL, 0, &raw);
    close(fd);

    if (rep == NULL) {
        rlm_die("no reply from %s", o->manager);
    }

    printf("%s\n", raw);
    free(raw);
    ok = json_is_true(json_object_get(rep, "ok"));
    json_decref(rep);

    return ok ? 0 : 1;
}


static void
rlm_ctl_usage(FILE *f)
{
    fprintf(f,
"usage: rlm-sandboxctl run [options] [FILE ...]\n"
"       rlm-sandboxctl stats|ping|list --manager SOCK\n"
"       rlm-sandboxctl status --manager SOCK SANDBOX\n"
"run options:\n"
"  --manager SOCK       use a running manager (else a private one)\n"
"  --daemon-arg ARG     extra argument for the private manager\n"
"  --limits JSON        acquire limits, e.g. '{\"wall_ms\":2000}'\n"
"  --session ID         session id (random)\n"
"  --reply TEXT         answer to every callback; {prompt} is replaced\n"
"  --replies JSON       array of scripted replies ({\"ok\":..,\"result\"})\n"
"                       used first, in order\n"
"  --tools JSON         names of host tools to define, e.g. '[\"search\"]'\n"
"  --context FILE       load FILE as text into `context` first\n"
"  --context-json FILE  load FILE as JSON into `context` first\n"
"  --context-name NAME  variable name for the context (context)\n"
"  --state JSON         send a state_update before the cells\n"
"  --echo               echo a bare last-line expression\n"
"  --timeout-ms N       wall time per cell\n"
"  --output-bytes N     output cap per cell\n"
"  --show-calls         print callback frames too\n"
"  --vars               print the vars listing after the cells\n"
"  --get-var NAME       print get_var NAME after the cells\n"
"  --keep               do not release the sandbox at the end\n"
"Cells: each FILE is one cell; with no FILE, stdin split on lines that\n"
"are exactly #%%%%.\n");
}


int
main(int argc, char **argv)
{
    static const struct option  opts[] = {
        { "manager", required_argument, NULL, 'm' },
        { "limits", required_argument, NULL, 'l' },
        { "reply", required_argument, NULL, 'r' },
        { "replies", required_argument, NULL, 'R' },
        { "context", required_argument, NULL, 'c' },
        { "context-json", required_argument, NULL, 'j' },
        { "context-name", required_argument, NULL, 'n' },
        { "state", required_argument, NULL, 's' },
        { "get-var", required_argument, NULL, 'g' },
        { "session", required_argument, NULL, 'S' },
        { "tools", required_argument, NULL, 'T' },
        { "daemon-arg", required_argument, NULL, 'd' },
        { "timeout-ms", required_argument, NULL, 't' },
        { "output-bytes", required_argument, NULL, 'o' },
        { "echo", no_argument, NULL, 'e' },
        { "show-calls", no_argument, NULL, 'C' },
        { "vars", no_argument, NULL, 'v' },
        { "keep", no_argument, NULL, 'k' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };

    rlm_ctl_opts_t   o;
    json_error_t     jerr;
    const char      *cmd;
    int              c;

    if (argc < 2) {
        rlm_ctl_usage(stderr);
        return 2;
    }

    cmd = argv[1];
    memset(&o, 0, sizeof(o));
    o.reply = "stub reply";
    o.context_name = "context";
    o.output_bytes = -1;

    optind = 2;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o.manager = optarg; break;
        case 'l': o.limits = optarg; break;
        case 'r': o.reply = optarg; break;
        case 'c': o.context = optarg; break;
        case 'j': o.context_json = optarg; break;
        case 'n': o.context_name = optarg; break;
        case 's': o.state = optarg; break;
        case 'g': o.get_var = optarg; break;
        case 'S': o.session = optarg; break;
        case 'T': o.tools = optarg; break;
        case 't': o.timeout_ms = atol(optarg); break;
        case 'o': o.output_bytes = atol(optarg); break;
        case 'e': o.echo = 1; break;
        case 'C': o.show_calls = 1; break;
        case 'v': o.vars = 1; break;
        case 'k': o.keep = 1; break;

        case 'R':
            o.replies = json_loads(optarg, 0, &jerr);
            if (!json_is_array(o.replies)) {
                rlm_die("--replies must be a JSON array: %s", optarg);
            }
            break;

        case 'd':
            if (o.ndaemon_args == 32) {
                rlm_die("%s", "too many --daemon-arg");
            }
            o.daemon_args[o.ndaemon_args++] = optarg;
            break;

        case 'h':
            rlm_ctl_usage(stdout);
            return 0;

        default:
            rlm_ctl_usage(stderr);
            return 2;
        }
    }

    if (strcmp(cmd, "run") == 0) {
        c = rlm_cmd_run(argv[0], &o, argc - optind, argv + optind);
        json_decref(o.replies);
        return c;
    }

    if (strcmp(cmd, "stats") == 0 || strcmp(cmd, "ping") == 0
        || strcmp(cmd, "list") == 0)
    {
        return rlm_cmd_simple(&o, cmd, NULL);
    }

    if (strcmp(cmd, "status") == 0 && optind < argc) {
        return rlm_cmd_simple(&o, cmd, argv[optind]);
    }

    rlm_ctl_usage(stderr);
    return 2;
}
