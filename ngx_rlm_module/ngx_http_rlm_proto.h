
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * The sandbox side of the channel protocol, typed.  Everything a sandbox
 * sends is decoded here, once, into the structs below, with types and
 * sizes checked: code in a cell can rewrite the runtime that writes its
 * frames, so a frame is hostile input.  No other file reads the JSON of
 * a sandbox's frame.
 */


#ifndef _NGX_HTTP_RLM_PROTO_H_INCLUDED_
#define _NGX_HTTP_RLM_PROTO_H_INCLUDED_


#include "ngx_http_rlm_module.h"


/* caps of the fields no directive sets */
#define NGX_HTTP_RLM_PROTO_ENAME_MAX      256
#define NGX_HTTP_RLM_PROTO_EVALUE_MAX     (64 * 1024)
#define NGX_HTTP_RLM_PROTO_TRACEBACK_MAX  (64 * 1024)
#define NGX_HTTP_RLM_PROTO_NAME_MAX       256
#define NGX_HTTP_RLM_PROTO_MODEL_MAX      256


/* what the host accepts of one frame (set from the directives) */
typedef struct {
    size_t                      output_max;    /* stdout + stderr */
    size_t                      answer_max;    /* answer["content"] */
    size_t                      state_max;     /* state_delta, JSON */
} ngx_http_rlm_proto_caps_t;


/*
 * A "result" frame: the end of an exec, load_context, get_var or
 * state_update.  The strings point into frame (or, for a result made up
 * by the host, into static or pool memory) and are not NUL-terminated.
 */
typedef struct {
    json_t                     *frame;         /* holds the strings */
    ngx_http_rlm_cell_status_e  status;
    ngx_str_t                   out;           /* stdout */
    ngx_str_t                   err;           /* stderr */
    ngx_str_t                   ename;
    ngx_str_t                   evalue;
    ngx_str_t                   traceback;
    double                      duration_ms;
    ngx_str_t                   answer;        /* content, when ready */
    json_t                     *state_delta;   /* an object, or NULL */
    ngx_str_t                   name;          /* load_context */
    ngx_str_t                   kind;
    ngx_str_t                   value;         /* get_var */
    unsigned                    has_error:1;
    unsigned                    output_truncated:1;
    unsigned                    answer_ready:1;
    unsigned                    answer_null:1; /* content was null */
    unsigned                    has_value:1;
} ngx_http_rlm_result_t;


typedef enum {
    NGX_HTTP_RLM_CALL_LLM = 0,                 /* llm_query */
    NGX_HTTP_RLM_CALL_LLM_BATCHED,             /* llm_query_batched */
    NGX_HTTP_RLM_CALL_RLM,                     /* rlm_query */
    NGX_HTTP_RLM_CALL_RLM_BATCHED,             /* rlm_query_batched */
    NGX_HTTP_RLM_CALL_TOOL
} ngx_http_rlm_call_fn_e;


/*
 * A "call" frame from code during an exec.  A prompt is a string, or a
 * list or dict the model call gets as JSON text; prompts is the frame's
 * own array (or the single prompt) and is read through _call_prompt().
 */
typedef struct {
    json_t                     *frame;
    json_int_t                  id;
    ngx_http_rlm_call_fn_e      fn;
    ngx_uint_t                  nprompts;
    json_t                     *prompts;       /* array, or one prompt */
    ngx_str_t                   model;         /* empty: the default */
    json_t                     *state;         /* rlm_*: an object */
    json_t                     *context;       /* rlm_query: or NULL */
    ngx_str_t                   tool;          /* tool: its name */
    unsigned                    batched:1;
} ngx_http_rlm_call_t;


typedef enum {
    NGX_HTTP_RLM_FRAME_RESULT = 0,
    NGX_HTTP_RLM_FRAME_CALL
} ngx_http_rlm_frame_type_e;


/*
 * Decodes one frame of a sandbox.  NGX_OK: *type says which of res or
 * call was filled (each takes a reference on msg, dropped by _free());
 * NGX_ERROR: the frame is malformed, and why (a static string) says how.
 */
ngx_int_t ngx_http_rlm_proto_decode(json_t *msg,
    ngx_http_rlm_proto_caps_t *caps, ngx_http_rlm_frame_type_e *type,
    ngx_http_rlm_result_t *res, ngx_http_rlm_call_t *call,
    const char **why);

void ngx_http_rlm_result_free(ngx_http_rlm_result_t *res);
void ngx_http_rlm_call_free(ngx_http_rlm_call_t *call);

/* a result the host makes up: the sandbox is gone or broke the protocol */
void ngx_http_rlm_result_set(ngx_http_rlm_result_t *res,
    ngx_http_rlm_cell_status_e status, const char *ename, u_char *evalue,
    size_t len);

/* the cell's result as the sessions API shows it */
json_t *ngx_http_rlm_result_json(ngx_http_rlm_result_t *res);

/* prompt i of a call: a string's own text, or JSON text in pool */
ngx_int_t ngx_http_rlm_call_prompt(ngx_http_rlm_call_t *call, ngx_uint_t i,
    ngx_pool_t *pool, ngx_str_t *text);

/* the host's answer to call id: result, or an error message */
json_t *ngx_http_rlm_proto_reply(json_int_t id, json_t *result);
json_t *ngx_http_rlm_proto_refusal(json_int_t id, const char *message);

const char *ngx_http_rlm_call_fn_name(ngx_http_rlm_call_fn_e fn);


#endif /* _NGX_HTTP_RLM_PROTO_H_INCLUDED_ */
