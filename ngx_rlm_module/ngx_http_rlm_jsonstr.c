
/*
 * ngx_rlm: one large string member out of a JSON object, fast (see the
 * header).  Two passes over the string: the first checks it and finds its
 * end without writing, the second decodes it in place (a decoded string
 * is never longer than its JSON text).  Everything else is only skipped:
 * the caller's parser reads it afterwards and reports what is wrong.
 */


#include <stdint.h>
#include <string.h>

#include "ngx_http_rlm_jsonstr.h"


typedef const unsigned char  rlm_cuchar;


/* per byte of a 64-bit word: 0x01 in each byte, 0x80 in each byte */
#define RLM_ONES   0x0101010101010101ULL
#define RLM_HIGHS  0x8080808080808080ULL

/* some byte of w is zero; some byte is below n (n <= 128) */
#define rlm_has_zero(w)      (((w) - RLM_ONES) & ~(w) & RLM_HIGHS)
#define rlm_has_less(w, n)   (((w) - RLM_ONES * (n)) & ~(w) & RLM_HIGHS)

/* some byte of w ends a run of plain string text */
#define rlm_json_special(w)                                                   \
    (rlm_has_less(w, 0x20) | rlm_has_zero((w) ^ (RLM_ONES * '"'))             \
     | rlm_has_zero((w) ^ (RLM_ONES * '\\')))


static rlm_cuchar *rlm_json_ws(rlm_cuchar *p, rlm_cuchar *end);
static rlm_cuchar *rlm_json_string_end(rlm_cuchar *p, rlm_cuchar *end,
    int *escaped);
static rlm_cuchar *rlm_json_skip_value(rlm_cuchar *p, rlm_cuchar *end);
static int rlm_json_hex4(rlm_cuchar *p, unsigned *code);
static size_t rlm_json_chars(rlm_cuchar *p, rlm_cuchar *end);
static size_t rlm_json_decode(unsigned char *p, unsigned char *end);


/*
 * The value of the top-level member key: its span in buf, if the object
 * has that member exactly once and is well formed as far as skipping it
 * can tell.
 */

static int
rlm_json_member(rlm_cuchar *buf, size_t len, const char *key,
    rlm_cuchar **value, rlm_cuchar **value_end)
{
    int          escaped, found;
    size_t       klen;
    rlm_cuchar  *p, *end, *k, *kend, *v, *vend;

    p = buf;
    end = buf + len;
    klen = strlen(key);
    found = 0;
    v = NULL;
    vend = NULL;

    p = rlm_json_ws(p, end);
    if (p == end || *p != '{') {
        return -1;
    }

    p = rlm_json_ws(p + 1, end);
    if (p < end && *p == '}') {
        return -1;
    }

    for ( ;; ) {
        if (p == end || *p != '"') {
            return -1;
        }

        k = p + 1;
        kend = rlm_json_string_end(p, end, &escaped);
        if (kend == NULL) {
            return -1;
        }

        p = rlm_json_ws(kend, end);
        if (p == end || *p != ':') {
            return -1;
        }

        p = rlm_json_ws(p + 1, end);
        if (p == end) {
            return -1;
        }

        k = (!escaped && (size_t) (kend - 1 - k) == klen
             && memcmp(k, key, klen) == 0) ? p : NULL;

        vend = rlm_json_skip_value(p, end);
        if (vend == NULL || vend == p) {
            return -1;
        }

        if (k != NULL) {
            if (found++) {
                /* twice: the parser refuses it */
                return -1;
            }

            v = k;
            *value_end = vend;
        }

        p = rlm_json_ws(vend, end);
        if (p == end) {
            return -1;
        }

        if (*p == '}') {
            break;
        }

        if (*p != ',') {
            return -1;
        }

        p = rlm_json_ws(p + 1, end);
    }

    if (rlm_json_ws(p + 1, end) != end || !found) {
        return -1;
    }

    *value = v;

    return 0;
}


int
ngx_http_rlm_json_take_string(unsigned char *buf, size_t len,
    const char *key, unsigned char **value, size_t *value_len,
    size_t *cut, size_t *cut_len)
{
    int          escaped;
    rlm_cuchar  *v, *vend;

    if (rlm_json_member(buf, len, key, &v, &vend) != 0 || *v != '"'
        || rlm_json_string_end(v, vend, &escaped) != vend)
    {
        return -1;
    }

    *cut = v - buf;
    *cut_len = vend - v;
    *value = (unsigned char *) v + 1;
    *value_len = rlm_json_decode((unsigned char *) v + 1,
                                 (unsigned char *) vend - 1);

    return 0;
}


int
ngx_http_rlm_json_take_container(unsigned char *buf, size_t len,
    const char *key, ngx_http_rlm_json_shape_t *shape, size_t *cut,
    size_t *cut_len)
{
    int          escaped;
    size_t       depth, sub, size;
    rlm_cuchar  *v, *vend, *p, *q, *item;

    if (rlm_json_member(buf, len, key, &v, &vend) != 0
        || (*v != '[' && *v != '{'))
    {
        return -1;
    }

    /*
     * Count the top-level items; measure the first ones of an array as a
     * Python len() would see them: a string's characters, a nested
     * array's or object's item count, 1 otherwise.
     */

    shape->object = (*v == '{');
    shape->items = 0;
    shape->measured = 0;

    depth = 0;
    item = NULL;
    sub = 0;
    size = 0;

    for (p = v; p < vend; /* void */) {
        switch (*p) {

        case '"':
            if (depth == 1 && item == NULL) {
                item = p;
            }

            q = rlm_json_string_end(p, vend, &escaped);
            if (q == NULL) {
                return -1;
            }

            if (depth == 1 && item == p
                && shape->measured < NGX_HTTP_RLM_JSON_MEASURED)
            {
                size = rlm_json_chars(p + 1, q - 1);
            }

            p = q;
            continue;

        case '[': case '{':
            if (depth++ == 1 && item == NULL) {
                item = p;
                sub = 0;
                size = 0;
            }

            break;

        case ']': case '}':
            if (--depth == 0) {
                goto item_end;
            }

            if (depth == 1 && item != NULL && *item != '"') {
                /* a nested container closes: its items, if any */
                size = sub + (rlm_json_ws(item + 1, p) != p);
            }

            break;

        case ',':
            if (depth == 2) {
                sub++;
            }

            if (depth == 1) {
                goto item_end;
            }

            break;

        case ' ': case '\t': case '\n': case '\r': case ':':
            break;

        default:
            if (depth == 1 && item == NULL) {
                item = p;
                size = 1;
            }

            break;
        }

        p++;
        continue;

    item_end:

        if (item != NULL) {
            if (!shape->object && shape->measured < NGX_HTTP_RLM_JSON_MEASURED)
            {
                shape->lengths[shape->measured++] = size;
            }

            shape->items++;
            item = NULL;
        }

        if (depth == 0) {
            break;
        }

        p++;
    }

    *cut = v - buf;
    *cut_len = vend - v;

    return 0;
}


static rlm_cuchar *
rlm_json_ws(rlm_cuchar *p, rlm_cuchar *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
    {
        p++;
    }

    return p;
}


/*
 * p at an opening quote: returns the position after the closing one, or
 * NULL if the string is not valid JSON (a raw control character, a bad
 * escape, a lone surrogate, no end).  *escaped tells if it has escapes.
 */

static rlm_cuchar *
rlm_json_string_end(rlm_cuchar *p, rlm_cuchar *end, int *escaped)
{
    uint64_t  w;
    unsigned  code, low;

    *escaped = 0;
    p++;

    for ( ;; ) {
        /*
         * The common case, plain text: eight bytes at a time while none
         * of them is a quote, a backslash or a control character.
         */

        while (end - p >= 8) {
            memcpy(&w, p, 8);

            if (rlm_json_special(w)) {
                break;
            }

            p += 8;
        }

        while (p < end && *p != '"' && *p != '\\' && *p >= 0x20) {
            p++;
        }

        if (p == end || *p < 0x20) {
            return NULL;
        }

        if (*p == '"') {
            return p + 1;
        }

        *escaped = 1;

        if (end - p < 2) {
            return NULL;
        }

        switch (p[1]) {

        case '"': case '\\': case '/': case 'b': case 'f': case 'n':
        case 'r': case 't':
            p += 2;
            break;

        case 'u':
            if (end - p < 6 || rlm_json_hex4(p + 2, &code) != 0) {
                return NULL;
            }

            p += 6;

            if (code >= 0xdc00 && code <= 0xdfff) {
                return NULL;
            }

            if (code >= 0xd800 && code <= 0xdbff) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u'
                    || rlm_json_hex4(p + 2, &low) != 0
                    || low < 0xdc00 || low > 0xdfff)
                {
                    return NULL;
                }

                p += 6;
            }

            break;

        default:
            return NULL;
        }
    }
}


/*
 * Any value; containers are skipped by counting brackets outside strings,
 * which is enough to find the top-level members: the caller's parser
 * checks the structure of all that is skipped here.
 */

static rlm_cuchar *
rlm_json_skip_value(rlm_cuchar *p, rlm_cuchar *end)
{
    int     escaped;
    size_t  depth;

    if (*p == '"') {
        return rlm_json_string_end(p, end, &escaped);
    }

    if (*p == '{' || *p == '[') {
        depth = 0;

        while (p < end) {
            switch (*p) {

            case '"':
                p = rlm_json_string_end(p, end, &escaped);
                if (p == NULL) {
                    return NULL;
                }

                continue;

            case '{': case '[':
                depth++;
                break;

            case '}': case ']':
                if (--depth == 0) {
                    return p + 1;
                }

                break;

            default:
                break;
            }

            p++;
        }

        return NULL;
    }

    /* a number or a literal: up to the next delimiter */

    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' '
           && *p != '\t' && *p != '\n' && *p != '\r' && *p != '"'
           && *p != ':')
    {
        p++;
    }

    return p;
}


static int
rlm_json_hex4(rlm_cuchar *p, unsigned *code)
{
    int       i;
    unsigned  c, v;

    v = 0;

    for (i = 0; i < 4; i++) {
        c = p[i];

        if (c >= '0' && c <= '9') {
            c -= '0';

        } else if (c >= 'a' && c <= 'f') {
            c -= 'a' - 10;

        } else if (c >= 'A' && c <= 'F') {
            c -= 'A' - 10;

        } else {
            return -1;
        }

        v = (v << 4) | c;
    }

    *code = v;

    return 0;
}


/*
 * Characters of a checked string body [p, end) as Python counts them:
 * code points, an escape being one (a surrogate pair one as well).
 */

static size_t
rlm_json_chars(rlm_cuchar *p, rlm_cuchar *end)
{
    size_t    n;
    unsigned  code;

    n = 0;

    while (p < end) {
        if (*p != '\\') {
            n += ((*p & 0xc0) != 0x80);
            p++;
            continue;
        }

        n++;

        if (p[1] != 'u') {
            p += 2;
            continue;
        }

        (void) rlm_json_hex4(p + 2, &code);
        p += (code >= 0xd800 && code <= 0xdbff) ? 12 : 6;
    }

    return n;
}


/* decodes a checked string body [p, end) in place; returns its length */

static size_t
rlm_json_decode(unsigned char *p, unsigned char *end)
{
    size_t          run;
    unsigned        code, low;
    unsigned char  *w, *start, *bs;

    start = p;
    w = p;

    for ( ;; ) {
        bs = memchr(p, '\\', end - p);
        run = (bs ? bs : end) - p;

        if (w != p) {
            memmove(w, p, run);
        }

        w += run;
        p += run;

        if (bs == NULL) {
            return w - start;
        }

        switch (p[1]) {

        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;

        case 'u':
            (void) rlm_json_hex4(p + 2, &code);

            if (code >= 0xd800 && code <= 0xdbff) {
                (void) rlm_json_hex4(p + 8, &low);
                code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                p += 6;
            }

            if (code < 0x80) {
                *w++ = (unsigned char) code;

            } else if (code < 0x800) {
                *w++ = (unsigned char) (0xc0 | (code >> 6));
                *w++ = (unsigned char) (0x80 | (code & 0x3f));

            } else if (code < 0x10000) {
                *w++ = (unsigned char) (0xe0 | (code >> 12));
                *w++ = (unsigned char) (0x80 | ((code >> 6) & 0x3f));
                *w++ = (unsigned char) (0x80 | (code & 0x3f));

            } else {
                *w++ = (unsigned char) (0xf0 | (code >> 18));
                *w++ = (unsigned char) (0x80 | ((code >> 12) & 0x3f));
                *w++ = (unsigned char) (0x80 | ((code >> 6) & 0x3f));
                *w++ = (unsigned char) (0x80 | (code & 0x3f));
            }

            p += 6;
            continue;

        default:                    /* '"', '\\', '/' */
            *w++ = p[1];
            break;
        }

        p += 2;
    }
}
