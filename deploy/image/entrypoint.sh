#!/bin/sh
# The image's entrypoint: writes the run prefix with conf/run-prefix.sh,
# the script `make run` uses, from the same RLM_* environment, then execs
# nginx in the foreground, so that nginx's master is PID 1 (it starts and
# supervises rlm-sandboxd).  Logs: the error log on stderr, the access
# log on stdout.
#
# Arguments, if any, are passed to nginx (e.g. -t); a first argument
# that is not an option is run instead (a shell: `... run -it IMAGE sh`).

set -eu

if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi

export TOP=/usr/share/ngx_rlm
export BUILD=/usr/lib/ngx_rlm
export RUN_DIR=${RLM_RUN_DIR:-/var/lib/ngx_rlm}
export PORT=${RLM_PORT:-8080}
export LOAD_MODULES="/usr/lib/nginx/modules/ndk_http_module.so
    /usr/lib/nginx/modules/ngx_http_lua_module.so
    $BUILD/ngx_http_rlm_module.so"

sh "$TOP/conf/run-prefix.sh"

# the workers (user nobody) go through the prefix to the manager's sockets
chmod 0755 "$RUN_DIR"
ln -sf /dev/stdout "$RUN_DIR/logs/access.log"

exec /usr/sbin/nginx -p "$RUN_DIR" -c conf/rlm.conf -e stderr \
    -g 'daemon off;' "$@"
