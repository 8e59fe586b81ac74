#!/bin/sh
# Writes the nginx prefix that `make run` and the container image serve:
# the conf/ files as they are, and the generated files they include, from the RLM_* environment (README.md).  One script
# for both, so that the image cannot drift from `make run`.
#
#   TOP=... BUILD=... RUN_DIR=... PORT=... LOAD_MODULES="..." \
#       sh conf/run-prefix.sh
#
#   TOP           holds lua/ and conf/ (the checkout; the image's
#                 /usr/share/ngx_rlm)
#   BUILD         holds bin/rlm-sandboxd (build/; the image's
#                 /usr/lib/ngx_rlm)
#   RUN_DIR       the prefix: made anew but for trajectories/
#   PORT          the API's port; DEMO_PORT the demo model's (PORT + 1)
#   LOAD_MODULES  the .so files to load, in order
#
# The RLM_* variables read here: RLM_UPSTREAM_URL, RLM_API_KEY (only its
# presence: nginx reads the value at run time), RLM_MODEL, RLM_SUB_MODEL,
# RLM_KEYS_FILE, RLM_NODE_ID, RLM_NODES, RLM_ROUTES_FILE, RLM_LISTEN and
# RLM_CONF_D (docs/configuration.md, "make run and the image").

set -eu

: "${TOP:?}" "${BUILD:?}" "${RUN_DIR:?}" "${PORT:?}" "${LOAD_MODULES:?}"
DEMO_PORT=${DEMO_PORT:-$((PORT + 1))}
RLM_UPSTREAM_URL=${RLM_UPSTREAM_URL:-}
RLM_API_KEY=${RLM_API_KEY:-}
RLM_MODEL=${RLM_MODEL:-}
RLM_SUB_MODEL=${RLM_SUB_MODEL:-}
RLM_KEYS_FILE=${RLM_KEYS_FILE:-}
RLM_NODE_ID=${RLM_NODE_ID:-}
RLM_NODES=${RLM_NODES:-}
RLM_ROUTES_FILE=${RLM_ROUTES_FILE:-}
RLM_LISTEN=${RLM_LISTEN:-}
RLM_CONF_D=${RLM_CONF_D:-}

mkdir -p "$RUN_DIR"
RUN=$(cd "$RUN_DIR" && pwd)
find "$RUN" -mindepth 1 -maxdepth 1 ! -name trajectories -exec rm -rf {} +
mkdir -p "$RUN/conf" "$RUN/logs"
conf=$RUN/conf

cp "$TOP"/conf/*.conf "$conf/"
cp -R "$TOP/conf/viewer" "$RUN/viewer"

{
    echo "lua_package_path \"$TOP/lua/?.lua;;\";"
    echo "rlm_sandboxd $BUILD/bin/rlm-sandboxd;"
    echo "rlm_runtime_dir $RUN/rt;"
} > "$conf/paths.conf"

echo "listen 127.0.0.1:$DEMO_PORT;" > "$conf/demo-listen.conf"

for m in $LOAD_MODULES; do
    echo "load_module $m;"
done > "$conf/modules.conf"

# the provider: RLM_UPSTREAM_URL, else the demo model of rlm.conf
if [ -n "$RLM_UPSTREAM_URL" ]; then
    printf 'rlm_provider upstream "url=%s"%s%s;\n' "$RLM_UPSTREAM_URL" \
        "${RLM_API_KEY:+ key_env=RLM_API_KEY}" \
        "${RLM_MODEL:+ \"model=$RLM_MODEL\"}"
else
    echo "rlm_provider demo url=http://127.0.0.1:$DEMO_PORT/v1 model=rlm-demo;"
fi > "$conf/provider.conf"

# a JSON string
q() {
    printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"
}

# With a provider, the routes send RLM_MODEL (listed by GET /v1/models)
# and any other model name to it, with RLM_SUB_MODEL as the model of
# sub-calls: the policy hands that to the completions location, where a
# rlm_completion_sub_model at http level would be hidden by the
# location's `rlm_completion_sub_model $rlm_sub_model;` (empty without a
# route).  RLM_ROUTES_FILE replaces these routes with a file of its own.
if [ -n "$RLM_ROUTES_FILE" ]; then
    routes=$RLM_ROUTES_FILE
elif [ -n "$RLM_UPSTREAM_URL" ]; then
    routes=$conf/routes.json
    up='"provider": "upstream"'
    now=$(date +%s)
    sub=
    models=
    [ -z "$RLM_SUB_MODEL" ] || sub=", \"sub_model\": $(q "$RLM_SUB_MODEL")"
    [ -z "$RLM_MODEL" ] \
        || models="$(q "$RLM_MODEL"): { $up$sub, \"created\": $now }"
    if [ -n "$RLM_SUB_MODEL" ] && [ "$RLM_SUB_MODEL" != "$RLM_MODEL" ]; then
        models="${models:+$models, }$(q "$RLM_SUB_MODEL"): { $up, \"created\": $now }"
    fi
    printf '{ "models": { %s }, "default": { %s } }\n' "$models" "$up$sub" \
        > "$routes"
else
    routes=$TOP/conf/routes.json
fi

{
    if [ -n "$RLM_NODE_ID" ]; then
        echo "rlm_node_id $RLM_NODE_ID;"
        for n in $RLM_NODES; do
            echo "upstream rlm_node_${n%%=*} { server ${n#*=}; keepalive 16; }"
        done
        printf '%s' 'init_by_lua_block { require("rlm.cluster").configure{ nodes = "'
        for n in $RLM_NODES; do
            printf '%s' "${n%%=*}=rlm_node_${n%%=*} "
        done
        printf '%s' '", probe = "'
        for n in $RLM_NODES; do
            printf '%s' "$n "
        done
        echo '" }'
        echo 'require("rlm.policy").configure{'
    else
        echo 'init_by_lua_block { require("rlm.policy").configure{'
    fi
    echo '    -- rlm_context_max_size and the 1 MiB the completions'
    echo '    -- handler allows on top: a bigger Content-Length is'
    echo '    -- refused before the body is read'
    echo '    body_max = (256 + 1) * 1024 * 1024,'
    echo "    routes_file = \"$routes\","
    if [ -n "$RLM_KEYS_FILE" ]; then
        echo "    keys_file = \"$(realpath "$RLM_KEYS_FILE")\","
    fi
    echo '} }'
} > "$conf/policy-setup.conf"

# loopback, unless client keys are required (or RLM_LISTEN says where)
if [ -n "$RLM_LISTEN" ]; then
    echo "listen $RLM_LISTEN;"
elif [ -n "$RLM_KEYS_FILE" ]; then
    echo "listen $PORT;"
else
    echo "listen 127.0.0.1:$PORT;"
fi > "$conf/listen.conf"

# the operator's own http-level configuration (the image sets
# RLM_CONF_D=/etc/ngx_rlm/conf.d): every *.conf there, last in http {}
if [ -n "$RLM_CONF_D" ]; then
    echo "include $RLM_CONF_D/*.conf;"
else
    echo "# RLM_CONF_D unset: nothing added"
fi > "$conf/local.conf"
