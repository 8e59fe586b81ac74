# ngx_rlm: build, run and test.
#
#   make              build the module and rlm-sandboxd into build/
#   make run          serve on 127.0.0.1:$(PORT) in the foreground
#   make test         build and run every test suite
#   make test-real    the same under the CPAN Test::Nginx (REAL_TEST_NGINX)
#   make asan         build with AddressSanitizer + UBSan into build/asan
#   make asan-test    run the suites against the ASan build; fails on any
#                     sanitizer report
#   make asan-quick   the same for a few suites (CI)
#   make valgrind-test  run the suites with nginx under valgrind memcheck
#                     (its own build in build/valgrind)
#   make fuzz         run the parser fuzzers (FUZZ_SECONDS each)
#   make npm-deps     npm packages for t/openai_sdk.t and t/deploy_k8s.t
#                     (build/npm)

PORT      ?= 8080
SAN       ?=
BUILD     ?= $(if $(SAN),build/asan,build)
B         := $(abspath $(BUILD))
TOP       := $(abspath .)

NGINX     ?= /usr/sbin/nginx
NGX_SRC   ?= /usr/share/nginx/src
NGX_MODS  := /usr/lib/nginx/modules
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer

MODULE    := $(B)/ngx_http_rlm_module.so
SANDBOXD  := $(B)/bin/rlm-sandboxd
MOD_SRCS  := $(wildcard ngx_rlm_module/*.c ngx_rlm_module/*.h) config

LOAD_MODULES := $(NGX_MODS)/ndk_http_module.so \
                $(NGX_MODS)/ngx_http_lua_module.so $(MODULE)

# The official OpenAI SDK, for t/openai_sdk.t.  4.x is the last line that
# supports Node 18 (Debian 12's nodejs); 5.x and later want Node 20.
OPENAI_NPM ?= 4.104.0
# The Kubernetes API schemas and a YAML parser, for t/deploy_k8s.t
# (deploy/k8s/validate.cjs).  kubernetes-models 4.5.x is the last line
# for Node < 22.
K8S_MODELS_NPM ?= 4.5.1
YAML_NPM  ?= 2.9.1
NPM_DIR   := $(TOP)/build/npm

PROVE_ENV := TEST_NGINX_BINARY=$(NGINX) \
             TEST_NGINX_LOAD_MODULES="$(LOAD_MODULES)" \
             RLM_BUILD=$(B) \
             RLM_SANDBOXD=$(B)/bin/rlm-sandboxd \
             RLM_SANDBOXCTL=$(B)/bin/rlm-sandboxctl \
             RLM_NODE_MODULES=$(NPM_DIR)/node_modules

TESTS     ?= t/

.PHONY: all deps module sandbox run-prefix run test test-real asan asan-test \
        asan-test-run asan-quick \
        valgrind-test valgrind-test-run fuzz bench-llm clean npm-deps

all: deps module sandbox

deps:
	@sh .ci/install-deps

module: $(MODULE)

# nginx's own build system compiles the addon against Debian's nginx
# sources, with Debian's configure flags so the binary signature matches.
$(B)/nginx-src/objs/Makefile: config | deps
	rm -rf $(B)/nginx-src
	mkdir -p $(B)
	cp -r $(NGX_SRC) $(B)/nginx-src
	cd $(B)/nginx-src && bash -c '. ./conf_flags && \
	    ./configure "$${NGX_CONF_FLAGS[@]}" \
	        --with-cc-opt="-g -O2 -fPIC $(if $(SAN),$(SAN_FLAGS))" \
	        --with-ld-opt="-Wl,-z,relro -Wl,-z,now -fPIC \
	                       $(if $(SAN),$(SAN_FLAGS))" \
	        --add-dynamic-module=$(TOP)' > $(B)/nginx-configure.log

$(MODULE): $(B)/nginx-src/objs/Makefile $(MOD_SRCS)
	$(MAKE) -s -C $(B)/nginx-src -f objs/Makefile modules
	cp $(B)/nginx-src/objs/ngx_http_rlm_module.so $@.tmp
	mv $@.tmp $@

sandbox: | deps
	$(MAKE) -s -C sandbox BUILD=$(B) SAN=$(SAN)

# A private prefix holds the conf/ files, with the port substituted, and
# the load_module lines for this build; t/conf_files.t, t/conf_auth.t and
# t/conf_run.t use it too.  Everything in it is made anew at each run but
# trajectories/, where the completions' trajectories accumulate.
RUN_DIR ?= $(B)/run

# the demo model's own port, next to the API's (make run without a
# provider: RLM_UPSTREAM_URL unset)
DEMO_PORT = $(shell echo $$(($(PORT) + 1)))

# With a provider (RLM_UPSTREAM_URL), conf/routes.json of the run prefix
# routes RLM_MODEL (listed by GET /v1/models) and any other model name to
# it, with RLM_SUB_MODEL as the model of sub-calls: the policy hands that
# to the completions location, where a rlm_completion_sub_model at http
# level would be hidden by the location's `rlm_completion_sub_model
# $rlm_sub_model;` (empty without a route).
run-prefix:
	@mkdir -p $(RUN_DIR) && find $(RUN_DIR) -mindepth 1 -maxdepth 1 \
	    ! -name trajectories -exec rm -rf {} + \
	 && mkdir -p $(RUN_DIR)/conf $(RUN_DIR)/logs
	@for f in conf/*.conf; do \
	    sed -e 's/8080/$(PORT)/g' -e 's/8081/$(DEMO_PORT)/g' \
	        -e 's|@TOP@|$(TOP)|g' \
	        -e 's|@BUILD@|$(B)|g' -e 's|@RUN@|$(abspath $(RUN_DIR))|g' \
	        $$f > $(RUN_DIR)/conf/$$(basename $$f); \
	done
	@for m in $(LOAD_MODULES); do echo "load_module $$m;"; done \
	    > $(RUN_DIR)/conf/modules.conf
	@{ if [ -n "$$RLM_UPSTREAM_URL" ]; then \
	    echo "rlm_provider upstream \"url=$$RLM_UPSTREAM_URL\"$${RLM_API_KEY:+ key_env=RLM_API_KEY}$${RLM_MODEL:+ \"model=$$RLM_MODEL\"};"; \
	  else \
	    echo "rlm_provider demo url=http://127.0.0.1:$(DEMO_PORT)/v1 model=rlm-demo;"; \
	  fi; } > $(RUN_DIR)/conf/provider.conf
	@if [ -n "$$RLM_UPSTREAM_URL" ]; then \
	  q() { printf '"%s"' "$$(printf '%s' "$$1" | sed 's/[\\"]/\\&/g')"; }; \
	  up='"provider": "upstream"'; now=$$(date +%s); sub=; models=; \
	  [ -z "$$RLM_SUB_MODEL" ] || sub=", \"sub_model\": $$(q "$$RLM_SUB_MODEL")"; \
	  [ -z "$$RLM_MODEL" ] || \
	    models="$$(q "$$RLM_MODEL"): { $$up$$sub, \"created\": $$now }"; \
	  if [ -n "$$RLM_SUB_MODEL" ] && [ "$$RLM_SUB_MODEL" != "$$RLM_MODEL" ]; then \
	    models="$${models:+$$models, }$$(q "$$RLM_SUB_MODEL"): { $$up, \"created\": $$now }"; \
	  fi; \
	  printf '{ "models": { %s }, "default": { %s } }\n' \
	      "$$models" "$$up$$sub" \
	    > $(RUN_DIR)/conf/routes.json; \
	fi
	@{ if [ -n "$$RLM_NODE_ID" ]; then \
	    echo "rlm_node_id $$RLM_NODE_ID;"; \
	    for n in $$RLM_NODES; do \
	      echo "upstream rlm_node_$${n%%=*} { server $${n#*=}; keepalive 16; }"; \
	    done; \
	  fi; \
	  if [ -n "$$RLM_NODE_ID" ]; then \
	    printf '%s' 'init_by_lua_block { require("rlm.cluster").configure{ nodes = "'; \
	    for n in $$RLM_NODES; do printf '%s' "$${n%%=*}=rlm_node_$${n%%=*} "; done; \
	    echo '" }'; \
	    echo 'require("rlm.policy").configure{'; \
	  else \
	    echo 'init_by_lua_block { require("rlm.policy").configure{'; \
	  fi; \
	  echo '    -- rlm_context_max_size and the 1 MiB the completions'; \
	  echo '    -- handler allows on top: a bigger Content-Length is'; \
	  echo '    -- refused before the body is read'; \
	  echo '    body_max = (256 + 1) * 1024 * 1024,'; \
	  if [ -z "$$RLM_UPSTREAM_URL" ]; then \
	    echo '    routes_file = "$(TOP)/conf/routes.json",'; \
	  else \
	    echo '    routes_file = "$(abspath $(RUN_DIR))/conf/routes.json",'; \
	  fi; \
	  if [ -n "$$RLM_KEYS_FILE" ]; then \
	    echo "    keys_file = \"$$(realpath "$$RLM_KEYS_FILE")\","; \
	  fi; \
	  echo '} }'; } > $(RUN_DIR)/conf/policy-setup.conf
	@if [ -n "$$RLM_KEYS_FILE" ]; then echo "listen $(PORT);"; \
	 else echo "listen 127.0.0.1:$(PORT);"; fi > $(RUN_DIR)/conf/listen.conf

run: all run-prefix
	@echo "ngx_rlm: serving on http://127.0.0.1:$(PORT)/ (Ctrl-C stops)"
	exec $(NGINX) -p $(RUN_DIR) -c conf/rlm.conf -e stderr \
	    -g 'daemon off;'

test: all npm-deps
	$(PROVE_ENV) prove -I t/lib -I t -r $(TESTS)

# The same suites under the unmodified CPAN Test::Nginx instead of our
# runner in t/lib (not packaged in Debian: a copy of its lib/ beside the
# checkout, as CI has it).  Skipped, saying so, when it is not there.
REAL_TEST_NGINX ?= ../shared/vendor/test-nginx/lib

test-real: all npm-deps
	@if [ -d $(REAL_TEST_NGINX)/Test/Nginx ]; then \
	    echo "ngx_rlm: the suites under the CPAN Test::Nginx in $(REAL_TEST_NGINX)"; \
	    $(PROVE_ENV) prove -I $(REAL_TEST_NGINX) -I t -r $(TESTS); \
	else \
	    echo "ngx_rlm: test-real skipped: no Test::Nginx in $(REAL_TEST_NGINX)"; \
	fi

# Installed from npm once per version (the stamps).  Without npm the
# suites that need them are skipped, unless RLM_REQUIRE_NODE is set (CI).
npm-deps: $(NPM_DIR)/openai-$(OPENAI_NPM).stamp \
          $(NPM_DIR)/k8s-$(K8S_MODELS_NPM)-yaml-$(YAML_NPM).stamp

$(NPM_DIR)/openai-$(OPENAI_NPM).stamp: | deps
	@if command -v npm >/dev/null 2>&1; then \
	    npm install --no-audit --no-fund --save-exact \
	        --prefix $(NPM_DIR) openai@$(OPENAI_NPM) \
	    && rm -f $(NPM_DIR)/openai-*.stamp && touch $@; \
	elif [ -n "$$RLM_REQUIRE_NODE" ]; then \
	    echo "ngx_rlm: npm is missing: apt-get install nodejs npm" >&2; \
	    exit 1; \
	else \
	    echo "ngx_rlm: no npm: t/openai_sdk.t will be skipped" >&2; \
	fi

# after the openai one: two npm installs must not share build/npm at once
$(NPM_DIR)/k8s-$(K8S_MODELS_NPM)-yaml-$(YAML_NPM).stamp: | deps \
        $(NPM_DIR)/openai-$(OPENAI_NPM).stamp
	@if command -v npm >/dev/null 2>&1; then \
	    npm install --no-audit --no-fund --save-exact \
	        --prefix $(NPM_DIR) kubernetes-models@$(K8S_MODELS_NPM) \
	        yaml@$(YAML_NPM) \
	    && rm -f $(NPM_DIR)/k8s-*.stamp && touch $@; \
	elif [ -n "$$RLM_REQUIRE_NODE" ]; then \
	    echo "ngx_rlm: npm is missing: apt-get install nodejs npm" >&2; \
	    exit 1; \
	else \
	    echo "ngx_rlm: no npm: t/deploy_k8s.t will be skipped" >&2; \
	fi

asan:
	$(MAKE) SAN=1 all

# the suites against build/asan: SAN=1 in a sub-make, so that PROVE_ENV
# points at that build and not at build/.  Every sanitizer report of any
# process (nginx's master and workers through the preloaded runtime,
# rlm-sandboxd and its tools, which nginx and rlm-sandboxctl hand the
# settings to) is written to a file under SAN_REPORTS instead of stderr;
# the run fails if one exists, whatever prove said, and prints it.
# Sandboxes cannot write there from their jail: a report in one kills
# it (abort_on_error), which the suites see as a lost sandbox.
SAN_REPORTS = $(B)/sanitizer-reports
SAN_LOG     = log_path=$(SAN_REPORTS)/report:log_exe_name=1

asan-test:
	$(MAKE) SAN=1 asan-test-run

asan-test-run: all npm-deps
	@rm -rf $(SAN_REPORTS) && mkdir -p $(SAN_REPORTS) \
	    && chmod 1777 $(SAN_REPORTS)
	@rc=0; \
	$(PROVE_ENV) LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
	    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:$(SAN_LOG) \
	    UBSAN_OPTIONS=print_stacktrace=1:$(SAN_LOG) \
	    RLM_SANITIZED=1 \
	    prove -I t/lib -I t -r $(TESTS) || rc=$$?; \
	sh t/sanitizer-reports.sh $(SAN_REPORTS) || rc=1; \
	exit $$rc

# A CI-sized sanitizer pass: a few suites that go through every layer
# (HTTP API, completions loop with sub-calls, cells, supervision, the
# sandbox manager on its own): 7 minutes on a 2-core box shared with
# other builds (load average 20-30), less on an idle one.
ASAN_QUICK ?= t/rlm_loop.t t/api_eval.t t/api_sessions.t t/rlm_calls.t \
              t/module_supervision.t t/sandbox/control.t

asan-quick:
	$(MAKE) SAN=1 asan-test-run TESTS="$(ASAN_QUICK)"

# valgrind gets a build of its own (build/valgrind, same flags as
# build/), so that it never runs, nor needs, whatever build/ holds
valgrind-test:
	$(MAKE) BUILD=build/valgrind valgrind-test-run

valgrind-test-run: all
	$(PROVE_ENV) TEST_NGINX_USE_VALGRIND=1 prove -I t/lib -I t -r $(TESTS)

# libFuzzer targets for the response and SSE parsers (needs clang)
fuzz:
	@command -v clang >/dev/null || apt-get install -y -qq clang
	t/fuzz/run.sh $(or $(FUZZ_SECONDS),60)

bench-llm: all
	RLM_MODULE=$(MODULE) bench/llm_batched

clean:
	rm -rf build t/servroot*
