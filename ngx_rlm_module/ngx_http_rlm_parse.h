
/*
 * ngx_rlm: reading a root model's response.
 *
 * Plain C, no nginx headers, so that the unit tests and the fuzzer build
 * it alone.  All results point into the caller's text; nothing is copied.
 *
 * Code blocks.  A block opens with a line "```repl" (up to three spaces
 * of indentation, the tag exactly "repl", then only spaces or tabs) and
 * closes with a line "```" (same indentation rule, then only spaces or
 * tabs).  Lines end in LF or CRLF.  Other fences (```python, ```replit,
 * ```) are skipped as a whole, so a "```repl" line inside them does not
 * open a block.  A repl block that is never closed is not returned: the
 * response was most likely cut off (max_tokens) and half a program must
 * not run; the result reports it so the loop can tell the model.
 *
 * Final answer markers (legacy scheme).  FINAL_VAR(name) and FINAL(text)
 * count only at the start of a line (after spaces or tabs).  The argument
 * runs to the matching parenthesis, so nested parentheses are kept and it
 * may span lines; without a match it runs to the last ")" of the text.
 * FINAL_VAR is looked for first; quotes around its name are removed.
 * Markers are reported only when the response has no repl block.
 *
 * Output truncation.  Counts characters as UTF-8 code points (an invalid
 * byte counts as one) and never cuts inside a sequence.
 */


#ifndef _NGX_HTTP_RLM_PARSE_H_INCLUDED_
#define _NGX_HTTP_RLM_PARSE_H_INCLUDED_


#include <stddef.h>


#define NGX_HTTP_RLM_PARSE_MAX_BLOCKS   64

/* room needed for the truncation marker */
#define NGX_HTTP_RLM_TRUNC_MARKER_MAX   80


typedef enum {
    NGX_HTTP_RLM_FINAL_NONE = 0,
    NGX_HTTP_RLM_FINAL_TEXT,            /* FINAL(text) */
    NGX_HTTP_RLM_FINAL_VAR              /* FINAL_VAR(name) */
} ngx_http_rlm_final_e;


typedef struct {
    const unsigned char        *data;
    size_t                      len;
} ngx_http_rlm_slice_t;


typedef struct {
    ngx_http_rlm_slice_t        blocks[NGX_HTTP_RLM_PARSE_MAX_BLOCKS];
    size_t                      nblocks;
    size_t                      dropped;        /* blocks beyond the max */
    unsigned                    unterminated:1; /* a repl fence not closed */

    ngx_http_rlm_final_e        final;
    ngx_http_rlm_slice_t        final_value;
} ngx_http_rlm_response_t;


void ngx_http_rlm_parse_response(const unsigned char *text, size_t len,
    ngx_http_rlm_response_t *res);

size_t ngx_http_rlm_parse_blocks(const unsigned char *text, size_t len,
    ngx_http_rlm_response_t *res);
size_t ngx_http_rlm_parse_prose(const unsigned char *text, size_t len,
    unsigned char *out);
ngx_http_rlm_final_e ngx_http_rlm_parse_final(const unsigned char *text,
    size_t len, ngx_http_rlm_slice_t *value);

size_t ngx_http_rlm_truncate_len(const unsigned char *s, size_t len,
    size_t max_chars, size_t *cut_chars);
size_t ngx_http_rlm_truncate_marker(unsigned char *buf, size_t cut_chars);
size_t ngx_http_rlm_truncate(const unsigned char *s, size_t len,
    size_t max_chars, unsigned char *out);


#endif /* _NGX_HTTP_RLM_PARSE_H_INCLUDED_ */
