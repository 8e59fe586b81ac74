/*
 * New session to first result, measured from a small C client so that
 * the client's own cost stays out of the numbers (a Perl or Python
 * client adds 0.1-0.3 ms to every request on this machine).
 *
 *   first_cell PORT ROUNDS [PAUSE_MS]
 *
 * Each round, on one keep-alive connection: POST /v1/sessions, the first
 * cell (x = 1), a second cell (x = 2, for comparison), DELETE.  PAUSE_MS
 * (default 0) is slept after each round, outside the timing: 0 makes
 * new sessions back to back (the pool refills and old sandboxes die on
 * the same cores while the next round runs); 20 gives 50 new sessions a
 * second.  Prints p50/p90/p99/max of create + first cell, and of each
 * step, in milliseconds.
 */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


static int   bench_fd;
static char  bench_buf[65536];


static double
bench_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}


/* one request; returns the status, the body is left in bench_buf */
static int
bench_request(const char *method, const char *path, const char *body)
{
    char    req[1024];
    char   *hend, *cl;
    int     n, len, got, status;
    size_t  blen;

    blen = body ? strlen(body) : 0;
    len = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: bench\r\n"
                   "Content-Type: application/json\r\n"
                   "Content-Length: %zu\r\n\r\n%s", method, path, blen,
                   body ? body : "");

    if (write(bench_fd, req, len) != len) {
        perror("write");
        exit(1);
    }

    got = 0;

    for ( ;; ) {
        n = read(bench_fd, bench_buf + got, sizeof(bench_buf) - 1 - got);
        if (n <= 0) {
            fprintf(stderr, "connection closed\n");
            exit(1);
        }

        got += n;
        bench_buf[got] = '\0';

        hend = strstr(bench_buf, "\r\n\r\n");
        if (hend == NULL) {
            continue;
        }

        cl = strcasestr(bench_buf, "content-length:");
        if (cl == NULL || cl > hend) {
            fprintf(stderr, "no content-length\n");
            exit(1);
        }

        if (got >= (hend + 4 - bench_buf) + atoi(cl + 15)) {
            break;
        }
    }

    status = atoi(bench_buf + 9);
    memmove(bench_buf, hend + 4, strlen(hend + 4) + 1);

    return status;
}


static int
bench_cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


static void
bench_print(const char *what, double *v, int n)
{
    qsort(v, n, sizeof(double), bench_cmp);
    printf("%-28s p50 %.3f  p90 %.3f  p99 %.3f  max %.3f ms\n", what,
           v[(int) (0.50 * (n - 1) + 0.5)], v[(int) (0.90 * (n - 1) + 0.5)],
           v[(int) (0.99 * (n - 1) + 0.5)], v[n - 1]);
}


int
main(int argc, char **argv)
{
    int                  port, rounds, pause_ms, i, one;
    char                 id[64], path[128], *p;
    double               t0, t1, t2, t3;
    double              *total, *create, *first, *second;
    struct sockaddr_in   sin;
    struct timespec      pause;

    if (argc < 3) {
        fprintf(stderr, "usage: first_cell PORT ROUNDS [PAUSE_MS]\n");
        return 2;
    }

    port = atoi(argv[1]);
    rounds = atoi(argv[2]);
    pause_ms = argc > 3 ? atoi(argv[3]) : 0;

    if (rounds < 1) {
        return 2;
    }

    total = calloc(rounds, sizeof(double));
    create = calloc(rounds, sizeof(double));
    first = calloc(rounds, sizeof(double));
    second = calloc(rounds, sizeof(double));

    bench_fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    if (connect(bench_fd, (struct sockaddr *) &sin, sizeof(sin)) != 0) {
        perror("connect");
        return 1;
    }

    one = 1;
    setsockopt(bench_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    pause.tv_sec = pause_ms / 1000;
    pause.tv_nsec = (pause_ms % 1000) * 1000000L;

    for (i = 0; i < rounds; i++) {
        t0 = bench_now_ms();

        if (bench_request("POST", "/v1/sessions", NULL) != 201) {
            fprintf(stderr, "create: %s\n", bench_buf);
            return 1;
        }

        t1 = bench_now_ms();

        p = strstr(bench_buf, "\"id\":\"");
        if (p == NULL || sscanf(p + 6, "%32[0-9a-f]", id) != 1) {
            fprintf(stderr, "create: no id in %s\n", bench_buf);
            return 1;
        }

        snprintf(path, sizeof(path), "/v1/sessions/%s/eval", id);

        if (bench_request("POST", path, "{\"code\":\"x = 1\"}") != 200
            || strstr(bench_buf, "\"status\":\"ok\"") == NULL)
        {
            fprintf(stderr, "first cell: %s\n", bench_buf);
            return 1;
        }

        t2 = bench_now_ms();

        if (bench_request("POST", path, "{\"code\":\"x = 2\"}") != 200) {
            fprintf(stderr, "second cell: %s\n", bench_buf);
            return 1;
        }

        t3 = bench_now_ms();

        snprintf(path, sizeof(path), "/v1/sessions/%s", id);
        (void) bench_request("DELETE", path, NULL);

        total[i] = t2 - t0;
        create[i] = t1 - t0;
        first[i] = t2 - t1;
        second[i] = t3 - t2;

        if (pause_ms > 0) {
            nanosleep(&pause, NULL);
        }
    }

    printf("%d rounds, %d ms pause between rounds\n", rounds, pause_ms);
    bench_print("create + first cell", total, rounds);
    bench_print("create", create, rounds);
    bench_print("first cell", first, rounds);
    bench_print("second cell", second, rounds);

    return 0;
}
