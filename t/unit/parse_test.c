
/*
 * Unit tests of the response parser (ngx_http_rlm_parse.c), the SSE
 * parser (ngx_http_rlm_sse.c) and the context string extractor
 * (ngx_http_rlm_jsonstr.c).  Prints TAP; t/unit_parse.t runs it.
 */


#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_rlm_parse.h"
#include "ngx_http_rlm_sse.h"
#include "ngx_http_rlm_jsonstr.h"


static int  tests;
static int  failed;


static void
ok(int cond, const char *name)
{
    tests++;

    if (!cond) {
        failed++;
    }

    printf("%sok %d - %s\n", cond ? "" : "not ", tests, name);
}


static int
slice_is(ngx_http_rlm_slice_t *s, const char *want)
{
    size_t  n;

    n = strlen(want);

    if (s->len != n || memcmp(s->data, want, n) != 0) {
        printf("# got \"%.*s\", want \"%s\"\n", (int) s->len,
               (const char *) s->data, want);
        return 0;
    }

    return 1;
}


static void
parse(const char *text, ngx_http_rlm_response_t *res)
{
    ngx_http_rlm_parse_response((const unsigned char *) text, strlen(text),
                                res);
}


static void
test_blocks(void)
{
    ngx_http_rlm_response_t  r;

    parse("Let me look.\n```repl\nprint(1)\nx = 2\n```\nThen more.", &r);
    ok(r.nblocks == 1 && slice_is(&r.blocks[0], "print(1)\nx = 2"),
       "one repl block, code without fences");

    parse("```repl\r\nprint('crlf')\r\ny = 1\r\n```\r\n", &r);
    ok(r.nblocks == 1 && slice_is(&r.blocks[0], "print('crlf')\r\ny = 1"),
       "CRLF fences are recognised, code ends before the CRLF");

    parse("a\n```repl\nfirst()\n```\nb\n```repl\nsecond()\n```\n"
          "```repl\nthird()\n```", &r);
    ok(r.nblocks == 3
       && slice_is(&r.blocks[0], "first()")
       && slice_is(&r.blocks[1], "second()")
       && slice_is(&r.blocks[2], "third()"),
       "several blocks, in order, last fence at end of text");

    parse("```python\nprint('py')\n```\n```replit\nx\n```\n```\nplain\n```\n"
          "```REPL\nupper\n```\n", &r);
    ok(r.nblocks == 0 && !r.unterminated,
       "python, replit, untagged and REPL fences are ignored");

    parse("```python\n```repl\nnot_a_block()\n```\nprint(2)\n```\n", &r);
    ok(r.nblocks == 0,
       "a ```repl line inside another fence does not open a block");

    parse("```repl\ns = '''\n```python\n'''\n```\n", &r);
    ok(r.nblocks == 1 && slice_is(&r.blocks[0], "s = '''\n```python\n'''"),
       "```python inside a repl block does not close it");

    parse("text\n```repl\nhalf = (1 +\n", &r);
    ok(r.nblocks == 0 && r.unterminated,
       "unterminated repl block: not run, reported");

    parse("   ```repl\nindented3()\n   ```\n    ```repl\nindented4()\n```\n",
          &r);
    ok(r.nblocks == 1 && slice_is(&r.blocks[0], "indented3()"),
       "fences indented by up to three spaces only");

    parse("```repl  \t\nws()\n```   \n", &r);
    ok(r.nblocks == 1 && slice_is(&r.blocks[0], "ws()"),
       "spaces after the tag and the closing fence");

    parse("inline ```repl\nnope()\n```\n", &r);
    ok(r.nblocks == 0, "a fence must start its line");

    parse("```repl\n```\n", &r);
    ok(r.nblocks == 1 && r.blocks[0].len == 0, "an empty block is returned");

    parse("```repl\n\n\nspaced()\n\n```", &r);
    ok(r.nblocks == 1 && slice_is(&r.blocks[0], "\n\nspaced()\n"),
       "blank lines inside a block are kept");

    parse("````\n```repl\nin4()\n```\n````\n", &r);
    ok(r.nblocks == 0,
       "a four-backtick line is a plain fence: its content is skipped");
}


static void
test_final(void)
{
    ngx_http_rlm_response_t  r;

    parse("I know it.\nFINAL(42)\n", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_TEXT && slice_is(&r.final_value, "42"),
       "FINAL(text)");

    parse("FINAL(f(x) = (a + b) * g(y))", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_TEXT
       && slice_is(&r.final_value, "f(x) = (a + b) * g(y)"),
       "nested parentheses are kept");

    parse("Done.\nFINAL_VAR(result)", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_VAR
       && slice_is(&r.final_value, "result"), "FINAL_VAR(name)");

    parse("FINAL(the text)\nFINAL_VAR(var)\n", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_VAR && slice_is(&r.final_value, "var"),
       "FINAL_VAR wins over an earlier FINAL");

    parse("FINAL_VAR( \"quoted\" )", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_VAR
       && slice_is(&r.final_value, "quoted"), "quotes around a name go");

    parse("I will call FINAL(x) later.", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_NONE, "not at the start of a line");

    parse("text\n  \tFINAL(indented)", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_TEXT
       && slice_is(&r.final_value, "indented"),
       "spaces before the marker are allowed");

    parse("```repl\nx = 1\n```\nFINAL(too early)\n", &r);
    ok(r.nblocks == 1 && r.final == NGX_HTTP_RLM_FINAL_NONE,
       "markers are ignored in a response with a repl block");

    parse("```repl\nx = (1\nFINAL(cut)\n", &r);
    ok(r.unterminated && r.final == NGX_HTTP_RLM_FINAL_NONE,
       "markers are ignored after an unterminated block");

    parse("FINAL(line one\nline two (with parens)\n)", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_TEXT
       && slice_is(&r.final_value, "line one\nline two (with parens)"),
       "FINAL spanning lines");

    parse("FINAL(sad :( but done)", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_TEXT
       && slice_is(&r.final_value, "sad :( but done"),
       "unbalanced: up to the last parenthesis");

    parse("FINAL(never closed", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_NONE, "no closing parenthesis: none");

    parse("FINAL(yes)\r\n", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_TEXT && slice_is(&r.final_value, "yes"),
       "CRLF after the marker");

    parse("FINAL_VAR()\nFINAL(fallback)", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_TEXT
       && slice_is(&r.final_value, "fallback"),
       "an empty FINAL_VAR falls back to FINAL");

    parse("FINAL_VARIABLE(x)", &r);
    ok(r.final == NGX_HTTP_RLM_FINAL_NONE, "FINAL_VARIABLE is no marker");
}


static int
trunc_is(const char *in, size_t max, const char *want)
{
    size_t          n;
    unsigned char  *out;
    int             rc;

    out = malloc(strlen(in) + NGX_HTTP_RLM_TRUNC_MARKER_MAX);
    if (out == NULL) {
        return 0;
    }

    n = ngx_http_rlm_truncate((const unsigned char *) in, strlen(in), max,
                              out);

    rc = (n == strlen(want) && memcmp(out, want, n) == 0);

    if (!rc) {
        printf("# got \"%.*s\", want \"%s\"\n", (int) n, out, want);
    }

    free(out);

    return rc;
}


static void
test_truncate(void)
{
    size_t  cut, keep;

    ok(trunc_is("short", 5, "short"), "no marker at the limit");

    ok(trunc_is("abcdefghij", 4,
                "abcd\n[output truncated: 6 more characters not shown]"),
       "ASCII: kept prefix and how much was cut");

    /* "héllo wörld": é and ö are two bytes each */
    ok(trunc_is("h\xc3\xa9llo w\xc3\xb6rld", 2,
                "h\xc3\xa9\n[output truncated: 9 more characters not shown]"),
       "UTF-8: counts characters, keeps whole sequences");

    keep = ngx_http_rlm_truncate_len((const unsigned char *)
                                     "a\xf0\x9f\x98\x80" "b", 6, 2, &cut);
    ok(keep == 5 && cut == 1, "a 4-byte character is kept whole");

    keep = ngx_http_rlm_truncate_len((const unsigned char *)
                                     "\xff\xfe\xc3" "abc", 6, 2, &cut);
    ok(keep == 2 && cut == 4, "invalid bytes count one each");

    keep = ngx_http_rlm_truncate_len((const unsigned char *)
                                     "\xe2\x82", 2, 1, &cut);
    ok(keep == 1 && cut == 1, "a cut-off sequence is bytes, not a char");

    ok(trunc_is("xyz", 0,
                "\n[output truncated: 3 more characters not shown]"),
       "max 0 keeps nothing");
}


static int
prose_is(const char *text, const char *want)
{
    size_t          n;
    unsigned char   out[256];

    n = ngx_http_rlm_parse_prose((const unsigned char *) text,
                                 strlen(text), out);

    if (n != strlen(want) || memcmp(out, want, n) != 0) {
        printf("# got \"%.*s\", want \"%s\"\n", (int) n, out, want);
        return 0;
    }

    return 1;
}


static void
test_prose(void)
{
    ok(prose_is("just text\n", "just text"), "prose: text alone, trimmed");

    ok(prose_is("I think 7.\n```repl\nx = 7\n```\nDone.", "I think 7.\n"
                "Done."), "prose: a repl block and its fences go");

    ok(prose_is("```repl\nprint(1)\n```\n", ""), "prose: only code");

    ok(prose_is("a\n```python\n```repl\nx\n```\nb\n```repl\ny",
                "a\n```python\n```repl\nx\n```\nb"),
       "prose: other fences stay, an unclosed repl block runs to the end");

    ok(prose_is("  ```repl\r\nx\r\n   ```\r\n\r\nafter\r\n", "after"),
       "prose: indented fences and CRLF");
}


typedef struct {
    char   events[16][64];
    int    n;
    int    stop_after;
} sse_log_t;


static int
sse_collect(void *ctx, const unsigned char *data, size_t len)
{
    sse_log_t  *log = ctx;

    if (log->n < 16) {
        snprintf(log->events[log->n], 64, "%.*s", (int) len, data);
    }

    log->n++;

    return (log->stop_after && log->n >= log->stop_after) ? 1 : 0;
}


static void
test_sse(void)
{
    size_t              i;
    sse_log_t           log;
    const char         *s;
    ngx_http_rlm_sse_t  p;

    memset(&log, 0, sizeof(log));
    ngx_http_rlm_sse_init(&p, 1024, sse_collect, &log);

    s = ": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\nid: 7\ndata:two\n"
        "data: lines\n\ndata\n\n";

    for (i = 0; i < strlen(s); i++) {
        ngx_http_rlm_sse_feed(&p, (const unsigned char *) s + i, 1);
    }

    ok(log.n == 3 && strcmp(log.events[0], "{\"a\":1}") == 0
       && strcmp(log.events[1], "two\nlines") == 0
       && strcmp(log.events[2], "") == 0,
       "SSE byte by byte: comments skipped, data lines joined");

    ngx_http_rlm_sse_free(&p);

    memset(&log, 0, sizeof(log));
    ngx_http_rlm_sse_init(&p, 1024, sse_collect, &log);
    ngx_http_rlm_sse_feed(&p, (const unsigned char *) "data: one\r", 10);
    ngx_http_rlm_sse_feed(&p, (const unsigned char *) "\n\r", 2);
    ngx_http_rlm_sse_feed(&p, (const unsigned char *) "\ndata: two\r\r", 12);
    ok(log.n == 2 && strcmp(log.events[0], "one") == 0
       && strcmp(log.events[1], "two") == 0,
       "SSE: CRLF split between pieces, CR-only lines");
    ngx_http_rlm_sse_free(&p);

    memset(&log, 0, sizeof(log));
    ngx_http_rlm_sse_init(&p, 1024, sse_collect, &log);
    ngx_http_rlm_sse_feed(&p, (const unsigned char *) "data: [DONE]", 12);
    ok(log.n == 0, "SSE: nothing before the end of the event");
    ngx_http_rlm_sse_finish(&p);
    ok(log.n == 1 && strcmp(log.events[0], "[DONE]") == 0,
       "SSE: finish delivers an event without a blank line");
    ngx_http_rlm_sse_free(&p);

    memset(&log, 0, sizeof(log));
    ngx_http_rlm_sse_init(&p, 16, sse_collect, &log);
    ok(ngx_http_rlm_sse_feed(&p, (const unsigned char *)
                             "data: 0123456789abcdefgh\n\n", 26)
       == NGX_HTTP_RLM_SSE_ERROR && log.n == 0,
       "SSE: a line above the bound is an error");
    ngx_http_rlm_sse_free(&p);

    memset(&log, 0, sizeof(log));
    log.stop_after = 1;
    ngx_http_rlm_sse_init(&p, 1024, sse_collect, &log);
    ok(ngx_http_rlm_sse_feed(&p, (const unsigned char *)
                             "data: a\n\ndata: b\n\n", 18)
       == NGX_HTTP_RLM_SSE_STOP && log.n == 1,
       "SSE: the handler can stop the parser");
    ngx_http_rlm_sse_free(&p);
}


/* take "context" out of doc: the decoded value and what remains */

static int
take(const char *doc, const char *want_value, const char *want_rest)
{
    int             rc;
    char            rest[512];
    size_t          len, vlen, cut, cut_len;
    unsigned char   buf[512], *v;

    len = strlen(doc);
    memcpy(buf, doc, len);

    rc = ngx_http_rlm_json_take_string(buf, len, "context", &v, &vlen, &cut,
                                       &cut_len);

    if (want_value == NULL) {
        if (rc == 0 || memcmp(buf, doc, len) != 0) {
            printf("# \"%s\": taken, or the buffer changed\n", doc);
            return 0;
        }

        return 1;
    }

    if (rc != 0) {
        printf("# \"%s\": not taken\n", doc);
        return 0;
    }

    if (vlen != strlen(want_value) || memcmp(v, want_value, vlen) != 0) {
        printf("# \"%s\": value \"%.*s\"\n", doc, (int) vlen, v);
        return 0;
    }

    /* what the caller parses: the document with "" for the value */
    snprintf(rest, sizeof(rest), "%.*s\"\"%s", (int) cut, doc,
             doc + cut + cut_len);

    if (strcmp(rest, want_rest) != 0) {
        printf("# \"%s\": rest \"%s\"\n", doc, rest);
        return 0;
    }

    return 1;
}


static void
test_jsonstr(void)
{
    ok(take("{\"context\":\"abc\"}", "abc", "{\"context\":\"\"}"),
       "context: a plain string");
    ok(take(" {\"a\": 1, \"context\" : \"x\\ny\\t\\\"q\\\" \\\\ \\/\", "
            "\"b\": [1, {\"c\": null}]}\n",
            "x\ny\t\"q\" \\ /",
            " {\"a\": 1, \"context\" : \"\", \"b\": [1, {\"c\": null}]}\n"),
       "context: escapes decoded, the other members kept");
    ok(take("{\"context\":\"\\u00e9\\u20ac\\ud83d\\ude00\\u0041\"}",
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" "A",
            "{\"context\":\"\"}"),
       "context: \\u escapes and a surrogate pair to UTF-8");
    ok(take("{\"rlm\":{\"context\":\"inner\"},\"m\":\"}{[\\\"\","
            "\"context\":\"outer\"}", "outer",
            "{\"rlm\":{\"context\":\"inner\"},\"m\":\"}{[\\\"\","
            "\"context\":\"\"}"),
       "context: only the top-level member; brackets inside strings skipped");
    ok(take("{\"messages\":[]}", NULL, NULL),
       "context: absent, buffer untouched");
    ok(take("{\"context\":[\"a\"]}", NULL, NULL),
       "context: not a string");
    ok(take("{\"context\":\"a\",\"context\":\"b\"}", NULL, NULL),
       "context: twice is left to the parser (it refuses)");
    ok(take("{\"con\\u0074ext\":\"a\"}", NULL, NULL),
       "context: an escaped key is not matched");
    ok(take("{\"context\":\"bad \\q escape\"}", NULL, NULL),
       "context: a bad escape is left to the parser, buffer untouched");
    ok(take("{\"context\":\"\\ud800 alone\"}", NULL, NULL),
       "context: a lone surrogate is left to the parser");
    ok(take("{\"context\":\"raw \x01 control\"}", NULL, NULL),
       "context: a raw control character is left to the parser");
    ok(take("{\"context\":\"unterminated}", NULL, NULL),
       "context: an unterminated string");
    ok(take("{\"context\":\"a\"} trailing", NULL, NULL),
       "context: text after the object");
    ok(take("[\"context\",\"a\"]", NULL, NULL),
       "context: not an object");
    ok(take("{\"a\": tru\"context\":\"x\"}", NULL, NULL),
       "context: a broken member before it stops the search");
}


/* the shape of a container "context" and the span left for the sandbox */

static int
shape_is(const char *doc, int object, size_t items, size_t measured,
    const size_t *lengths, const char *want_span)
{
    size_t                      i, len, cut, cut_len;
    unsigned char               buf[512];
    ngx_http_rlm_json_shape_t   sh;

    len = strlen(doc);
    memcpy(buf, doc, len);

    if (ngx_http_rlm_json_take_container(buf, len, "context", &sh, &cut,
                                         &cut_len)
        != 0)
    {
        printf("# \"%s\": not taken\n", doc);
        return want_span == NULL;
    }

    if (want_span == NULL) {
        printf("# \"%s\": taken\n", doc);
        return 0;
    }

    if (memcmp(buf, doc, len) != 0 || cut_len != strlen(want_span)
        || memcmp(buf + cut, want_span, cut_len) != 0)
    {
        printf("# \"%s\": span \"%.*s\"\n", doc, (int) cut_len,
               buf + cut);
        return 0;
    }

    if (sh.object != object || sh.items != items || sh.measured != measured)
    {
        printf("# \"%s\": object %d items %zu measured %zu\n", doc,
               sh.object, sh.items, sh.measured);
        return 0;
    }

    for (i = 0; i < measured; i++) {
        if (sh.lengths[i] != lengths[i]) {
            printf("# \"%s\": length %zu is %zu\n", doc, i, sh.lengths[i]);
            return 0;
        }
    }

    return 1;
}


static void
test_jsonshape(void)
{
    size_t  l1[] = { 3, 0, 7 };
    size_t  l2[] = { 3, 1, 0, 1 };
    size_t  many[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };

    ok(shape_is("{\"model\":\"m\",\"context\":[\"abc\", \"\", "
                "\"a,]}[\\\"b\"] }", 0, 3, 3, l1,
                "[\"abc\", \"\", \"a,]}[\\\"b\"]"),
       "container: a list of strings, brackets inside strings ignored");
    ok(shape_is("{\"context\": [[1, 2, [3]], {\"k\": 1}, [ ], true] }", 0,
                4, 4, l2, "[[1, 2, [3]], {\"k\": 1}, [ ], true]"),
       "container: nested items measured by their own item counts");
    ok(shape_is("{\"context\":{\"a\": \"xxxxx\", \"b\": [1,2]}}", 1, 2, 0,
                NULL, "{\"a\": \"xxxxx\", \"b\": [1,2]}"),
       "container: an object counts its members");
    ok(shape_is("{\"context\":[]}", 0, 0, 0, NULL, "[]"),
       "container: empty");
    ok(shape_is("{\"context\":[1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8]}", 0, 18,
                16, many, "[1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8]"),
       "container: 18 items, the first 16 measured");
    ok(shape_is("{\"context\":\"text\"}", 0, 0, 0, NULL, NULL),
       "container: a string is not one");
    ok(shape_is("{\"context\":[1,2]", 0, 0, 0, NULL, NULL),
       "container: an unclosed object is left to the parser");
}


int
main(void)
{
    test_blocks();
    test_final();
    test_truncate();
    test_prose();
    test_sse();
    test_jsonstr();
    test_jsonshape();

    printf("1..%d\n", tests);

    return failed ? 1 : 0;
}
