/*
 * Frames of the rlm-sandboxd wire protocol (docs/protocol.md): an 8-byte
 * header holding two big-endian u32 lengths, a JSON object, then an
 * optional raw blob.  Blocking helpers used by the sandbox child and the
 * command-line client; the manager parses headers itself (non-blocking).
 */

#ifndef _RLM_FRAME_H_INCLUDED_
#define _RLM_FRAME_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


#define RLM_PROTOCOL_VERSION  1
#define RLM_FRAME_HDR_LEN     8
#define RLM_FRAME_JSON_MAX    (16u * 1024 * 1024)
#define RLM_FRAME_BLOB_MAX    (1024u * 1024 * 1024)


void rlm_frame_put_hdr(unsigned char *p, uint32_t json_len,
    uint32_t blob_len);
void rlm_frame_get_hdr(const unsigned char *p, uint32_t *json_len,
    uint32_t *blob_len);

/* read exactly n bytes: 1 done, 0 EOF before the first byte, -1 error */
int rlm_read_full(int fd, void *buf, size_t n);
/* write exactly n bytes (MSG_NOSIGNAL on sockets): 0 or -1 */
int rlm_write_full(int fd, const void *buf, size_t n);

/* send one frame; blob may be NULL */
int rlm_frame_send(int fd, const char *json, size_t json_len,
    const void *blob, size_t blob_len);

/*
 * Receive one frame into malloc()ed buffers (json is NUL-terminated,
 * *blob is NULL when blob_len is 0).  Returns 1 on a frame, 0 on a clean
 * EOF, -1 on I/O error, -2 on lengths out of range.
 */
int rlm_frame_recv(int fd, char **json, uint32_t *json_len, char **blob,
    uint32_t *blob_len, uint32_t max_blob);


#endif /* _RLM_FRAME_H_INCLUDED_ */
