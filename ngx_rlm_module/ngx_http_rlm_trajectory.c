
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Trajectories.  The writer keeps one JSONL file per completion under
 * rlm_trajectory_dir, laid out as the reference RLM library's logger
 * writes them so that its visualizer reads ours: a "metadata" line, then
 * one "iteration" line per turn with the prompt sent to the root model,
 * its response, the code blocks with their results and the model calls
 * made from code.  Each line is a single write(2) on an O_APPEND file,
 * like an access log.
 *
 * The rlm_trajectories handler lists a session's trajectories and serves
 * one from its file, for the session's owner only.
 */


#include "ngx_http_rlm_trajectory.h"


#define NGX_HTTP_RLM_TRAJ_PREFIX      "chatcmpl-"
#define NGX_HTTP_RLM_TRAJ_SUFFIX      ".jsonl"

/* what the writer adds to the directory: "/<32 hex>/<id>.jsonl" */
#define NGX_HTTP_RLM_TRAJ_NAME_MAX                                           \
    (1 + NGX_HTTP_RLM_ID_HEX + 1 + sizeof(NGX_HTTP_RLM_TRAJ_PREFIX) - 1      \
     + NGX_HTTP_RLM_COMPLETION_ID_MAX + sizeof(NGX_HTTP_RLM_TRAJ_SUFFIX))


struct ngx_http_rlm_trajectory_s {
    ngx_fd_t                    fd;
    ngx_log_t                  *log;
    u_char                     *path;          /* for messages */
    unsigned                    failed:1;
};


/* one entry of a list answer */
typedef struct {
    ngx_str_t                   id;
    off_t                       size;
    time_t                      created;
} ngx_http_rlm_traj_entry_t;


static void ngx_http_rlm_trajectory_cleanup(void *data);
static ngx_int_t ngx_http_rlm_trajectory_write(ngx_http_rlm_trajectory_t *t,
    json_t *line);
static json_t *ngx_http_rlm_trajectory_metadata(json_t *meta,
    u_char *session_hex, ngx_str_t *completion_id);
static json_t *ngx_http_rlm_trajectory_turn(json_t *it);
static json_t *ngx_http_rlm_trajectory_block(json_t *block);
static json_t *ngx_http_rlm_trajectory_call(json_t *call);
static json_t *ngx_http_rlm_trajectory_stderr(json_t *result);
static json_t *ngx_http_rlm_trajectory_timestamp(void);
static json_t *ngx_http_rlm_traj_str(json_t *from, const char *key,
    const char *dflt);
static json_t *ngx_http_rlm_traj_str_or_null(json_t *from, const char *key);
static json_t *ngx_http_rlm_traj_any(json_t *from, const char *key,
    json_t *dflt);
static json_t *ngx_http_rlm_traj_int(json_t *from, const char *key);
static json_t *ngx_http_rlm_traj_real(json_t *from, const char *key,
    ngx_uint_t nullable);

static ngx_int_t ngx_http_rlm_trajectory_route(ngx_http_request_t *r,
    ngx_str_t *sid, ngx_str_t *cid);
static ngx_int_t ngx_http_rlm_trajectory_list(ngx_http_request_t *r,
    ngx_str_t *dir, u_char *hex, time_t since);
static ngx_int_t ngx_http_rlm_trajectory_stat(int dirfd, u_char *name,
    off_t *size, time_t *mtime, time_t *created);
static int ngx_libc_cdecl ngx_http_rlm_trajectory_cmp(const void *one,
    const void *two);
static ngx_int_t ngx_http_rlm_trajectory_send(ngx_http_request_t *r,
    ngx_str_t *dir, u_char *hex, ngx_str_t *cid, time_t since);
static off_t ngx_http_rlm_trajectory_whole_lines(ngx_fd_t fd, off_t size,
    ngx_log_t *log, u_char *path);
static ngx_int_t ngx_http_rlm_trajectory_not_allowed(ngx_http_request_t *r);


/* the writer */

ngx_http_rlm_trajectory_t *
ngx_http_rlm_trajectory_open(ngx_pool_t *pool, ngx_log_t *log, ngx_str_t *dir,
    u_char *session_hex, ngx_str_t *completion_id, json_t *meta)
{
    u_char                      id[NGX_HTTP_RLM_ID_BYTES];
    json_t                     *line;
    ngx_int_t                   rc;
    ngx_pool_cleanup_t         *cln;
    ngx_http_rlm_trajectory_t  *t;

    if (dir == NULL || dir->len == 0) {
        return NULL;
    }

    if (ngx_http_rlm_session_parse_id(session_hex, NGX_HTTP_RLM_ID_HEX, id)
        != NGX_OK
        || ngx_http_rlm_trajectory_valid_id(completion_id->data,
                                            completion_id->len)
           != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, log, 0,
                      "rlm: no trajectory for an invalid session or "
                      "completion id");
        return NULL;
    }

    t = ngx_pcalloc(pool, sizeof(ngx_http_rlm_trajectory_t));
    if (t == NULL) {
        return NULL;
    }

    t->fd = NGX_INVALID_FILE;
    t->log = log;

    t->path = ngx_pnalloc(pool, dir->len + NGX_HTTP_RLM_TRAJ_NAME_MAX);
    if (t->path == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_rlm_trajectory_cleanup;
    cln->data = t;

    /*
     * the session's directory; the trajectory directory itself is made
     * by nginx at start (ngx_create_paths)
     */

    ngx_sprintf(t->path, "%V/%*s%Z", dir, (size_t) NGX_HTTP_RLM_ID_HEX,
                session_hex);

    if (ngx_create_dir(t->path, 0700) == NGX_FILE_ERROR
        && ngx_errno != NGX_EEXIST)
    {
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      ngx_create_dir_n " \"%s\" failed, no trajectory",
                      t->path);
        return NULL;
    }

    ngx_sprintf(t->path, "%V/%*s/%V" NGX_HTTP_RLM_TRAJ_SUFFIX "%Z", dir,
                (size_t) NGX_HTTP_RLM_ID_HEX, session_hex, completion_id);

    t->fd = open((char *) t->path,
                 O_WRONLY|O_CREAT|O_EXCL|O_APPEND|O_CLOEXEC|O_NOFOLLOW,
                 0600);

    if (t->fd == NGX_INVALID_FILE) {
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      "open() \"%s\" failed, no trajectory", t->path);
        return NULL;
    }

    line = ngx_http_rlm_trajectory_metadata(meta, session_hex,
                                            completion_id);
    if (line == NULL) {
        rc = NGX_ERROR;
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "rlm: cannot build the metadata of trajectory \"%s\"",
                      t->path);

    } else {
        rc = ngx_http_rlm_trajectory_write(t, line);
        json_decref(line);
    }

    if (rc != NGX_OK) {
        /* a file without its metadata line is of no use to anybody */

        if (ngx_delete_file(t->path) == NGX_FILE_ERROR) {
            ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                          ngx_delete_file_n " \"%s\" failed", t->path);
        }

        ngx_http_rlm_trajectory_close(t);
        return NULL;
    }

    return t;
}


ngx_int_t
ngx_http_rlm_trajectory_iteration(ngx_http_rlm_trajectory_t *t,
    json_t *iteration)
{
    json_t     *line;
    ngx_int_t   rc;

    if (t == NULL || t->failed || t->fd == NGX_INVALID_FILE) {
        return NGX_ERROR;
    }

    line = ngx_http_rlm_trajectory_turn(iteration);
    if (line == NULL) {
        ngx_log_error(NGX_LOG_ERR, t->log, 0,
                      "rlm: cannot build an iteration of trajectory \"%s\"",
                      t->path);
        return NGX_ERROR;
    }

    rc = ngx_http_rlm_trajectory_write(t, line);

    json_decref(line);

    return rc;
}


void
ngx_http_rlm_trajectory_close(ngx_http_rlm_trajectory_t *t)
{
    if (t == NULL || t->fd == NGX_INVALID_FILE) {
        return;
    }

    if (ngx_close_file(t->fd) == NGX_FILE_ERROR) {
        ngx_log_error(NGX_LOG_ALERT, t->log, ngx_errno,
                      ngx_close_file_n " \"%s\" failed", t->path);
    }

    t->fd = NGX_INVALID_FILE;
}


static void
ngx_http_rlm_trajectory_cleanup(void *data)
{
    ngx_http_rlm_trajectory_close(data);
}


/*
 * A session id can be taken again after its session is gone (client
 * chosen ids): the earlier session's directory is renamed to
 * "<hex>.<unix time>.<pid>", out of the routes' reach, kept for the
 * operator.
 */

ngx_int_t
ngx_http_rlm_trajectory_forget(ngx_log_t *log, ngx_str_t *dir,
    u_char *session_hex)
{
    u_char  *from, *to;
    u_char   id[NGX_HTTP_RLM_ID_BYTES];
    size_t   len;

    if (dir == NULL || dir->len == 0) {
        return NGX_OK;
    }

    if (ngx_http_rlm_session_parse_id(session_hex, NGX_HTTP_RLM_ID_HEX, id)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    len = dir->len + 1 + NGX_HTTP_RLM_ID_HEX + 1;

    from = ngx_alloc(2 * len + 2 * NGX_INT64_LEN + 2, log);
    if (from == NULL) {
        return NGX_ERROR;
    }

    to = from + len;

    ngx_sprintf(from, "%V/%*s%Z", dir, (size_t) NGX_HTTP_RLM_ID_HEX,
                session_hex);
    ngx_sprintf(to, "%V/%*s.%T.%P%Z", dir, (size_t) NGX_HTTP_RLM_ID_HEX,
                session_hex, ngx_time(), ngx_pid);

    if (ngx_rename_file(from, to) == NGX_FILE_ERROR) {
        if (ngx_errno == NGX_ENOENT) {
            ngx_free(from);
            return NGX_OK;
        }

        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      ngx_rename_file_n " \"%s\" to \"%s\" failed",
                      from, to);
        ngx_free(from);
        return NGX_ERROR;
    }

    ngx_log_error(NGX_LOG_INFO, log, 0,
                  "rlm: trajectories of an earlier session %*s kept in "
                  "\"%s\"", (size_t) NGX_HTTP_RLM_ID_HEX, session_hex, to);

    ngx_free(from);

    return NGX_OK;
}


/*
 * One line, one write(2): with O_APPEND the line lands whole after the
 * previous one.  A short write (disk full) is continued; the first
 * error stops this trajectory for good.
 */

static ngx_int_t
ngx_http_rlm_trajectory_write(ngx_http_rlm_trajectory_t *t, json_t *line)
{
    char       *text, *p;
    size_t      len;
    ssize_t     n;
    ngx_err_t   err;

    text = json_dumps(line, JSON_COMPACT|JSON_REAL_PRECISION(10));
    if (text == NULL) {
        ngx_log_error(NGX_LOG_ERR, t->log, 0,
                      "rlm: cannot serialize a line of trajectory \"%s\"",
                      t->path);
        return NGX_ERROR;
    }

    len = ngx_strlen(text);

    /* the newline replaces the terminating NUL */
    text[len++] = '\n';

    p = text;

    while (len) {
        n = write(t->fd, p, len);

        if (n == -1) {
            err = ngx_errno;

            if (err == NGX_EINTR) {
                continue;
            }

            ngx_log_error(NGX_LOG_ALERT, t->log, err,
                          "write() to trajectory \"%s\" failed, it ends "
                          "here", t->path);
            t->failed = 1;
            free(text);
            return NGX_ERROR;
        }

        p += n;
        len -= n;
    }

    free(text);

    return NGX_OK;
}


/*
 * The reference's metadata line (RLMMetadata.to_dict() after "type" and
 * "timestamp"), then what the reference has no key for.
 */

static json_t *
ngx_http_rlm_trajectory_metadata(json_t *meta, u_char *session_hex,
    ngx_str_t *completion_id)
{
    int      rc;
    json_t  *line, *kwargs, *created;

    line = json_object();
    if (line == NULL) {
        return NULL;
    }

    kwargs = json_object();
    rc = json_object_set_new(kwargs, "model_name",
                             ngx_http_rlm_traj_str(meta, "root_model",
                                                   "unknown"));

    created = json_object_get(meta, "created");
    created = json_is_integer(created)
              ? json_incref(created) : json_integer(ngx_time());

    rc |= json_object_set_new(line, "type", json_string("metadata"));
    rc |= json_object_set_new(line, "timestamp",
                              ngx_http_rlm_trajectory_timestamp());
    rc |= json_object_set_new(line, "root_model",
                              ngx_http_rlm_traj_str(meta, "root_model",
                                                    "unknown"));
    rc |= json_object_set_new(line, "max_depth",
                              ngx_http_rlm_traj_int(meta, "max_depth"));
    rc |= json_object_set_new(line, "max_iterations",
                              ngx_http_rlm_traj_int(meta, "max_iterations"));
    rc |= json_object_set_new(line, "backend",
                              ngx_http_rlm_traj_str(meta, "provider",
                                                    "openai"));
    rc |= json_object_set_new(line, "backend_kwargs", kwargs);
    rc |= json_object_set_new(line, "environment_type",
                              json_string("ngx_rlm"));
    rc |= json_object_set_new(line, "environment_kwargs", json_object());
    rc |= json_object_set_new(line, "other_backends", json_null());

    rc |= json_object_set_new(line, "sub_model",
                              ngx_http_rlm_traj_str(meta, "sub_model", ""));
    rc |= json_object_set_new(line, "depth",
                              ngx_http_rlm_traj_int(meta, "depth"));
    rc |= json_object_set_new(line, "completion_id",
                              json_stringn((char *) completion_id->data,
                                           completion_id->len));
    rc |= json_object_set_new(line, "session",
                              json_stringn((char *) session_hex,
                                           NGX_HTTP_RLM_ID_HEX));
    rc |= json_object_set_new(line, "created", created);
    rc |= json_object_set_new(line, "system_prompt",
                              ngx_http_rlm_traj_str(meta, "system_prompt",
                                                    ""));

    if (rc != 0) {
        json_decref(line);
        return NULL;
    }

    return line;
}


/*
 * The reference's iteration line: "type", "iteration", "timestamp" and
 * RLMIteration.to_dict(); our token counts in "usage".
 */

static json_t *
ngx_http_rlm_trajectory_turn(json_t *it)
{
    int      rc;
    size_t   i;
    json_t  *line, *blocks, *in;

    line = json_object();
    blocks = json_array();

    if (line == NULL || blocks == NULL) {
        json_decref(line);
        json_decref(blocks);
        return NULL;
    }

    rc = 0;

    json_array_foreach(json_object_get(it, "code_blocks"), i, in) {
        rc |= json_array_append_new(blocks,
                                    ngx_http_rlm_trajectory_block(in));
    }

    rc |= json_object_set_new(line, "type", json_string("iteration"));
    rc |= json_object_set_new(line, "iteration",
                              ngx_http_rlm_traj_int(it, "iteration"));
    rc |= json_object_set_new(line, "timestamp",
                              ngx_http_rlm_trajectory_timestamp());
    rc |= json_object_set_new(line, "prompt",
                              ngx_http_rlm_traj_any(it, "prompt",
                                                    json_array()));
    rc |= json_object_set_new(line, "response",
                              ngx_http_rlm_traj_str(it, "response", ""));
    rc |= json_object_set_new(line, "code_blocks", blocks);
    rc |= json_object_set_new(line, "final_answer",
                              ngx_http_rlm_traj_str_or_null(it,
                                                            "final_answer"));
    rc |= json_object_set_new(line, "iteration_time",
                              ngx_http_rlm_traj_real(it, "iteration_time", 1));
    rc |= json_object_set_new(line, "usage",
                              ngx_http_rlm_traj_any(it, "usage",
                                                    json_null()));

    if (json_is_object(json_object_get(it, "compaction"))) {
        /* ours: the history was summarised before this prompt */
        rc |= json_object_set(line, "compaction",
                              json_object_get(it, "compaction"));
    }

    if (rc != 0) {
        json_decref(line);
        return NULL;
    }

    return line;
}


/* CodeBlock.to_dict(): {"code", "result": REPLResult.to_dict()} */

static json_t *
ngx_http_rlm_trajectory_block(json_t *block)
{
    int      rc;
    size_t   i;
    json_t  *out, *result, *calls, *in, *call;

    in = json_object_get(block, "result");

    out = json_object();
    result = json_object();
    calls = json_array();

    if (out == NULL || result == NULL || calls == NULL) {
        json_decref(out);
        json_decref(result);
        json_decref(calls);
        return NULL;
    }

    rc = 0;

    json_array_foreach(json_object_get(in, "rlm_calls"), i, call) {

        /* a slot left empty: the block ended before that call answered */
        if (!json_is_object(call)) {
            continue;
        }

        rc |= json_array_append_new(calls,
                                    ngx_http_rlm_trajectory_call(call));
    }

    rc |= json_object_set_new(result, "stdout",
                              ngx_http_rlm_traj_str(in, "stdout", ""));
    rc |= json_object_set_new(result, "stderr",
                              ngx_http_rlm_trajectory_stderr(in));

    /* the sandbox does not report a cell's variables */
    rc |= json_object_set_new(result, "locals", json_object());

    rc |= json_object_set_new(result, "execution_time",
                              ngx_http_rlm_traj_real(in, "execution_time", 0));
    rc |= json_object_set_new(result, "rlm_calls", calls);
    rc |= json_object_set_new(result, "final_answer",
                              ngx_http_rlm_traj_str_or_null(in,
                                                            "final_answer"));
    rc |= json_object_set_new(result, "status",
                              ngx_http_rlm_traj_str(in, "status", ""));
    rc |= json_object_set_new(result, "error",
                              ngx_http_rlm_traj_any(in, "error",
                                                    json_null()));

    rc |= json_object_set_new(out, "code",
                              ngx_http_rlm_traj_str(block, "code", ""));
    rc |= json_object_set_new(out, "result", result);

    if (rc != 0) {
        json_decref(out);
        return NULL;
    }

    return out;
}


/*
 * RLMChatCompletion.to_dict() (root_model, prompt, response,
 * usage_summary, execution_time, and "error" when the call failed), plus
 * the flat prompt_tokens and completion_tokens the visualizer shows, and
 * our "fn".  A child RLM's entry carries its usage per model and, in
 * "metadata", its run metadata and its iteration lines, formatted as the
 * top-level ones.
 */

static json_t *
ngx_http_rlm_trajectory_call(json_t *call)
{
    int          rc;
    size_t       i;
    json_t      *out, *summary, *per_model, *meta, *in, *lines, *it;
    const char  *model;

    model = json_string_value(json_object_get(call, "model"));
    if (model == NULL || *model == '\0') {
        model = "unknown";
    }

    summary = NULL;

    if (json_is_object(json_object_get(call, "usage_summary"))) {
        summary = json_deep_copy(json_object_get(call, "usage_summary"));

    } else {
        per_model = json_pack("{s:i, s:o, s:o}", "total_calls", 1,
                              "total_input_tokens",
                              ngx_http_rlm_traj_int(call, "prompt_tokens"),
                              "total_output_tokens",
                              ngx_http_rlm_traj_int(call,
                                                    "completion_tokens"));
        if (per_model) {
            summary = json_pack("{s:{s:o}}", "model_usage_summaries",
                                model, per_model);
        }
    }

    out = json_object();

    if (summary == NULL || out == NULL) {
        json_decref(summary);
        json_decref(out);
        return NULL;
    }

    rc = json_object_set_new(out, "root_model", json_string(model));
    rc |= json_object_set_new(out, "prompt",
                              ngx_http_rlm_traj_any(call, "prompt",
                                                    json_string("")));
    rc |= json_object_set_new(out, "response",
                              ngx_http_rlm_traj_str(call, "response", ""));
    rc |= json_object_set_new(out, "usage_summary", summary);
    rc |= json_object_set_new(out, "execution_time",
                              ngx_http_rlm_traj_real(call, "execution_time",
                                                     0));
    rc |= json_object_set_new(out, "prompt_tokens",
                              ngx_http_rlm_traj_int(call, "prompt_tokens"));
    rc |= json_object_set_new(out, "completion_tokens",
                              ngx_http_rlm_traj_int(call,
                                                    "completion_tokens"));
    rc |= json_object_set_new(out, "fn",
                              ngx_http_rlm_traj_str(call, "fn", ""));

    if (json_is_string(json_object_get(call, "error"))) {
        rc |= json_object_set_new(out, "error",
                                  ngx_http_rlm_traj_str(call, "error", ""));
    }

    in = json_object_get(call, "metadata");

    if (json_is_object(in)) {
        lines = json_array();
        meta = json_pack("{s:o, s:o}", "run_metadata",
                         ngx_http_rlm_traj_any(in, "run_metadata",
                                               json_null()),
                         "iterations", lines ? json_incref(lines)
                                             : json_null());

        json_array_foreach(json_object_get(in, "iterations"), i, it) {
            if (lines) {
                rc |= json_array_append_new(lines,
                                            ngx_http_rlm_trajectory_turn(it));
            }
        }

        json_decref(lines);
        rc |= json_object_set_new(out, "metadata",
                                  meta ? meta : json_null());
    }

    if (rc != 0) {
        json_decref(out);
        return NULL;
    }

    return out;
}


/*
 * The reference's REPL writes the exception into stderr, and the
 * visualizer flags a block as failed by a non-empty stderr; our sandbox
 * reports it apart, so the traceback (or "ename: evalue") is appended.
 */

static json_t *
ngx_http_rlm_trajectory_stderr(json_t *result)
{
    u_char      *buf, *p;
    size_t       len, elen, vlen;
    json_t      *err, *out;
    const char  *s, *tb, *ename, *evalue;

    s = json_string_value(json_object_get(result, "stderr"));
    len = s ? json_string_length(json_object_get(result, "stderr")) : 0;

    err = json_object_get(result, "error");

    tb = json_string_value(json_object_get(err, "traceback"));
    ename = json_string_value(json_object_get(err, "ename"));
    evalue = json_string_value(json_object_get(err, "evalue"));

    elen = 0;

    if (tb && *tb) {
        elen = ngx_strlen(tb);

    } else if (ename && *ename) {
        vlen = evalue ? ngx_strlen(evalue) : 0;
        elen = ngx_strlen(ename) + 2 + vlen;
        tb = NULL;
    }

    if (elen == 0) {
        return s ? json_stringn(s, len) : json_string("");
    }

    buf = malloc(len + 1 + elen + 1);
    if (buf == NULL) {
        return NULL;
    }

    p = buf;

    if (len) {
        p = ngx_cpymem(p, s, len);

        if (p[-1] != '\n') {
            *p++ = '\n';
        }
    }

    if (tb) {
        p = ngx_cpymem(p, tb, elen);

    } else {
        p = ngx_cpymem(p, ename, ngx_strlen(ename));
        *p++ = ':';
        *p++ = ' ';

        if (evalue) {
            p = ngx_cpymem(p, evalue, ngx_strlen(evalue));
        }
    }

    out = json_stringn((char *) buf, p - buf);

    free(buf);

    return out;
}


/* like Python's datetime.isoformat() of an aware UTC time */

static json_t *
ngx_http_rlm_trajectory_timestamp(void)
{
    u_char          buf[sizeof("1970-01-01T00:00:00.000000+00:00")];
    u_char         *p;
    ngx_tm_t        tm;
    struct timeval  tv;

    ngx_gettimeofday(&tv);
    ngx_gmtime(tv.tv_sec, &tm);

    p = ngx_sprintf(buf, "%4d-%02d-%02dT%02d:%02d:%02d.%06d+00:00",
                    tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                    tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec,
                    (int) tv.tv_usec);

    return json_stringn((char *) buf, p - buf);
}


/* new references to a member of the loop's json, or to a default */

static json_t *
ngx_http_rlm_traj_str(json_t *from, const char *key, const char *dflt)
{
    json_t  *v;

    v = json_object_get(from, key);

    return json_is_string(v) ? json_incref(v) : json_string(dflt);
}


static json_t *
ngx_http_rlm_traj_str_or_null(json_t *from, const char *key)
{
    json_t  *v;

    v = json_object_get(from, key);

    return json_is_string(v) ? json_incref(v) : json_null();
}


/* dflt is a new reference, dropped when the member is there */

static json_t *
ngx_http_rlm_traj_any(json_t *from, const char *key, json_t *dflt)
{
    json_t  *v;

    v = json_object_get(from, key);

    if (v == NULL) {
        return dflt;
    }

    json_decref(dflt);

    return json_incref(v);
}


static json_t *
ngx_http_rlm_traj_int(json_t *from, const char *key)
{
    json_t  *v;

    v = json_object_get(from, key);

    if (json_is_integer(v)) {
        return json_incref(v);
    }

    if (json_is_real(v)) {
        return json_integer((json_int_t) json_real_value(v));
    }

    return json_integer(0);
}


/* seconds as a float, as the reference writes every duration */

static json_t *
ngx_http_rlm_traj_real(json_t *from, const char *key, ngx_uint_t nullable)
{
    json_t  *v;

    v = json_object_get(from, key);

    if (json_is_number(v)) {
        return json_real(json_number_value(v));
    }

    return nullable ? json_null() : json_real(0.0);
}


ngx_int_t
ngx_http_rlm_trajectory_valid_id(u_char *id, size_t len)
{
    size_t  i, plen;

    plen = sizeof(NGX_HTTP_RLM_TRAJ_PREFIX) - 1;

    if (len <= plen || len > plen + NGX_HTTP_RLM_COMPLETION_ID_MAX
        || ngx_strncmp(id, NGX_HTTP_RLM_TRAJ_PREFIX, plen) != 0)
    {
        return NGX_DECLINED;
    }

    for (i = plen; i < len; i++) {
        if (!((id[i] >= '0' && id[i] <= '9')
              || (id[i] >= 'a' && id[i] <= 'z')
              || (id[i] >= 'A' && id[i] <= 'Z')))
        {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


/* the HTTP routes */

ngx_int_t
ngx_http_rlm_trajectories_handler(ngx_http_request_t *r)
{
    time_t                     since;
    ngx_int_t                  rc;
    ngx_str_t                  sid, cid;
    ngx_http_rlm_zone_t       *z;
    ngx_http_rlm_session_t    *s;
    ngx_http_rlm_main_conf_t  *rmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_rlm_trajectory_not_allowed(r);
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_rlm_trajectory_route(r, &sid, &cid) != NGX_OK) {
        return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_FOUND,
                                       "invalid_request_error", "not_found",
                                       "no such route: trajectories are at "
                                       ".../sessions/{id}/trajectories and "
                                       ".../sessions/{id}/trajectories/"
                                       "{completion_id}");
    }

    rmcf = ngx_http_get_module_main_conf(r, ngx_http_rlm_module);

    if (rmcf->trajectory_dir == NULL) {
        return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_FOUND,
                                       "invalid_request_error", "not_found",
                                       "trajectories are not enabled on "
                                       "this server (rlm_trajectory_dir is "
                                       "not set)");
    }

    /* the sessions API's id and owner checks: another owner's is unknown */

    s = ngx_http_rlm_api_session(r, &sid, &rc);
    if (s == NULL) {
        return rc;
    }

    z = ngx_http_rlm_zone();

    /*
     * Files last written before the session existed belong to an earlier
     * session with the same id.  A second of slack: file times come from
     * the kernel's coarse clock, which may still be in the second before
     * the one nginx stamped on a session created a moment earlier.
     */

    since = s->created - 1;

    ngx_http_rlm_session_put(z, s);

    if (cid.len == 0) {
        return ngx_http_rlm_trajectory_list(r, &rmcf->trajectory_dir->name,
                                            sid.data, since);
    }

    if (ngx_http_rlm_trajectory_valid_id(cid.data, cid.len) != NGX_OK) {
        return ngx_http_rlm_send_error_param(r, NGX_HTTP_BAD_REQUEST,
                                             "invalid_request_error",
                                             "invalid_completion_id",
                                             "completion_id",
                                             "a completion id is \"chatcmpl-"
                                             "\" and up to 64 letters and "
                                             "digits");
    }

    return ngx_http_rlm_trajectory_send(r, &rmcf->trajectory_dir->name,
                                        sid.data, &cid, since);
}


/*
 * After the last "/sessions/" of the URI: "{id}/trajectories" and then
 * nothing, "/" or "/{completion_id}".  cid->len is 0 for the list.
 */

static ngx_int_t
ngx_http_rlm_trajectory_route(ngx_http_request_t *r, ngx_str_t *sid,
    ngx_str_t *cid)
{
    u_char  *p, *end, *tail, *slash;

    static u_char  seg[] = "/sessions/";
    static u_char  sub[] = "trajectories";

    p = r->uri.data;
    end = r->uri.data + r->uri.len;
    tail = NULL;

    while (p + sizeof(seg) - 1 <= end) {
        p = ngx_strlcasestrn(p, end, seg, sizeof(seg) - 2);
        if (p == NULL) {
            break;
        }

        p += sizeof(seg) - 1;
        tail = p;
    }

    if (tail == NULL) {
        return NGX_DECLINED;
    }

    slash = ngx_strlchr(tail, end, '/');
    if (slash == NULL) {
        return NGX_DECLINED;
    }

    sid->data = tail;
    sid->len = slash - tail;

    p = slash + 1;

    if ((size_t) (end - p) < sizeof(sub) - 1
        || ngx_strncmp(p, sub, sizeof(sub) - 1) != 0)
    {
        return NGX_DECLINED;
    }

    p += sizeof(sub) - 1;

    ngx_str_null(cid);

    if (p == end || (p + 1 == end && *p == '/')) {
        return NGX_OK;
    }

    if (*p != '/') {
        return NGX_DECLINED;
    }

    /* the completion id is checked by the caller, one segment or none */

    cid->data = p + 1;
    cid->len = end - cid->data;

    return NGX_OK;
}


/*
 * Reads the session's directory, as the autoindex module reads one:
 * blocking, the names only, one stat each.  Files last written before
 * "since" are not shown.
 */

static ngx_int_t
ngx_http_rlm_trajectory_list(ngx_http_request_t *r, ngx_str_t *dir,
    u_char *hex, time_t since)
{
    int                         rc;
    u_char                     *name;
    size_t                      len, slen;
    time_t                      mtime;
    json_t                     *body, *data;
    ngx_err_t                   err;
    ngx_int_t                   rv;
    ngx_dir_t                   d;
    ngx_str_t                   path;
    ngx_uint_t                  i;
    ngx_array_t                 entries;
    ngx_http_rlm_traj_entry_t  *e;

    if (ngx_array_init(&entries, r->pool, 16,
                       sizeof(ngx_http_rlm_traj_entry_t))
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    path.len = dir->len + 1 + NGX_HTTP_RLM_ID_HEX;
    path.data = ngx_pnalloc(r->pool, path.len + 1);
    if (path.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_sprintf(path.data, "%V/%*s%Z", dir, (size_t) NGX_HTTP_RLM_ID_HEX,
                hex);

    slen = sizeof(NGX_HTTP_RLM_TRAJ_SUFFIX) - 1;

    if (ngx_open_dir(&path, &d) == NGX_ERROR) {
        err = ngx_errno;

        if (err != NGX_ENOENT && err != NGX_ENOTDIR) {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, err,
                          ngx_open_dir_n " \"%V\" failed", &path);
            return ngx_http_rlm_send_error(r,
                                           NGX_HTTP_INTERNAL_SERVER_ERROR,
                                           "server_error", "internal_error",
                                           "cannot read the trajectories");
        }

        /* no completion has written a trajectory in this session yet */

    } else {
        for ( ;; ) {
            ngx_set_errno(0);

            if (ngx_read_dir(&d) == NGX_ERROR) {
                err = ngx_errno;

                if (err != NGX_ENOMOREFILES) {
                    ngx_log_error(NGX_LOG_ALERT, r->connection->log, err,
                                  ngx_read_dir_n " \"%V\" failed", &path);
                }

                break;
            }

            name = ngx_de_name(&d);
            len = ngx_de_namelen(&d);

            if (len <= slen
                || ngx_strncmp(name + len - slen, NGX_HTTP_RLM_TRAJ_SUFFIX,
                               slen) != 0
                || ngx_http_rlm_trajectory_valid_id(name, len - slen)
                   != NGX_OK)
            {
                continue;
            }

            e = ngx_array_push(&entries);
            if (e == NULL) {
                ngx_close_dir(&d);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            rv = ngx_http_rlm_trajectory_stat(dirfd(d.dir), name, &e->size,
                                              &mtime, &e->created);

            if (rv != NGX_OK || mtime < since) {
                /* gone meanwhile, not a file, or an earlier session's */
                entries.nelts--;
                continue;
            }

            e->id.len = len - slen;
            e->id.data = ngx_pnalloc(r->pool, e->id.len);
            if (e->id.data == NULL) {
                ngx_close_dir(&d);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            ngx_memcpy(e->id.data, name, e->id.len);
        }

        if (ngx_close_dir(&d) == NGX_ERROR) {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, ngx_errno,
                          ngx_close_dir_n " \"%V\" failed", &path);
        }
    }

    if (entries.nelts > 1) {
        ngx_qsort(entries.elts, entries.nelts,
                  sizeof(ngx_http_rlm_traj_entry_t),
                  ngx_http_rlm_trajectory_cmp);
    }

    data = json_array();
    body = json_pack("{s:s, s:s#, s:o}", "object", "list",
                     "session", hex, (int) NGX_HTTP_RLM_ID_HEX,
                     "data", data);
    if (body == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    e = entries.elts;
    rc = 0;

    for (i = 0; i < entries.nelts; i++) {
        rc |= json_array_append_new(data,
                  json_pack("{s:s#, s:s, s:I, s:I}",
                            "id", e[i].id.data, (int) e[i].id.len,
                            "object", "rlm.trajectory",
                            "bytes", (json_int_t) e[i].size,
                            "created", (json_int_t) e[i].created));
    }

    if (rc != 0) {
        json_decref(body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rv = ngx_http_rlm_send_json_value(r, NGX_HTTP_OK, body);

    json_decref(body);

    return rv;
}


/*
 * A regular file's size, last write and birth (the last write where the
 * file system keeps no birth time).
 */

static ngx_int_t
ngx_http_rlm_trajectory_stat(int dirfd, u_char *name, off_t *size,
    time_t *mtime, time_t *created)
{
#if (NGX_LINUX) && defined(STATX_BTIME)

    struct statx  stx;

    if (statx(dirfd, (char *) name, AT_SYMLINK_NOFOLLOW,
              STATX_TYPE|STATX_SIZE|STATX_MTIME|STATX_BTIME, &stx)
        == -1)
    {
        return NGX_ERROR;
    }

    if (!S_ISREG(stx.stx_mode)) {
        return NGX_DECLINED;
    }

    *size = (off_t) stx.stx_size;
    *mtime = (time_t) stx.stx_mtime.tv_sec;
    *created = (stx.stx_mask & STATX_BTIME)
               ? (time_t) stx.stx_btime.tv_sec : *mtime;

#else

    struct stat  st;

    if (fstatat(dirfd, (char *) name, &st, AT_SYMLINK_NOFOLLOW) == -1) {
        return NGX_ERROR;
    }

    if (!S_ISREG(st.st_mode)) {
        return NGX_DECLINED;
    }

    *size = st.st_size;
    *mtime = st.st_mtime;
    *created = st.st_mtime;

#endif

    return NGX_OK;
}


/* oldest first; the id breaks ties */

static int ngx_libc_cdecl
ngx_http_rlm_trajectory_cmp(const void *one, const void *two)
{
    const ngx_http_rlm_traj_entry_t  *a = one;
    const ngx_http_rlm_traj_entry_t  *b = two;

    if (a->created != b->created) {
        return a->created < b->created ? -1 : 1;
    }

    return ngx_memn2cmp(a->id.data, b->id.data, a->id.len, b->id.len);
}


/*
 * Serves the file from disk (sendfile or nginx's output buffers), never
 * reading it into memory.  A completion that is still running may be in
 * the middle of a line: only whole lines are sent.
 */

static ngx_int_t
ngx_http_rlm_trajectory_send(ngx_http_request_t *r, ngx_str_t *dir,
    u_char *hex, ngx_str_t *cid, time_t since)
{
    off_t                      size;
    ngx_fd_t                   fd;
    ngx_err_t                  err;
    ngx_int_t                  rc;
    ngx_buf_t                 *b;
    ngx_str_t                  path;
    ngx_chain_t                out;
    ngx_file_info_t            fi;
    ngx_pool_cleanup_t        *cln;
    ngx_pool_cleanup_file_t   *clnf;

    path.len = dir->len + 1 + NGX_HTTP_RLM_ID_HEX + 1 + cid->len
               + sizeof(NGX_HTTP_RLM_TRAJ_SUFFIX) - 1;
    path.data = ngx_pnalloc(r->pool, path.len + 1);
    if (path.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_sprintf(path.data, "%V/%*s/%V" NGX_HTTP_RLM_TRAJ_SUFFIX "%Z", dir,
                (size_t) NGX_HTTP_RLM_ID_HEX, hex, cid);

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_pool_cleanup_file_t));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    fd = open((char *) path.data, O_RDONLY|O_NOFOLLOW|O_CLOEXEC);

    if (fd == NGX_INVALID_FILE) {
        err = ngx_errno;

        if (err != NGX_ENOENT && err != NGX_ENOTDIR && err != NGX_ELOOP) {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, err,
                          ngx_open_file_n " \"%V\" failed", &path);
            return ngx_http_rlm_send_error(r,
                                           NGX_HTTP_INTERNAL_SERVER_ERROR,
                                           "server_error", "internal_error",
                                           "cannot read the trajectory");
        }

        goto not_found;
    }

    cln->handler = ngx_pool_cleanup_file;
    clnf = cln->data;
    clnf->fd = fd;
    clnf->name = path.data;
    clnf->log = r->pool->log;

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, ngx_errno,
                      ngx_fd_info_n " \"%V\" failed", &path);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!ngx_is_file(&fi) || ngx_file_mtime(&fi) < since) {
        goto not_found;
    }

    size = ngx_http_rlm_trajectory_whole_lines(fd, ngx_file_size(&fi),
                                               r->connection->log,
                                               path.data);
    if (size == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = size;
    r->headers_out.last_modified_time = ngx_file_mtime(&fi);
    ngx_str_set(&r->headers_out.content_type, "application/x-ndjson");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (r->method == NGX_HTTP_HEAD || size == 0) {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->file = ngx_pcalloc(r->pool, sizeof(ngx_file_t));
    if (b->file == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->file_pos = 0;
    b->file_last = size;
    b->in_file = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    b->file->fd = fd;
    b->file->name = path;
    b->file->log = r->connection->log;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);

not_found:

    return ngx_http_rlm_send_error_param(r, NGX_HTTP_NOT_FOUND,
                                         "invalid_request_error",
                                         "trajectory_not_found",
                                         "completion_id",
                                         "no such trajectory in this "
                                         "session");
}


/* the length up to and with the last newline, reading back from the end */

static off_t
ngx_http_rlm_trajectory_whole_lines(ngx_fd_t fd, off_t size, ngx_log_t *log,
    u_char *path)
{
    u_char   buf[4096];
    off_t    end;
    size_t   i, want;
    ssize_t  n;

    end = size;

    while (end > 0) {
        want = (size_t) ngx_min(end, (off_t) sizeof(buf));

        n = pread(fd, buf, want, end - want);

        if (n == -1) {
            ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                          "pread() \"%s\" failed", path);
            return NGX_ERROR;
        }

        if ((size_t) n != want) {
            /* truncated meanwhile: serve what we saw */
            return size;
        }

        for (i = want; i > 0; i--) {
            if (buf[i - 1] == '\n') {
                return end - want + i;
            }
        }

        end -= want;
    }

    return 0;
}


static ngx_int_t
ngx_http_rlm_trajectory_not_allowed(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_rlm_set_header(r, "Allow", "GET, HEAD") != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_rlm_send_error(r, NGX_HTTP_NOT_ALLOWED,
                                   "invalid_request_error",
                                   "method_not_allowed",
                                   "trajectories are read with GET or HEAD");
}


/*
 * rlm_trajectory_dir PATH: a path nginx creates at start (0700, owned
 * by the workers' user), relative to the prefix unless absolute.
 */

char *
ngx_http_rlm_trajectory_dir(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char        *rv;
    ngx_str_t   *value;
    ngx_path_t  *path;

    value = cf->args->elts;

    if (value[1].len == 0) {
        return "must not be empty";
    }

    rv = ngx_conf_set_path_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    path = *(ngx_path_t **) ((char *) conf + cmd->offset);

    if (path->name.len == 0) {
        return "must not be the root directory";
    }

    if (path->name.len + NGX_HTTP_RLM_TRAJ_NAME_MAX > NGX_MAX_PATH) {
        return "is too long";
    }

    return NGX_CONF_OK;
}
