
/*
 * ngx_rlm: Recursive Language Models served by nginx.
 *
 * Supervision of rlm-sandboxd by the nginx master.
 *
 * nginx has no hook for a module to run code in the master process, but
 * the master already supervises its children: every process in
 * ngx_processes[] marked "respawn" is started again by
 * ngx_reap_children() when it exits.  So the manager gets a slot there:
 *
 *   - the slot is "detached": the master never sends it its own
 *     commands (quit on reload, terminate), so a reload leaves the
 *     manager and every sandbox running, and stopping nginx does not
 *     wait for it; exit_master stops it, and the manager dies anyway
 *     when its parent does (PR_SET_PDEATHSIG, set here and by itself);
 *   - the slot is "respawn": when the manager dies, the master's SIGCHLD
 *     handler reaps it (it is the master's child, so workers never see
 *     it) and ngx_reap_children() forks ngx_http_rlm_supervisor_proc()
 *     again, which waits out a backoff, logs at ALERT and execs a fresh
 *     manager with a clean environment and only stdin/stdout/stderr;
 *   - the first start uses the same path: init_module (which runs
 *     before nginx daemonizes) adds the slot as "exited", and the master
 *     is made to reap once it is in its loop: a pthread_atfork() handler
 *     raises SIGCHLD in the master when it forks its first worker (the
 *     signal stays pending until the master's sigsuspend()).  On a
 *     reload the master is already in its loop and raises it directly.
 *
 * Backoff state (starts, restarts, last start) lives in the sessions
 * zone so that the forked child can read and update it; sessions record
 * the start count of the manager that gave them their sandbox and report
 * sandbox_lost once it changed.
 */


#include <sys/prctl.h>
#include <dirent.h>
#include <pthread.h>

#include "ngx_http_rlm_module.h"


#define NGX_HTTP_RLM_BACKOFF_MIN     100
#define NGX_HTTP_RLM_BACKOFF_MAX     30000
#define NGX_HTTP_RLM_STABLE_SECS     30
#define NGX_HTTP_RLM_PLACEHOLDER_PID ((ngx_pid_t) 0x7fffffff)


typedef struct {
    char                  *path;
    char                  *runtime_dir;
    char                 **argv;
    ngx_uint_t             pool_size;
} ngx_http_rlm_super_conf_t;


static ngx_int_t ngx_http_rlm_supervisor_register(ngx_cycle_t *cycle);
static ngx_uint_t ngx_http_rlm_supervisor_valid(void);
static void ngx_http_rlm_supervisor_stop(ngx_cycle_t *cycle);
static void ngx_http_rlm_supervisor_close_channel(ngx_int_t slot);
static char **ngx_http_rlm_supervisor_argv(ngx_cycle_t *cycle,
    ngx_http_rlm_main_conf_t *rmcf);
static void ngx_http_rlm_supervisor_free_conf(ngx_http_rlm_super_conf_t *sc);
static void ngx_http_rlm_supervisor_proc(ngx_cycle_t *cycle, void *data);
static void ngx_http_rlm_supervisor_close_fds(void);
static ngx_msec_t ngx_http_rlm_supervisor_backoff(ngx_cycle_t *cycle);
static void ngx_http_rlm_supervisor_atfork_parent(void);
static void ngx_http_rlm_supervisor_atfork_child(void);
static ngx_int_t ngx_http_rlm_supervisor_defer_single(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_rlm_supervisor_spawn_single(ngx_cycle_t *cycle);
static void ngx_http_rlm_supervisor_cycle_cleanup(void *data);


/*
 * Master-process state.  It lives in the module's static memory, which
 * stays mapped across reloads as long as the module is loaded (the
 * cycle cleanup stops the manager if a reload unloads it).
 */

static ngx_http_rlm_super_conf_t  ngx_http_rlm_super_conf;
static ngx_int_t                  ngx_http_rlm_super_slot = -1;
static ngx_uint_t                 ngx_http_rlm_super_pending;
static ngx_uint_t                 ngx_http_rlm_super_atfork;
static ngx_uint_t                 ngx_http_rlm_super_generation;

/* master_process off */
static ngx_uint_t                 ngx_http_rlm_super_single_pending;
static ngx_uint_t                 ngx_http_rlm_super_single_started;
static ngx_uint_t                 ngx_http_rlm_super_child_atfork;
static ngx_pid_t                  ngx_http_rlm_super_parent;
static ngx_cycle_t               *ngx_http_rlm_super_cycle;

static char  ngx_http_rlm_super_name[] = "rlm-sandboxd";


ngx_int_t
ngx_http_rlm_supervisor_init(ngx_cycle_t *cycle,
    ngx_http_rlm_main_conf_t *rmcf)
{
    char                       **argv, *path, *dir;
    ngx_uint_t                   restart;
    ngx_core_conf_t             *ccf;
    ngx_pool_cleanup_t          *cln;
    ngx_http_rlm_zone_t         *z;
    ngx_http_rlm_super_conf_t    old;

    if (ngx_test_config || ngx_process == NGX_PROCESS_SIGNALLER) {
        return NGX_OK;
    }

    ngx_http_rlm_super_generation++;

    if (rmcf == NULL || rmcf->sandboxd.len == 0) {
        /* nothing to supervise, or an external manager */
        ngx_http_rlm_supervisor_stop(cycle);
        return NGX_OK;
    }

    cln = ngx_pool_cleanup_add(cycle->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_rlm_supervisor_cycle_cleanup;
    cln->data = (void *) (uintptr_t) ngx_http_rlm_super_generation;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    argv = ngx_http_rlm_supervisor_argv(cycle, rmcf);
    path = ngx_alloc(rmcf->sandboxd.len + 1, cycle->log);
    dir = ngx_alloc(rmcf->runtime_dir.len + 1, cycle->log);

    if (argv == NULL || path == NULL || dir == NULL) {
        return NGX_ERROR;
    }

    ngx_cpystrn((u_char *) path, rmcf->sandboxd.data,
                rmcf->sandboxd.len + 1);
    ngx_cpystrn((u_char *) dir, rmcf->runtime_dir.data,
                rmcf->runtime_dir.len + 1);

    old = ngx_http_rlm_super_conf;

    restart = old.path
              && (ngx_strcmp(old.path, path) != 0
                  || ngx_strcmp(old.runtime_dir, dir) != 0);

    if (old.path && !restart && old.pool_size != rmcf->pool_size) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "rlm: the new rlm_pool_size takes effect when "
                      "rlm-sandboxd next starts; live sessions are kept");
    }

    ngx_http_rlm_super_conf.path = path;
    ngx_http_rlm_super_conf.runtime_dir = dir;
    ngx_http_rlm_super_conf.argv = argv;
    ngx_http_rlm_super_conf.pool_size = rmcf->pool_size;

    /* old argv strings may still be read by nobody: the fork copies */
    ngx_http_rlm_supervisor_free_conf(&old);

    if (!ccf->master) {
        /* master_process off: a plain child of the single process */

        if (ngx_http_rlm_supervisor_valid()) {
            return NGX_OK;
        }

        if (ccf->daemon && !ngx_inherited && ngx_process == NGX_PROCESS_SINGLE
            && !ngx_http_rlm_super_single_started)
        {
            /* the process that runs now exits when nginx daemonizes */
            return ngx_http_rlm_supervisor_defer_single(cycle);
        }

        return ngx_http_rlm_supervisor_spawn_single(cycle);
    }

    if (ngx_http_rlm_supervisor_valid()) {

        /* a reload: the manager keeps running, with its sessions */

        ngx_http_rlm_supervisor_close_channel(ngx_http_rlm_super_slot);

        if (restart) {
            ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                          "rlm: rlm_sandboxd or rlm_runtime_dir changed, "
                          "restarting rlm-sandboxd; live sessions are lost");

            /* not a failure: no backoff, no alert */

            z = rmcf->shm_zone->data;
            if (z->sh) {
                z->sh->super.planned = 1;
            }

            if (ngx_processes[ngx_http_rlm_super_slot].pid
                != NGX_HTTP_RLM_PLACEHOLDER_PID)
            {
                (void) kill(ngx_processes[ngx_http_rlm_super_slot].pid,
                            SIGTERM);
            }
        }

        return NGX_OK;
    }

    return ngx_http_rlm_supervisor_register(cycle);
}


/*
 * Adds the manager's slot as a respawnable process that has "exited", so
 * that the master's next ngx_reap_children() starts it.
 */

static ngx_int_t
ngx_http_rlm_supervisor_register(ngx_cycle_t *cycle)
{
    ngx_int_t         s;
    ngx_process_t    *p;

    for (s = 0; s < ngx_last_process; s++) {
        if (ngx_processes[s].pid == -1) {
            break;
        }
    }

    if (s == NGX_MAX_PROCESSES) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "rlm: no process slot left for rlm-sandboxd");
        return NGX_ERROR;
    }

    p = &ngx_processes[s];

    ngx_memzero(p, sizeof(ngx_process_t));

    p->pid = NGX_HTTP_RLM_PLACEHOLDER_PID;
    p->proc = ngx_http_rlm_supervisor_proc;
    p->data = &ngx_http_rlm_super_conf;
    p->name = ngx_http_rlm_super_name;
    p->channel[0] = -1;
    p->channel[1] = -1;
    p->exited = 1;
    p->respawn = 1;
    p->detached = 1;

    if (s == ngx_last_process) {
        ngx_last_process++;
    }

    ngx_http_rlm_super_slot = s;

    if (ngx_process == NGX_PROCESS_MASTER) {
        /* a reload: the master reaps as soon as it is back in its loop */
        (void) kill(ngx_pid, SIGCHLD);
        return NGX_OK;
    }

    /* startup: the master loop does not exist yet (nor, maybe, its pid) */

    ngx_http_rlm_super_pending = 1;

    if (!ngx_http_rlm_super_atfork) {
        if (pthread_atfork(NULL, ngx_http_rlm_supervisor_atfork_parent, NULL)
            != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                          "rlm: pthread_atfork() failed");
            return NGX_ERROR;
        }

        ngx_http_rlm_super_atfork = 1;
    }

    return NGX_OK;
}


/*
 * master_process off with daemon on: the manager must be a child of the
 * process that stays, so it is started right after the daemon fork, in
 * that child.
 */

static ngx_int_t
ngx_http_rlm_supervisor_defer_single(ngx_cycle_t *cycle)
{
    ngx_http_rlm_super_single_pending = 1;
    ngx_http_rlm_super_cycle = cycle;

    if (!ngx_http_rlm_super_child_atfork) {
        if (pthread_atfork(NULL, NULL, ngx_http_rlm_supervisor_atfork_child)
            != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                          "rlm: pthread_atfork() failed");
            return NGX_ERROR;
        }

        ngx_http_rlm_super_child_atfork = 1;
    }

    return NGX_OK;
}


static void
ngx_http_rlm_supervisor_atfork_child(void)
{
    if (!ngx_http_rlm_super_single_pending) {
        return;
    }

    ngx_http_rlm_super_single_pending = 0;

    (void) ngx_http_rlm_supervisor_spawn_single(ngx_http_rlm_super_cycle);
}


static ngx_int_t
ngx_http_rlm_supervisor_spawn_single(ngx_cycle_t *cycle)
{
    ngx_http_rlm_super_single_started = 1;
    ngx_http_rlm_super_parent = getpid();

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                  "rlm: master_process is off: rlm-sandboxd is started "
                  "but not restarted if it dies");

    if (ngx_spawn_process(cycle, ngx_http_rlm_supervisor_proc,
                          &ngx_http_rlm_super_conf,
                          ngx_http_rlm_super_name, NGX_PROCESS_DETACHED)
        == NGX_INVALID_PID)
    {
        return NGX_ERROR;
    }

    ngx_http_rlm_super_slot = ngx_process_slot;

    return NGX_OK;
}


/*
 * Runs in the parent of every fork.  Only the master, inside its loop
 * (where it keeps SIGCHLD blocked outside sigsuspend()), acts: the raised
 * SIGCHLD stays pending and makes the loop reap and start the manager.
 */

static void
ngx_http_rlm_supervisor_atfork_parent(void)
{
    sigset_t  set;

    if (!ngx_http_rlm_super_pending || ngx_process != NGX_PROCESS_MASTER) {
        return;
    }

    if (sigprocmask(SIG_BLOCK, NULL, &set) == -1
        || !sigismember(&set, SIGCHLD))
    {
        return;
    }

    ngx_http_rlm_super_pending = 0;

    (void) kill(getpid(), SIGCHLD);
}


static ngx_uint_t
ngx_http_rlm_supervisor_valid(void)
{
    ngx_int_t  s;

    s = ngx_http_rlm_super_slot;

    return s >= 0 && s < ngx_last_process
           && ngx_processes[s].pid != -1
           && ngx_processes[s].proc == ngx_http_rlm_supervisor_proc;
}


static void
ngx_http_rlm_supervisor_stop(ngx_cycle_t *cycle)
{
    ngx_process_t  *p;

    ngx_http_rlm_super_pending = 0;

    if (!ngx_http_rlm_supervisor_valid()) {
        ngx_http_rlm_super_slot = -1;
        return;
    }

    p = &ngx_processes[ngx_http_rlm_super_slot];

    p->respawn = 0;

    if (p->pid != NGX_HTTP_RLM_PLACEHOLDER_PID && !p->exited) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "rlm: stopping rlm-sandboxd %P", p->pid);

        if (kill(p->pid, SIGTERM) == -1 && ngx_errno != NGX_ESRCH) {
            ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_errno,
                          "kill(%P, SIGTERM) failed", p->pid);
        }
    }

    ngx_http_rlm_supervisor_close_channel(ngx_http_rlm_super_slot);

    /*
     * Forget the slot now: its name, handler and data live in this
     * module, which may be unloaded (at exit, or by a reload) before the
     * SIGCHLD of the manager is handled.  nginx then reaps it as an
     * "unknown process".
     */

    p->pid = -1;
    p->proc = NULL;
    p->data = NULL;
    p->name = NULL;

    if (ngx_http_rlm_super_slot == ngx_last_process - 1) {
        ngx_last_process--;
    }

    ngx_http_rlm_super_slot = -1;
}


/*
 * ngx_spawn_process() gives every respawned process a channel the
 * manager never reads; the master's ends are closed here, the copies the
 * workers receive in ngx_http_rlm_supervisor_worker_tidy().
 */

static void
ngx_http_rlm_supervisor_close_channel(ngx_int_t slot)
{
    ngx_process_t  *p;

    p = &ngx_processes[slot];

    if (p->channel[0] != -1) {
        (void) close(p->channel[0]);
        p->channel[0] = -1;
    }

    if (p->channel[1] != -1) {
        (void) close(p->channel[1]);
        p->channel[1] = -1;
    }
}


void
ngx_http_rlm_supervisor_worker_tidy(void)
{
    ngx_int_t  s;

    s = ngx_http_rlm_super_slot;

    if (s < 0 || s >= ngx_last_process || s == ngx_process_slot) {
        return;
    }

    if (ngx_processes[s].channel[0] != -1) {
        (void) close(ngx_processes[s].channel[0]);
        ngx_processes[s].channel[0] = -1;
    }
}


void
ngx_http_rlm_supervisor_exit(ngx_cycle_t *cycle)
{
    if (ngx_process == NGX_PROCESS_MASTER
        || ngx_process == NGX_PROCESS_SINGLE)
    {
        ngx_http_rlm_supervisor_stop(cycle);
    }

    /* every process holds a copy; memory checkers want it back */

    ngx_http_rlm_supervisor_free_conf(&ngx_http_rlm_super_conf);
    ngx_memzero(&ngx_http_rlm_super_conf, sizeof(ngx_http_rlm_super_conf_t));
}


static void
ngx_http_rlm_supervisor_cycle_cleanup(void *data)
{
    ngx_uint_t  generation = (uintptr_t) data;

    /* a later configuration took over: it decided about the manager */

    if (generation != ngx_http_rlm_super_generation
        || ngx_process != NGX_PROCESS_MASTER)
    {
        return;
    }

    ngx_http_rlm_supervisor_stop((ngx_cycle_t *) ngx_cycle);
}


static char **
ngx_http_rlm_supervisor_argv(ngx_cycle_t *cycle,
    ngx_http_rlm_main_conf_t *rmcf)
{
    char             **argv, *p;
    size_t             size;
    ngx_uint_t         i, n;
    ngx_uid_t          uid;
    ngx_gid_t          gid;
    ngx_core_conf_t   *ccf;
    u_char             num[3][NGX_INT64_LEN + 2];
    u_char             limits[5][NGX_INT64_LEN + 2];
    u_char             owner[2 * NGX_INT64_LEN + 2];
    char              *args[32];

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    /* the workers' user owns the sockets they connect to */

    uid = geteuid();
    gid = getegid();

    if (uid == 0 && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT) {
        uid = ccf->user;
        gid = ccf->group;
    }

    ngx_sprintf(owner, "%ui:%ui%Z", (ngx_uint_t) uid, (ngx_uint_t) gid);
    ngx_sprintf(num[0], "%ui%Z", rmcf->pool_size);
    ngx_sprintf(num[1], "%ui%Z", rmcf->max_sessions + rmcf->pool_size);
    ngx_sprintf(num[2], "%uz%Z",
                (rmcf->context_max_size + 1024 * 1024 - 1) / (1024 * 1024));
    ngx_sprintf(limits[0], "%T%Z", rmcf->cell_cpu_time);
    ngx_sprintf(limits[1], "%M%Z", rmcf->cell_timeout);
    ngx_sprintf(limits[2], "%uz%Z", rmcf->sandbox_memory / (1024 * 1024));
    ngx_sprintf(limits[3], "%ui%Z", rmcf->sandbox_pids);
    ngx_sprintf(limits[4], "%uz%Z", rmcf->output_max);

    /* the pool is forked with the limits acquire asks for, so it is used */

    n = 0;
    args[n++] = (char *) rmcf->sandboxd.data;
    args[n++] = "--runtime-dir";
    args[n++] = (char *) rmcf->runtime_dir.data;
    args[n++] = "--pool";
    args[n++] = (char *) num[0];
    args[n++] = "--max-sandboxes";
    args[n++] = (char *) num[1];
    args[n++] = "--max-blob-mb";
    args[n++] = (char *) num[2];
    args[n++] = "--socket-owner";
    args[n++] = (char *) owner;
    args[n++] = "--cpu-s";
    args[n++] = (char *) limits[0];
    args[n++] = "--wall-ms";
    args[n++] = (char *) limits[1];
    args[n++] = "--memory-mb";
    args[n++] = (char *) limits[2];
    args[n++] = "--pids";
    args[n++] = (char *) limits[3];
    args[n++] = "--output-bytes";
    args[n++] = (char *) limits[4];

    /* rlm_sandbox_allow_missing: the manager refuses to start otherwise */
    if (rmcf->allow_missing & NGX_HTTP_RLM_JAIL_CGROUPS) {
        args[n++] = "--allow-missing";
        args[n++] = "cgroups";
    }

    if (rmcf->allow_missing & NGX_HTTP_RLM_JAIL_ROOT) {
        args[n++] = "--allow-missing";
        args[n++] = "root";
    }

    args[n] = NULL;

    /* one allocation: the pointer array, then the strings */

    size = (n + 1) * sizeof(char *);

    for (i = 0; i < n; i++) {
        size += ngx_strlen(args[i]) + 1;
    }

    argv = ngx_alloc(size, cycle->log);
    if (argv == NULL) {
        return NULL;
    }

    p = (char *) (argv + n + 1);

    for (i = 0; i < n; i++) {
        argv[i] = p;
        p = (char *) ngx_cpymem(p, args[i], ngx_strlen(args[i]) + 1);
    }

    argv[n] = NULL;

    return argv;
}


static void
ngx_http_rlm_supervisor_free_conf(ngx_http_rlm_super_conf_t *sc)
{
    if (sc->path) {
        ngx_free(sc->path);
    }

    if (sc->runtime_dir) {
        ngx_free(sc->runtime_dir);
    }

    if (sc->argv) {
        ngx_free(sc->argv);
    }
}


/*
 * Runs in the master's freshly forked child, which becomes rlm-sandboxd.
 * Nothing of nginx survives the exec: signals back to defaults, only
 * stdin (/dev/null), stdout (/dev/null) and stderr (the error log), an
 * environment of PATH and LANG, plus the sanitizer settings nginx was
 * started with (as rlm-sandboxctl passes them), so that an instrumented
 * manager reports where the sanitizer run looks (make asan-test).
 */

static void
ngx_http_rlm_supervisor_proc(ngx_cycle_t *cycle, void *data)
{
    ngx_http_rlm_super_conf_t  *sc = data;

    int          fd, sig;
    char        *envp[6];
    sigset_t     set;
    ngx_uint_t   i, n;
    ngx_msec_t   delay;
    ngx_fd_t     log_fd;

    envp[0] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
              "/sbin:/bin";
    envp[1] = "LANG=C.UTF-8";
    n = 2;

    for (i = 0; environ[i] != NULL && n < 5; i++) {
        if (ngx_strncmp(environ[i], "ASAN_OPTIONS=", 13) == 0
            || ngx_strncmp(environ[i], "UBSAN_OPTIONS=", 14) == 0
            || ngx_strncmp(environ[i], "LSAN_OPTIONS=", 13) == 0)
        {
            envp[n++] = environ[i];
        }
    }

    envp[n] = NULL;

    for (sig = 1; sig < NSIG; sig++) {
        (void) signal(sig, SIG_DFL);
    }

    sigemptyset(&set);
    (void) sigprocmask(SIG_SETMASK, &set, NULL);

    /* die with nginx, even before the manager sets this itself */

    if (prctl(PR_SET_PDEATHSIG, SIGTERM) == -1
        || getppid() != (ngx_http_rlm_super_parent ? ngx_http_rlm_super_parent
                                                   : ngx_parent))
    {
        exit(1);
    }

    delay = ngx_http_rlm_supervisor_backoff(cycle);

    if (delay) {
        ngx_msleep(delay);
    }

    log_fd = cycle->log->file ? cycle->log->file->fd : NGX_INVALID_FILE;

    fd = open("/dev/null", O_RDWR);

    if (fd != -1) {
        (void) dup2(fd, STDIN_FILENO);
        (void) dup2(fd, STDOUT_FILENO);
    }

    if (log_fd != NGX_INVALID_FILE && log_fd != STDERR_FILENO) {
        (void) dup2(log_fd, STDERR_FILENO);
    }

    ngx_http_rlm_supervisor_close_fds();

    execve(sc->path, sc->argv, envp);

    ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_errno,
                  "rlm: execve(\"%s\") failed", sc->path);

    /* 2: the master does not respawn it; a reload tries again */
    exit(2);
}


/*
 * Closes every descriptor above stderr: nginx's listening sockets, its
 * channels, log and cache files.  close() one by one from /proc/self/fd
 * rather than close_range(), which memory checkers running nginx do not
 * expect to see closing their own descriptors.
 */

static void
ngx_http_rlm_supervisor_close_fds(void)
{
    int             fd, dfd;
    DIR            *dir;
    ngx_uint_t      i, n, pass;
    struct dirent  *de;
    int             fds[1024];

    for (pass = 0; pass < 64; pass++) {
        dir = opendir("/proc/self/fd");

        if (dir == NULL) {
            for (fd = 3; fd < 65536; fd++) {
                (void) close(fd);
            }

            return;
        }

        dfd = dirfd(dir);
        n = 0;

        while (n < 1024 && (de = readdir(dir)) != NULL) {
            fd = ngx_atoi((u_char *) de->d_name, ngx_strlen(de->d_name));

            if (fd > 2 && fd != dfd) {
                fds[n++] = fd;
            }
        }

        closedir(dir);

        for (i = 0; i < n; i++) {
            (void) close(fds[i]);
        }

        if (n < 1024) {
            return;
        }
    }
}


/*
 * A worker had a good answer from the manager of this generation: it
 * started and served, so its death is not a crash loop.  A reply that
 * an older manager sent just before it died does not count for the one
 * that replaced it.
 */

void
ngx_http_rlm_supervisor_served(ngx_atomic_uint_t generation)
{
    ngx_http_rlm_zone_t   *z;
    ngx_http_rlm_super_t  *sup;

    z = ngx_http_rlm_zone();
    if (z == NULL || z->sh == NULL || generation == 0) {
        return;
    }

    sup = &z->sh->super;

    if (sup->served != generation && sup->starts == generation) {
        ngx_shmtx_lock(&z->shpool->mutex);

        if (sup->starts == generation) {
            sup->served = generation;
        }

        ngx_shmtx_unlock(&z->shpool->mutex);
    }
}


/*
 * Back off on failures to start or to serve, not on uptime alone: a
 * manager that died before any worker had an answer from it (and within
 * 30 s of its start) is a fast failure, and restarts in such a row wait
 * 0.1 s, 0.2 s, ... up to 30 s.  A manager that answered, or lived 30 s,
 * was healthy: it is restarted at once and the count starts again.
 */

static ngx_msec_t
ngx_http_rlm_supervisor_backoff(ngx_cycle_t *cycle)
{
    time_t                     now;
    ngx_msec_t                 delay;
    ngx_uint_t                 restart, failures, planned, served;
    ngx_http_rlm_zone_t       *z;
    ngx_http_rlm_super_t      *sup;
    ngx_http_rlm_main_conf_t  *rmcf;

    /* the cycle given, not ngx_cycle: at startup that is not set yet */

    rmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_rlm_module);
    if (rmcf == NULL || rmcf->shm_zone == NULL) {
        return 0;
    }

    z = rmcf->shm_zone->data;
    if (z == NULL || z->sh == NULL) {
        return 0;
    }

    sup = &z->sh->super;
    now = ngx_time();
    delay = 0;

    ngx_shmtx_lock(&z->shpool->mutex);

    restart = (sup->starts > 0);
    planned = sup->planned;
    sup->planned = 0;

    served = (sup->served == sup->starts);

    if (restart && !planned) {
        if (!served && now - sup->last_start < NGX_HTTP_RLM_STABLE_SECS) {
            sup->fast_failures++;

        } else {
            sup->fast_failures = 0;
        }

        failures = sup->fast_failures;

        if (failures) {
            delay = NGX_HTTP_RLM_BACKOFF_MIN;

            while (--failures && delay < NGX_HTTP_RLM_BACKOFF_MAX) {
                delay *= 2;
            }

            delay = ngx_min(delay, NGX_HTTP_RLM_BACKOFF_MAX);
        }

        sup->restarts++;
    }

    sup->starts++;
    sup->last_start = now + delay / 1000;
    sup->pid = ngx_pid;

    ngx_shmtx_unlock(&z->shpool->mutex);

    if (restart && !planned) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "rlm: rlm-sandboxd exited%s, restarting it in %M ms "
                      "(restart %uA)",
                      served ? " after serving" : " before serving",
                      delay, sup->restarts);
    }

    return delay;
}
