
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The words of the loop: the default system prompt, the first user
 * message (what the context is, and the query), the message of every
 * turn, and how a block's output is shown to the model.  A location can
 * replace the system prompt with a file (rlm_system_prompt_file).
 */


#include "ngx_http_rlm_loop.h"


#define NGX_HTTP_RLM_PROMPT_CHUNKS  16


ngx_str_t  ngx_http_rlm_default_system_prompt = ngx_string(
"You are answering a query about a context that may be far too large to "
"read in one go. The context is already loaded into a Python interpreter "
"as the variable `context`. You work by writing Python code in fenced "
"blocks that start with ```repl and end with ```. Each block runs, in "
"order, in the same interpreter (variables survive between blocks and "
"turns), and you are shown what it printed; long output is cut, so print "
"summaries and slices, not everything.\n"
"\n"
"Functions you can call from code:\n"
"- llm_query(prompt, model=None) -> str: ask a language model; it can "
"read a few hundred thousand characters, so give it chunks of the "
"context with a precise question.\n"
"- llm_query_batched(prompts, model=None) -> list[str]: many prompts at "
"once, answers in the same order; much faster than a loop of llm_query.\n"
"- rlm_query(prompt, context=None) -> str: hand a sub-problem to a "
"recursive copy of yourself with its own interpreter, whose context is "
"`context` (a str, list or dict), else `prompt`.\n"
"- SHOW_VARS(): list the variables you have made.\n"
"- `state`: a dict shared with the recursive copies you start.\n"
"\n"
"A good way to work: look at the context's type, size and shape; split "
"it into pieces; ask sub-models about the pieces (batched); combine "
"their answers in code; check the result.\n"
"\n"
"When you have the answer, finish from a repl block:\n"
"    answer[\"content\"] = final_text\n"
"    answer[\"ready\"] = True\n"
"or call FINAL_VAR(\"name\") with the name of a variable that holds it. "
"Never write the output of your code yourself and never claim a result "
"you have not seen printed: wait for the next turn to see it.");


static json_t *ngx_http_rlm_prompt_after(ngx_http_rlm_loop_t *loop,
    json_t *feedback, const char *text, const char *tail);
static void ngx_http_rlm_prompt_describe(ngx_http_rlm_loop_t *loop,
    json_t *ctx, ngx_str_t *out);
static void ngx_http_rlm_prompt_shape(ngx_http_rlm_json_shape_t *sh,
    u_char **pp, u_char *last);


json_t *
ngx_http_rlm_prompt_note(const char *text)
{
    return json_pack("{s:s, s:s}", "role", "user", "content", text);
}


/* what the context is, the names from earlier turns, and the query */

json_t *
ngx_http_rlm_prompt_first(ngx_http_rlm_loop_t *loop)
{
    u_char     *p, *s, *last;
    size_t      len;
    uint64_t    i;
    ngx_str_t   desc;

    ngx_http_rlm_prompt_describe(loop, loop->context, &desc);

    len = desc.len + loop->query.len + 512 + loop->turn * 40;

    p = ngx_pnalloc(loop->pool, len);
    if (p == NULL) {
        return NULL;
    }

    last = p + len;

    if (loop->turn) {
        s = ngx_slprintf(p, last, "The context is in the variable "
                         "`context_%uL`. %V\n", loop->turn, &desc);

    } else {
        s = ngx_slprintf(p, last, "The context is in the variable "
                         "`context`. %V\n", &desc);
    }

    if (loop->turn) {
        s = ngx_slprintf(s, last, "This is turn %uL of a conversation: "
                         "`context_%uL` is the new context; earlier ones "
                         "are", loop->turn + 1, loop->turn);

        for (i = 0; i < loop->turn && s < last - 64; i++) {
            s = ngx_slprintf(s, last, "%s `context_%uL`", i ? "," : "", i);
        }

        s = ngx_slprintf(s, last, " (`context` is `context_0`); the "
                         "messages of earlier turns are in");

        for (i = 0; i < loop->turn && s < last - 64; i++) {
            s = ngx_slprintf(s, last, "%s `history_%uL`", i ? "," : "", i);
        }

        s = ngx_slprintf(s, last, ".\n");
    }

    s = ngx_slprintf(s, last, "\nQuery: %V\n\nTurn 1 of %ui. Start by "
                     "looking at the context; do not answer yet.",
                     &loop->query, loop->max_iterations);

    return json_pack("{s:s, s:s%}", "role", "user",
                     "content", (char *) p, (size_t) (s - p));
}


/* the outputs of the turn's blocks and the next turn's instruction */

json_t *
ngx_http_rlm_prompt_turn(ngx_http_rlm_loop_t *loop, json_t *feedback)
{
    char        head[160];
    ngx_uint_t  next;

    next = loop->iterations + 1;

    if (next == loop->max_iterations) {
        ngx_snprintf((u_char *) head, sizeof(head) - 1,
                     "Turn %ui of %ui, the last one: set the answer in this "
                     "turn.%Z", next, loop->max_iterations);

    } else {
        ngx_snprintf((u_char *) head, sizeof(head) - 1,
                     "Turn %ui of %ui. Go on; finish when the answer is "
                     "ready.%Z", next, loop->max_iterations);
    }

    return ngx_http_rlm_prompt_after(loop, feedback, head, "");
}


json_t *
ngx_http_rlm_prompt_last(ngx_http_rlm_loop_t *loop)
{
    return ngx_http_rlm_prompt_note("You have no turns left and no more "
                                    "code will run. Reply now with your "
                                    "best final answer to the query, as "
                                    "plain text, without code.");
}


/*
 * Compaction: the request that summarises messages [from, to) of the
 * loop's history, and the message that stands in for them after.
 */

json_t *
ngx_http_rlm_prompt_compact(ngx_http_rlm_loop_t *loop, size_t from,
    size_t to)
{
    static const char  head[] =
        "Below is the start of a transcript of a model working on a query "
        "with a Python REPL: its replies (with code) and the outputs of "
        "that code. Summarise it for the model, which will go on from "
        "your summary: what it learned about the data (sizes, structure, "
        "values found), the variables it made and what they hold, what it "
        "tried that failed, and what is left to do. Be specific and keep "
        "numbers exact; leave out code that is not needed to go on.\n\n";

    size_t       i, len;
    json_t      *m;
    u_char      *p, *s;
    const char  *role;

    len = sizeof(head);

    for (i = from; i < to; i++) {
        m = json_array_get(loop->messages, i);
        len += json_string_length(json_object_get(m, "content")) + 32;
    }

    p = ngx_pnalloc(loop->pool, len);
    if (p == NULL) {
        return NULL;
    }

    s = ngx_cpymem(p, head, sizeof(head) - 1);

    for (i = from; i < to; i++) {
        m = json_array_get(loop->messages, i);
        role = json_string_value(json_object_get(m, "role"));

        s = ngx_sprintf(s, "[%s]\n", role ? role : "?");
        s = ngx_cpymem(s,
                       json_string_value(json_object_get(m, "content")),
                       json_string_length(json_object_get(m, "content")));
        *s++ = '\n';
        *s++ = '\n';
    }

    return json_pack("[{s:s, s:s%}]", "role", "user",
                     "content", (char *) p, (size_t) (s - p));
}


json_t *
ngx_http_rlm_prompt_summary(ngx_http_rlm_loop_t *loop, ngx_str_t *text)
{
    static const char  head[] =
        "Your earlier turns were summarised to save room. Every variable "
        "you made is still in the REPL. Summary:\n\n";

    u_char  *p, *s;

    p = ngx_pnalloc(loop->pool, sizeof(head) + text->len);
    if (p == NULL) {
        return NULL;
    }

    s = ngx_cpymem(p, head, sizeof(head) - 1);
    s = ngx_cpymem(s, text->data, text->len);

    return json_pack("{s:s, s:s%}", "role", "user",
                     "content", (char *) p, (size_t) (s - p));
}


/*
 * A limit other than the turns stopped the loop (why says which, in a
 * sentence): the outputs of this turn and a request for the answer.
 */

json_t *
ngx_http_rlm_prompt_stopped(ngx_http_rlm_loop_t *loop, json_t *feedback,
    const char *why)
{
    return ngx_http_rlm_prompt_after(loop, feedback, why,
                                     " No more code will run. Reply now "
                                     "with your best final answer to the "
                                     "query, as plain text, without code.");
}


/*
 * A user message: each block's output of the turn (feedback), a blank
 * line after each, then the two texts.
 */

static json_t *
ngx_http_rlm_prompt_after(ngx_http_rlm_loop_t *loop, json_t *feedback,
    const char *text, const char *tail)
{
    size_t   i, len;
    json_t  *item;
    u_char  *p, *s;

    len = ngx_strlen(text) + ngx_strlen(tail);

    json_array_foreach(feedback, i, item) {
        len += json_string_length(item) + 2;
    }

    p = ngx_pnalloc(loop->pool, len + 1);
    if (p == NULL) {
        return NULL;
    }

    s = p;

    json_array_foreach(feedback, i, item) {
        s = ngx_cpymem(s, json_string_value(item), json_string_length(item));
        *s++ = '\n';
        *s++ = '\n';
    }

    s = ngx_cpymem(s, text, ngx_strlen(text));
    s = ngx_cpymem(s, tail, ngx_strlen(tail));

    return json_pack("{s:s, s:s%}", "role", "user",
                     "content", (char *) p, (size_t) (s - p));
}


json_t *
ngx_http_rlm_prompt_block_output(ngx_http_rlm_loop_t *loop, ngx_uint_t n,
    ngx_http_rlm_result_t *result)
{
    u_char      *buf, *p, *out;
    size_t       len, olen;
    json_t      *msg;
    const char  *status;

    status = ngx_http_rlm_cell_status_name(result->status);

    len = 128 + result->out.len + result->err.len + result->ename.len
          + result->evalue.len;

    buf = ngx_pnalloc(loop->pool, len);
    if (buf == NULL) {
        return NULL;
    }

    p = buf;

    if (result->out.len) {
        p = ngx_cpymem(p, result->out.data, result->out.len);
        if (p[-1] != '\n') {
            *p++ = '\n';
        }
    }

    if (result->err.len) {
        p = ngx_cpymem(p, "[stderr]\n", 9);
        p = ngx_cpymem(p, result->err.data, result->err.len);
        if (p[-1] != '\n') {
            *p++ = '\n';
        }
    }

    if (result->has_error && result->ename.len) {
        p = ngx_sprintf(p, "[error] %V: %V\n", &result->ename,
                        &result->evalue);
    }

    if (p == buf) {
        p = ngx_cpymem(p, "(no output)\n", 12);
    }

    olen = p - buf;

    out = ngx_pnalloc(loop->pool, 96 + olen + NGX_HTTP_RLM_TRUNC_MARKER_MAX);
    if (out == NULL) {
        return NULL;
    }

    p = ngx_sprintf(out, "Output of block %ui (%s, %.1f ms):\n", n, status,
                    result->duration_ms);

    p += ngx_http_rlm_truncate(buf, olen, loop->conf->block_output_max, p);

    msg = json_stringn((char *) out, p - out);

    return msg;
}


/* a JSON container the sandbox parsed itself, as far as it was measured */

static void
ngx_http_rlm_prompt_shape(ngx_http_rlm_json_shape_t *sh, u_char **pp,
    u_char *last)
{
    u_char  *p;
    size_t   i;

    p = *pp;

    if (sh->object) {
        p = ngx_slprintf(p, last, "It is a dict with %uz keys.", sh->items);
        *pp = p;
        return;
    }

    p = ngx_slprintf(p, last, "It is a list of %uz items", sh->items);

    if (sh->measured) {
        p = ngx_slprintf(p, last, "; lengths of the first ones:");

        for (i = 0; i < sh->measured; i++) {
            p = ngx_slprintf(p, last, "%s %uz", i ? "," : "", sh->lengths[i]);
        }

        if (sh->items > sh->measured) {
            p = ngx_slprintf(p, last, " ...");
        }
    }

    *pp = ngx_slprintf(p, last, ".");
}


/* "type str, 12,345 characters in 678 lines" and the like */

static void
ngx_http_rlm_prompt_describe(ngx_http_rlm_loop_t *loop, json_t *ctx,
    ngx_str_t *out)
{
    u_char      *p, *last;
    size_t       i, n, lines, len, chars;
    json_t      *item;
    uint64_t     w;
    const char  *s, *nl;

    p = ngx_pnalloc(loop->pool, 512);
    if (p == NULL) {
        ngx_str_set(out, "");
        return;
    }

    out->data = p;
    last = p + 512;

    if (loop->context_text.data || json_is_string(ctx)) {
        if (loop->context_text.data) {
            s = (const char *) loop->context_text.data;
            len = loop->context_text.len;

        } else {
            s = json_string_value(ctx);
            len = json_string_length(ctx);
        }

        lines = (len > 0);
        nl = s;

        while ((nl = memchr(nl, '\n', len - (nl - s))) != NULL) {
            if (++nl < s + len) {
                lines++;
            }
        }

        /*
         * Characters as Python counts them: bytes that are not UTF-8
         * continuation bytes (10xxxxxx), eight at a time.
         */

        chars = len;

        for (i = 0; i + 8 <= len; i += 8) {
            ngx_memcpy(&w, s + i, 8);
            chars -= __builtin_popcountll(w & ~(w << 1)
                                          & 0x8080808080808080ULL);
        }

        for ( /* void */ ; i < len; i++) {
            chars -= ((u_char) s[i] & 0xc0) == 0x80;
        }

        p = ngx_slprintf(p, last, "It is a str of %uz characters in %uz "
                         "lines.", chars, lines);

    } else if (loop->context_json.data) {
        ngx_http_rlm_prompt_shape(&loop->context_shape, &p, last);

    } else if (json_is_array(ctx)) {
        n = json_array_size(ctx);
        p = ngx_slprintf(p, last, "It is a list of %uz items", n);

        if (n) {
            p = ngx_slprintf(p, last, "; lengths of the first ones:");

            json_array_foreach(ctx, i, item) {
                if (i == NGX_HTTP_RLM_PROMPT_CHUNKS) {
                    p = ngx_slprintf(p, last, " ...");
                    break;
                }

                len = json_is_string(item) ? json_string_length(item)
                      : json_is_array(item) ? json_array_size(item)
                      : json_is_object(item) ? json_object_size(item) : 1;

                p = ngx_slprintf(p, last, "%s %uz", i ? "," : "", len);
            }
        }

        p = ngx_slprintf(p, last, ".");

    } else if (json_is_object(ctx)) {
        p = ngx_slprintf(p, last, "It is a dict with %uz keys.",
                         json_object_size(ctx));

    } else {
        p = ngx_slprintf(p, last, "It is a %s.",
                         json_is_number(ctx) ? "number"
                         : json_is_boolean(ctx) ? "bool" : "None");
    }

    out->len = p - out->data;
}
