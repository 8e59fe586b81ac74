/*
 * Blocking frame I/O shared by the sandbox child, rlm-sandboxctl and the
 * benchmark client.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "rlm_frame.h"


void
rlm_frame_put_hdr(unsigned char *p, uint32_t json_len, uint32_t blob_len)
{
    p[0] = (unsigned char) (json_len >> 24);
    p[1] = (unsigned char) (json_len >> 16);
    p[2] = (unsigned char) (json_len >> 8);
    p[3] = (unsigned char) json_len;
    p[4] = (unsigned char) (blob_len >> 24);
    p[5] = (unsigned char) (blob_len >> 16);
    p[6] = (unsigned char) (blob_len >> 8);
    p[7] = (unsigned char) blob_len;
}


void
rlm_frame_get_hdr(const unsigned char *p, uint32_t *json_len,
    uint32_t *blob_len)
{
    *json_len = ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
                | ((uint32_t) p[2] << 8) | p[3];
    *blob_len = ((uint32_t) p[4] << 24) | ((uint32_t) p[5] << 16)
                | ((uint32_t) p[6] << 8) | p[7];
}


int
rlm_read_full(int fd, void *buf, size_t n)
{
    size_t   got;
    ssize_t  r;

    got = 0;

    while (got < n) {
        r = read(fd, (char *) buf + got, n - got);

        if (r > 0) {
            got += r;
            continue;
        }

        if (r == 0) {
            if (got == 0) {
                return 0;
            }

            errno = ECONNRESET;
            return -1;
        }

        if (errno != EINTR) {
            return -1;
        }
    }

    return 1;
}


int
rlm_write_full(int fd, const void *buf, size_t n)
{
    size_t   done;
    ssize_t  w;

    done = 0;

    while (done < n) {
        w = send(fd, (const char *) buf + done, n - done, MSG_NOSIGNAL);

        if (w < 0 && errno == ENOTSOCK) {
            w = write(fd, (const char *) buf + done, n - done);
        }

        if (w >= 0) {
            done += w;
            continue;
        }

        if (errno != EINTR) {
            return -1;
        }
    }

    return 0;
}


int
rlm_frame_send(int fd, const char *json, size_t json_len, const void *blob,
    size_t blob_len)
{
    unsigned char  hdr[RLM_FRAME_HDR_LEN];
    struct iovec   iov[3];
    struct msghdr  msg;
    size_t         total, done, skip;
    ssize_t        w;
    int            i, niov;

    if (json_len == 0 || json_len > RLM_FRAME_JSON_MAX
        || blob_len > 0xffffffffu)
    {
        errno = EMSGSIZE;
        return -1;
    }

    rlm_frame_put_hdr(hdr, (uint32_t) json_len, (uint32_t) blob_len);

    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *) json;
    iov[1].iov_len = json_len;
    iov[2].iov_base = (void *) blob;
    iov[2].iov_len = blob_len;
    niov = blob_len ? 3 : 2;

    total = sizeof(hdr) + json_len + blob_len;
    done = 0;

    /* one sendmsg for the usual small frame, a loop for partial writes */

    while (done < total) {
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        msg.msg_iovlen = niov;

        w = sendmsg(fd, &msg, MSG_NOSIGNAL);

        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }

            return -1;
        }

        done += w;
        skip = w;

        for (i = 0; i < niov && skip > 0; i++) {
            if (skip >= iov[i].iov_len) {
                skip -= iov[i].iov_len;
                iov[i].iov_base = (char *) iov[i].iov_base + iov[i].iov_len;
                iov[i].iov_len = 0;

            } else {
                iov[i].iov_base = (char *) iov[i].iov_base + skip;
                iov[i].iov_len -= skip;
                skip = 0;
            }
        }
    }

    return 0;
}


int
rlm_frame_recv(int fd, char **json, uint32_t *json_len, char **blob,
    uint32_t *blob_len, uint32_t max_blob)
{
    unsigned char  hdr[RLM_FRAME_HDR_LEN];
    uint32_t       jl, bl;
    char          *j, *b;
    int            rc;

    *json = NULL;
    *blob = NULL;

    rc = rlm_read_full(fd, hdr, sizeof(hdr));
    if (rc <= 0) {
        return rc;
    }

    rlm_frame_get_hdr(hdr, &jl, &bl);

    if (jl == 0 || jl > RLM_FRAME_JSON_MAX || bl > max_blob) {
        return -2;
    }

    j = malloc(jl + 1);
    if (j == NULL) {
        return -1;
    }

    if (rlm_read_full(fd, j, jl) != 1) {
        free(j);
        return -1;
    }

    j[jl] = '\0';
    b = NULL;

    if (bl > 0) {
        b = malloc(bl);
        if (b == NULL) {
            free(j);
            return -1;
        }

        if (rlm_read_full(fd, b, bl) != 1) {
            free(j);
            free(b);
            return -1;
        }
    }

    *json = j;
    *json_len = jl;
    *blob = b;
    *blob_len = bl;

    return 1;
}
