
/*
 * ngx_rlm: the recursive loop of one completion.
 *
 * A loop asks its root model for a response, runs the response's repl
 * blocks in the session's sandbox one after another, answers the code's
 * model calls (llm_query, llm_query_batched, rlm_query ...) while a block
 * runs, feeds the outputs back, and stops on a final answer or a limit.
 * Child loops (rlm_query) run the same machine on sandboxes of their own
 * and share the tree's budget: deadline, tokens, concurrent calls, usage
 * and the `state` dict.
 */


#ifndef _NGX_HTTP_RLM_LOOP_H_INCLUDED_
#define _NGX_HTTP_RLM_LOOP_H_INCLUDED_


#include "ngx_http_rlm_module.h"
#include "ngx_http_rlm_cell.h"
#include "ngx_http_rlm_llm.h"
#include "ngx_http_rlm_parse.h"
#include "ngx_http_rlm_jsonstr.h"
#include "ngx_http_rlm_cost.h"


typedef struct ngx_http_rlm_loop_s  ngx_http_rlm_loop_t;
typedef struct ngx_http_rlm_tree_s  ngx_http_rlm_tree_t;

typedef void (*ngx_http_rlm_loop_done_pt)(ngx_http_rlm_loop_t *loop);
typedef void (*ngx_http_rlm_loop_progress_pt)(ngx_http_rlm_loop_t *loop,
    const char *what);


/* settings of a location (rlm_completions and friends) */
typedef struct {
    ngx_uint_t                  max_iterations;
    ngx_uint_t                  max_depth;
    ngx_msec_t                  timeout;           /* whole completion */
    ngx_uint_t                  max_error_cells;   /* consecutive */
    size_t                      block_output_max;  /* characters */
    ngx_uint_t                  max_calls;         /* concurrent, tree */
    ngx_uint_t                  batch_max;         /* prompts of a call */
    ngx_uint_t                  max_pending_calls; /* waiting, tree */
    ngx_uint_t                  max_children;      /* child loops, tree */
    ngx_uint_t                  sessions_share;    /* % of max_sessions */
    ngx_uint_t                  compaction;        /* tokens, 0: off */
    ngx_flag_t                  final_markers;
    ngx_str_t                   system_prompt;
    ngx_str_t                   trajectory_dir;
} ngx_http_rlm_loop_conf_t;


/* what one completion and its children share */
struct ngx_http_rlm_tree_s {
    ngx_http_rlm_llm_group_t    group;             /* concurrent calls */
    ngx_msec_t                  deadline;          /* absolute */
    uint64_t                    max_tokens;        /* 0: no budget */
    uint64_t                    prompt_tokens;
    uint64_t                    completion_tokens;
    ngx_uint_t                  calls;
    json_t                     *models;            /* per-model usage */
    ngx_array_t                *prices;            /* of _price_t, or NULL */
    double                      cost;              /* of priced calls */
    double                      max_cost;          /* 0: no budget */
    json_t                     *sub_sampling;      /* for sub-calls */
    ngx_uint_t                  compaction;        /* tokens, 0: off */
    json_t                     *state;             /* the shared dict */
    json_t                     *deleted;           /* keys removed: set */
    ngx_uint_t                  state_version;     /* bumped per change */
    void                       *state_text;        /* encoded, shared */
    ngx_str_t                   owner;
    ngx_uint_t                  owner_max;         /* its session quota */
    ngx_str_t                   code_models;       /* models code may ask */
    ngx_uint_t                  loops;             /* live loops */
    ngx_uint_t                  children;          /* child loops started */
    ngx_uint_t                  pending_calls;     /* model calls of code */
    const char                 *limit;             /* first limit hit */
};


typedef enum {
    NGX_HTTP_RLM_LOOP_INIT = 0,
    NGX_HTTP_RLM_LOOP_OPEN,        /* child: waiting for its sandbox */
    NGX_HTTP_RLM_LOOP_PREPARE,     /* state, context, aliases */
    NGX_HTTP_RLM_LOOP_ROOT,        /* waiting for the root model */
    NGX_HTTP_RLM_LOOP_CELL,        /* a block runs */
    NGX_HTTP_RLM_LOOP_FINAL_VAR,   /* reading the FINAL_VAR variable */
    NGX_HTTP_RLM_LOOP_COMPACT,     /* the history is being summarised */
    NGX_HTTP_RLM_LOOP_LAST,        /* the plain call after the last turn */
    NGX_HTTP_RLM_LOOP_HISTORY,     /* saving history_N */
    NGX_HTTP_RLM_LOOP_DONE
} ngx_http_rlm_loop_state_e;


struct ngx_http_rlm_loop_s {
    /* set by the caller before ngx_http_rlm_loop_start() */
    ngx_http_request_t         *request;       /* pool, log */
    ngx_http_rlm_loop_conf_t   *conf;
    ngx_http_rlm_tree_t        *tree;
    ngx_http_rlm_loop_t        *parent;
    ngx_http_rlm_provider_t    *provider;
    ngx_str_t                   root_model;
    ngx_str_t                   sub_model;
    json_t                     *sampling;      /* copied into root calls */
    ngx_str_t                   system_prompt; /* empty: the location's */
    ngx_uint_t                  depth;
    ngx_uint_t                  max_iterations;
    ngx_uint_t                  max_depth;
    ngx_str_t                   query;
    json_t                     *context;       /* stolen by the loop */
    ngx_str_t                   context_text;  /* instead: text in memory */
    ngx_str_t                   context_json;  /* or: JSON array/object */
    ngx_http_rlm_json_shape_t   context_shape; /* of context_json */
    json_t                     *history;       /* earlier turns, or NULL */
    ngx_http_rlm_session_t     *session;       /* referenced, or NULL */
    uint64_t                    turn;          /* completion number */
    ngx_str_t                   completion_id;
    ngx_http_rlm_loop_done_pt   done;
    ngx_http_rlm_loop_progress_pt  progress;
    void                       *data;

    /* outcome, valid in done() */
    ngx_str_t                   answer;
    const char                 *finish_reason;
    const char                 *limit;         /* which limit ended it */
    ngx_uint_t                  error_status;  /* 0: no error */
    const char                 *error_type;
    const char                 *error_code;
    u_char                     *error_message;
    ngx_uint_t                  iterations;
    ngx_uint_t                  cells;
    ngx_uint_t                  compactions;

    /* private */
    ngx_http_rlm_loop_state_e   state;
    ngx_log_t                  *log;
    ngx_pool_t                 *pool;
    u_char                      hex[NGX_HTTP_RLM_ID_HEX];
    ngx_http_rlm_open_t         open;
    json_t                     *messages;
    ngx_http_rlm_llm_call_t     call;
    ngx_http_rlm_cell_t        *cell;
    ngx_http_rlm_response_t     parsed;
    ngx_str_t                   response;
    ngx_uint_t                  block;
    ngx_uint_t                  error_cells;
    ngx_str_t                   best;          /* best answer so far */
    const char                 *last_limit;    /* why the last plain call */
    json_t                     *compacted;     /* for the next record */
    json_t                     *feedback;      /* outputs of this turn */
    json_t                     *record;        /* trajectory iteration */
    json_t                     *block_calls;   /* sub-calls of a block */
    void                       *trajectory;
    json_t                     *lines;         /* child: its trajectory */
    json_t                     *models;        /* usage of this subtree */
    ngx_msec_t                  iteration_start;
    ngx_queue_t                 subcalls;      /* calls being answered */
    ngx_queue_t                 children;      /* child loops, running */
    ngx_queue_t                 child_link;    /* in the parent's list */
    void                       *child_of;      /* the subcall waiting */
    ngx_event_t                 step;          /* advances the machine */
    ngx_event_t                 deadline;
    ngx_uint_t                  prepare_step;
    ngx_int_t                   eval_rc;
    unsigned                    call_running:1;
    unsigned                    finished:1;
    unsigned                    own_session:1; /* child: delete at end */
    unsigned                    counted:1;     /* in tree->loops */
};


ngx_int_t ngx_http_rlm_loop_start(ngx_http_rlm_loop_t *loop);
void ngx_http_rlm_loop_cancel(ngx_http_rlm_loop_t *loop);
json_t *ngx_http_rlm_loop_usage(ngx_http_rlm_tree_t *tree);

/* for ngx_http_rlm_subcall.c */
ngx_int_t ngx_http_rlm_loop_start_call(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_llm_call_t *call, json_t *req,
    ngx_http_rlm_llm_done_pt done, void *data);
void ngx_http_rlm_loop_count(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_llm_call_t *call);
ngx_msec_t ngx_http_rlm_loop_remaining(ngx_http_rlm_loop_t *loop);
/* ngx_http_rlm_state.c */
ngx_int_t ngx_http_rlm_state_merge(ngx_http_rlm_loop_t *loop, json_t *delta);
ngx_int_t ngx_http_rlm_state_frame(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_cell_t *cell);
void ngx_http_rlm_state_release(ngx_http_rlm_tree_t *tree);
ngx_int_t ngx_http_rlm_loop_str(ngx_http_rlm_loop_t *loop, ngx_str_t *dst,
    const char *src, size_t len);

/* ngx_http_rlm_subcall.c */
ngx_int_t ngx_http_rlm_subcall_handler(ngx_http_rlm_cell_t *cell,
    ngx_http_rlm_call_t *call);
void ngx_http_rlm_subcalls_cancel(ngx_http_rlm_loop_t *loop,
    ngx_http_rlm_cell_t *cell);

/* ngx_http_rlm_prompt.c */
extern ngx_str_t  ngx_http_rlm_default_system_prompt;

json_t *ngx_http_rlm_prompt_first(ngx_http_rlm_loop_t *loop);
json_t *ngx_http_rlm_prompt_turn(ngx_http_rlm_loop_t *loop,
    json_t *feedback);
json_t *ngx_http_rlm_prompt_last(ngx_http_rlm_loop_t *loop);
json_t *ngx_http_rlm_prompt_stopped(ngx_http_rlm_loop_t *loop,
    json_t *feedback, const char *why);
json_t *ngx_http_rlm_prompt_block_output(ngx_http_rlm_loop_t *loop,
    ngx_uint_t n, ngx_http_rlm_result_t *result);
json_t *ngx_http_rlm_prompt_note(const char *text);
json_t *ngx_http_rlm_prompt_compact(ngx_http_rlm_loop_t *loop, size_t from,
    size_t to);
json_t *ngx_http_rlm_prompt_summary(ngx_http_rlm_loop_t *loop,
    ngx_str_t *text);


#endif /* _NGX_HTTP_RLM_LOOP_H_INCLUDED_ */
