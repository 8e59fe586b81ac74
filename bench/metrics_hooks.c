
/*
 * What the gateway counters cost per completion, measured alone: the
 * hooks of ngx_http_rlm_metrics.c (compiled in here, against nginx's
 * headers) on a zone in ordinary memory, with the model table full, so
 * every lookup scans the 32 slots before it finds its name in the last
 * one (the worst case).  One "completion" is what a loop of 3
 * iterations with 2 sub-calls reports: 5 model calls, 2 sub-calls, 1
 * completion.  The baseline is the same loop without the hooks.
 *
 *   make -f t/unit/unit.mk build/bench/metrics_hooks && \
 *       build/bench/metrics_hooks [completions] [other names]
 *
 * "other names" (30 by default, at most 30) are claimed before the two
 * the loop uses: 0 is the best case, 30 the worst.
 *
 * Linked with unresolved symbols ignored: the nginx functions the
 * /metrics handler calls are never called here.
 */


#include "ngx_http_rlm_metrics.c"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>


volatile ngx_msec_t      ngx_current_msec;
volatile ngx_time_t     *ngx_cached_time;

static ngx_time_t        bench_time;
static ngx_http_rlm_zone_t  bench_zone;


ngx_http_rlm_zone_t *
ngx_http_rlm_zone(void)
{
    return &bench_zone;
}


void
ngx_shmtx_lock(ngx_shmtx_t *mtx)
{
    (void) mtx;
}


void
ngx_shmtx_unlock(ngx_shmtx_t *mtx)
{
    (void) mtx;
}


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


int
main(int argc, char **argv)
{
    char                     name[32];
    double                   t0, t1, t2;
    ngx_uint_t               i, j, n, fill;
    ngx_str_t                root, sub;
    ngx_http_request_t       r;
    ngx_slab_pool_t          pool;
    ngx_http_rlm_llm_call_t  call;
    volatile ngx_uint_t      sink;

    n = argc > 1 ? strtoul(argv[1], NULL, 10) : 2000000;
    fill = argc > 2 ? strtoul(argv[2], NULL, 10) : 30;
    fill = ngx_min(fill, NGX_HTTP_RLM_MODELS_MAX - 2);

    ngx_cached_time = &bench_time;
    bench_zone.sh = calloc(1, sizeof(ngx_http_rlm_shctx_t));
    bench_zone.shpool = &pool;

    /* other names first, then the two used below */

    for (i = 0; i < fill; i++) {
        root.len = snprintf(name, sizeof(name), "filler-model-%u",
                            (unsigned) i);
        root.data = (u_char *) name;
        ngx_http_rlm_metrics_subcall(&root, 0);
    }

    ngx_str_set(&root, "gpt-4o-2024-08-06");
    ngx_str_set(&sub, "gpt-4o-mini-2024-07-18");

    ngx_memzero(&r, sizeof(r));
    ngx_memzero(&call, sizeof(call));
    call.status = 200;
    call.has_usage = 1;
    call.prompt_tokens = 1000;
    call.completion_tokens = 100;

    /* baseline: the same loop, the hooks left out */

    sink = 0;
    t0 = now();

    for (i = 0; i < n; i++) {
        for (j = 0; j < 5; j++) {
            call.asked = (j < 3) ? root : sub;
            ngx_current_msec += 7;
            sink += call.asked.len;
        }

        sink += sub.len + root.len;
    }

    t1 = now();

    for (i = 0; i < n; i++) {
        for (j = 0; j < 5; j++) {
            call.asked = (j < 3) ? root : sub;
            ngx_current_msec += 7;
            ngx_http_rlm_metrics_model_call(&call);
        }

        ngx_http_rlm_metrics_subcall(&sub, 0);
        ngx_http_rlm_metrics_subcall(&sub, 0);
        ngx_http_rlm_metrics_completion(&r, &root,
                                        NGX_HTTP_RLM_OUTCOME_STOP, 3);
    }

    t2 = now();

    printf("%lu completions, %lu names in the table, sink %lu\n",
           (unsigned long) n, (unsigned long) bench_zone.sh->models.nmodels,
           (unsigned long) sink);
    printf("baseline loop: %.1f ns per completion\n", (t1 - t0) / n * 1e9);
    printf("with the hooks: %.1f ns per completion (%.1f ns added)\n",
           (t2 - t1) / n * 1e9, ((t2 - t1) - (t1 - t0)) / n * 1e9);

    return 0;
}
