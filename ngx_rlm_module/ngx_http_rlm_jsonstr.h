
/*
 * ngx_rlm: one large string member out of a JSON object, fast.
 *
 * A completion request may carry a context of hundreds of megabytes as a
 * JSON string.  A general parser builds it byte by byte (about 50 MB/s
 * here); this finds the member by skipping the rest of the document and
 * decodes the string in place, at memory speed, so the request is held
 * once.  The caller parses what is left (small) as usual.
 *
 * Plain C without nginx headers, like the response parser, so that the
 * unit tests and the fuzzer build it alone.
 */


#ifndef _NGX_HTTP_RLM_JSONSTR_H_INCLUDED_
#define _NGX_HTTP_RLM_JSONSTR_H_INCLUDED_


#include <stddef.h>


/*
 * buf holds a JSON document.  If it is an object with exactly one member
 * named key (a plain key, without escapes) whose value is a valid string,
 * the string is decoded in place and 0 is returned with:
 *   *value, *value_len   the decoded text, inside buf;
 *   *cut, *cut_len        the span of buf that held the value (from its
 *                         opening quote to its closing one), to be
 *                         replaced by another value before the rest is
 *                         parsed.
 * Returns -1, leaving buf untouched, when there is no such member, its
 * value is not a string, or the document is malformed as far as it was
 * read: the caller then parses the whole document, which reports errors.
 */
int ngx_http_rlm_json_take_string(unsigned char *buf, size_t len,
    const char *key, unsigned char **value, size_t *value_len,
    size_t *cut, size_t *cut_len);


/* what is known of an array or object without parsing it */

#define NGX_HTTP_RLM_JSON_MEASURED  16

typedef struct {
    int                         object;         /* {} rather than [] */
    size_t                      items;          /* top-level items */
    size_t                      measured;       /* lengths[] filled */
    size_t                      lengths[NGX_HTTP_RLM_JSON_MEASURED];
} ngx_http_rlm_json_shape_t;


/*
 * The same for a member whose value is an array or an object: its text
 * is left as it is (the sandbox's JSON parser reads it, and reports what
 * is wrong with it), *cut and *cut_len give its span, and *shape how many
 * items it has and the sizes of the first ones as Python's len() sees
 * them.  Returns -1 as above.
 */
int ngx_http_rlm_json_take_container(unsigned char *buf, size_t len,
    const char *key, ngx_http_rlm_json_shape_t *shape, size_t *cut,
    size_t *cut_len);


#endif /* _NGX_HTTP_RLM_JSONSTR_H_INCLUDED_ */
