
/*
 * ngx_rlm: reading a root model's response (see ngx_http_rlm_parse.h).
 */


#include <stdio.h>
#include <string.h>

#include "ngx_http_rlm_parse.h"


typedef enum {
    NGX_HTTP_RLM_FENCE_NONE = 0,
    NGX_HTTP_RLM_FENCE_CLOSE,           /* ``` and nothing else */
    NGX_HTTP_RLM_FENCE_REPL,            /* ```repl */
    NGX_HTTP_RLM_FENCE_OTHER            /* ```python, ```json ... */
} ngx_http_rlm_fence_e;


static ngx_http_rlm_fence_e ngx_http_rlm_fence(const unsigned char *p,
    const unsigned char *end);
static int ngx_http_rlm_blank(const unsigned char *p,
    const unsigned char *end);
static const unsigned char *ngx_http_rlm_marker(const unsigned char *text,
    size_t len, const char *name, size_t name_len,
    ngx_http_rlm_slice_t *value);
static size_t ngx_http_rlm_utf8_len(const unsigned char *s, size_t left);


void
ngx_http_rlm_parse_response(const unsigned char *text, size_t len,
    ngx_http_rlm_response_t *res)
{
    memset(res, 0, sizeof(ngx_http_rlm_response_t));

    (void) ngx_http_rlm_parse_blocks(text, len, res);

    /* markers count only in a response that asks to run nothing */

    if (res->nblocks == 0 && res->dropped == 0 && !res->unterminated) {
        res->final = ngx_http_rlm_parse_final(text, len, &res->final_value);
    }
}


size_t
ngx_http_rlm_parse_blocks(const unsigned char *text, size_t len,
    ngx_http_rlm_response_t *res)
{
    enum { OUT, IN_REPL, IN_OTHER }  state;

    const unsigned char   *p, *end, *eol, *line_end, *code, *code_end;
    ngx_http_rlm_fence_e   fence;

    res->nblocks = 0;
    res->dropped = 0;
    res->unterminated = 0;

    state = OUT;
    code = NULL;
    p = text;
    end = text + len;

    while (p < end) {
        eol = memchr(p, '\n', end - p);
        if (eol == NULL) {
            eol = end;
        }

        line_end = eol;
        if (line_end > p && line_end[-1] == '\r') {
            line_end--;
        }

        fence = ngx_http_rlm_fence(p, line_end);

        switch (state) {

        case OUT:
            if (fence == NGX_HTTP_RLM_FENCE_REPL) {
                state = IN_REPL;
                code = (eol < end) ? eol + 1 : end;

            } else if (fence != NGX_HTTP_RLM_FENCE_NONE) {
                state = IN_OTHER;           /* a bare ``` opens one too */
            }

            break;

        case IN_REPL:
            if (fence != NGX_HTTP_RLM_FENCE_CLOSE) {
                break;
            }

            /* the code ends before the line break ahead of the fence */

            code_end = p;

            if (code_end > code && code_end[-1] == '\n') {
                code_end--;

                if (code_end > code && code_end[-1] == '\r') {
                    code_end--;
                }
            }

            if (res->nblocks < NGX_HTTP_RLM_PARSE_MAX_BLOCKS) {
                res->blocks[res->nblocks].data = code;
                res->blocks[res->nblocks].len = code_end - code;
                res->nblocks++;

            } else {
                res->dropped++;
            }

            state = OUT;
            break;

        case IN_OTHER:
            if (fence == NGX_HTTP_RLM_FENCE_CLOSE) {
                state = OUT;
            }

            break;
        }

        p = (eol < end) ? eol + 1 : end;
    }

    if (state == IN_REPL) {
        res->unterminated = 1;
    }

    return res->nblocks;
}


/*
 * The text of a response without its repl blocks: the fence lines and
 * the code between them are left out, an unterminated block runs to the
 * end.  Other fences stay.  Spaces and line breaks around what is left
 * are trimmed (not the first line's indentation).  out has room for len
 * bytes; returns the length written.
 */

size_t
ngx_http_rlm_parse_prose(const unsigned char *text, size_t len,
    unsigned char *out)
{
    int                       in_repl, in_other;
    unsigned char            *o;
    const unsigned char      *p, *end, *eol, *line_end, *next, *s;
    ngx_http_rlm_fence_e      fence;
    ngx_http_rlm_response_t   check;

    in_repl = 0;
    in_other = 0;
    o = out;
    p = text;
    end = text + len;

    while (p < end) {
        eol = memchr(p, '\n', end - p);
        next = (eol == NULL) ? end : eol + 1;
        line_end = (eol == NULL) ? end : eol;

        if (line_end > p && line_end[-1] == '\r') {
            line_end--;
        }

        fence = ngx_http_rlm_fence(p, line_end);

        if (in_repl) {
            in_repl = (fence != NGX_HTTP_RLM_FENCE_CLOSE);

        } else if (!in_other && fence == NGX_HTTP_RLM_FENCE_REPL) {
            in_repl = 1;

        } else {
            if (in_other) {
                in_other = (fence != NGX_HTTP_RLM_FENCE_CLOSE);

            } else if (fence != NGX_HTTP_RLM_FENCE_NONE) {
                in_other = 1;
            }

            memcpy(o, p, next - p);
            o += next - p;
        }

        p = next;
    }

    /*
     * Trim: blank lines at the start (the first line keeps its own
     * indentation, or a "\t```repl" line would become a fence), and
     * spaces and line breaks at the end.
     */

    s = out;

    for (p = out; p < o && (*p == ' ' || *p == '\t' || *p == '\r'
                            || *p == '\n'); p++)
    {
        if (*p == '\n') {
            s = p + 1;
        }
    }

    if (p == o) {
        s = o;
    }

    while (o > s && (o[-1] == ' ' || o[-1] == '\t' || o[-1] == '\r'
                     || o[-1] == '\n'))
    {
        o--;
    }

    if (s != out) {
        memmove(out, s, o - s);
    }

    /*
     * Trimming may change how an edge line reads ("```repl\r\t" loses
     * its tab, then its CR): what is left must not hold a repl block.
     */

    check.nblocks = 0;

    if (ngx_http_rlm_parse_blocks(out, o - s, &check) || check.unterminated
        || check.dropped)
    {
        return 0;
    }

    return o - s;
}


static ngx_http_rlm_fence_e
ngx_http_rlm_fence(const unsigned char *p, const unsigned char *end)
{
    size_t  n;

    for (n = 0; n < 3 && p < end && *p == ' '; n++) {
        p++;
    }

    if (end - p < 3 || memcmp(p, "```", 3) != 0) {
        return NGX_HTTP_RLM_FENCE_NONE;
    }

    p += 3;

    /* a longer run of backticks is still a plain fence */

    while (p < end && *p == '`') {
        p++;
    }

    if (ngx_http_rlm_blank(p, end)) {
        return NGX_HTTP_RLM_FENCE_CLOSE;
    }

    if (end - p >= 4 && memcmp(p, "repl", 4) == 0
        && ngx_http_rlm_blank(p + 4, end))
    {
        return NGX_HTTP_RLM_FENCE_REPL;
    }

    return NGX_HTTP_RLM_FENCE_OTHER;
}


static int
ngx_http_rlm_blank(const unsigned char *p, const unsigned char *end)
{
    for ( /* void */ ; p < end; p++) {
        if (*p != ' ' && *p != '\t') {
            return 0;
        }
    }

    return 1;
}


ngx_http_rlm_final_e
ngx_http_rlm_parse_final(const unsigned char *text, size_t len,
    ngx_http_rlm_slice_t *value)
{
    const unsigned char  *v, *last;

    value->data = NULL;
    value->len = 0;

    if (ngx_http_rlm_marker(text, len, "FINAL_VAR(", 10, value) != NULL) {

        /* FINAL_VAR("x") and FINAL_VAR('x') name x as well */

        v = value->data;
        last = v + value->len;

        if (last - v >= 2
            && (*v == '"' || *v == '\'') && last[-1] == *v)
        {
            v++;
            last--;

            while (v < last && (*v == ' ' || *v == '\t')) {
                v++;
            }

            while (last > v && (last[-1] == ' ' || last[-1] == '\t')) {
                last--;
            }
        }

        value->data = v;
        value->len = last - v;

        if (value->len) {
            return NGX_HTTP_RLM_FINAL_VAR;
        }
    }

    if (ngx_http_rlm_marker(text, len, "FINAL(", 6, value) != NULL) {
        return NGX_HTTP_RLM_FINAL_TEXT;
    }

    value->data = NULL;
    value->len = 0;

    return NGX_HTTP_RLM_FINAL_NONE;
}


/*
 * Finds the first line that starts (after spaces or tabs) with name and
 * returns the trimmed argument up to the matching parenthesis.
 */

static const unsigned char *
ngx_http_rlm_marker(const unsigned char *text, size_t len, const char *name,
    size_t name_len, ngx_http_rlm_slice_t *value)
{
    size_t                depth;
    const unsigned char  *p, *end, *arg, *close, *q;

    end = text + len;
    p = text;

    while (p < end) {

        /* p is at the start of a line */

        q = p;

        while (q < end && (*q == ' ' || *q == '\t')) {
            q++;
        }

        if ((size_t) (end - q) >= name_len
            && memcmp(q, name, name_len) == 0)
        {
            arg = q + name_len;
            close = NULL;
            depth = 1;

            for (q = arg; q < end; q++) {
                if (*q == '(') {
                    depth++;

                } else if (*q == ')' && --depth == 0) {
                    close = q;
                    break;
                }
            }

            if (close == NULL) {
                /* unbalanced, as in "FINAL(sad :( )": take the last ")" */

                for (q = end; q > arg; q--) {
                    if (q[-1] == ')') {
                        close = q - 1;
                        break;
                    }
                }
            }

            if (close != NULL) {
                while (arg < close
                       && (*arg == ' ' || *arg == '\t' || *arg == '\r'
                           || *arg == '\n'))
                {
                    arg++;
                }

                q = close;

                while (q > arg
                       && (q[-1] == ' ' || q[-1] == '\t' || q[-1] == '\r'
                           || q[-1] == '\n'))
                {
                    q--;
                }

                value->data = arg;
                value->len = q - arg;

                return arg;
            }
        }

        q = memchr(p, '\n', end - p);
        p = q ? q + 1 : end;
    }

    return NULL;
}


size_t
ngx_http_rlm_truncate_len(const unsigned char *s, size_t len,
    size_t max_chars, size_t *cut_chars)
{
    size_t  i, n, chars, keep;

    chars = 0;
    keep = len;

    for (i = 0; i < len; i += n) {
        if (chars == max_chars) {
            keep = i;
        }

        n = ngx_http_rlm_utf8_len(s + i, len - i);
        chars++;
    }

    *cut_chars = (chars > max_chars) ? chars - max_chars : 0;

    return (chars > max_chars) ? keep : len;
}


size_t
ngx_http_rlm_truncate_marker(unsigned char *buf, size_t cut_chars)
{
    int  n;

    n = snprintf((char *) buf, NGX_HTTP_RLM_TRUNC_MARKER_MAX,
                 "\n[output truncated: %zu more characters not shown]",
                 cut_chars);

    return (n < 0) ? 0 : (size_t) n;
}


/* out needs room for len + NGX_HTTP_RLM_TRUNC_MARKER_MAX bytes */

size_t
ngx_http_rlm_truncate(const unsigned char *s, size_t len, size_t max_chars,
    unsigned char *out)
{
    size_t  keep, cut;

    keep = ngx_http_rlm_truncate_len(s, len, max_chars, &cut);

    if (keep) {
        memcpy(out, s, keep);
    }

    if (cut == 0) {
        return keep;
    }

    return keep + ngx_http_rlm_truncate_marker(out + keep, cut);
}


/* the length of the valid UTF-8 sequence at s, or 1 for an invalid byte */

static size_t
ngx_http_rlm_utf8_len(const unsigned char *s, size_t left)
{
    size_t         need, i;
    unsigned char  c, lo, hi;

    c = s[0];
    lo = 0x80;
    hi = 0xbf;

    if (c < 0x80) {
        return 1;

    } else if (c >= 0xc2 && c <= 0xdf) {
        need = 1;

    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;

        if (c == 0xe0) {
            lo = 0xa0;                      /* no overlong forms */

        } else if (c == 0xed) {
            hi = 0x9f;                      /* no surrogates */
        }

    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;

        if (c == 0xf0) {
            lo = 0x90;

        } else if (c == 0xf4) {
            hi = 0x8f;                      /* nothing above U+10FFFF */
        }

    } else {
        return 1;
    }

    if (left <= need) {
        return 1;
    }

    for (i = 1; i <= need; i++) {
        if (s[i] < lo || s[i] > hi) {
            return 1;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    return need + 1;
}
