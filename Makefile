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
#   make image        the OCI image $(IMAGE) with podman (deploy/Containerfile)
#   make image-test   t/image.t: that image under runc and under gVisor
#   make npm-deps     npm packages for t/openai_sdk.t and t/deploy_k8s.t
#                     (build/npm)
#   make install      install under DESTDIR (PREFIX=/usr), docs/install.md
#   make deb          the Debian packages, into build/deb (docs/install.md)

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
# A headless-browser driver for t/viewer.t, which opens the trajectory
# viewer in Debian's chromium (no browser download: puppeteer-core).
# 24.x is the last line for Node < 22.
PUPPETEER_NPM ?= 24.43.1
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
        valgrind-test valgrind-test-run fuzz bench-llm clean npm-deps \
        install deb image image-test

all: deps module sandbox

# NO_DEPS=1: build with what is installed and install nothing (package
# builds, where the build dependencies are the packaging's business)
NO_DEPS   ?=

deps:
	@$(if $(NO_DEPS),true,sh .ci/install-deps)

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

# A private prefix holds the conf/ files as they are, and the files they
# include that depend on this checkout, build, port and environment;
# t/conf_files.t, t/conf_auth.t and t/conf_run.t use it too.  Everything
# in it is made anew at each run but trajectories/, where the completions'
# trajectories accumulate; viewer/ is a copy of conf/viewer/, the
# trajectory viewer rlm.conf serves.
RUN_DIR ?= $(B)/run

# the demo model's own port, next to the API's (make run without a
# provider: RLM_UPSTREAM_URL unset)
DEMO_PORT = $(shell echo $$(($(PORT) + 1)))

# conf/run-prefix.sh writes it, from the RLM_* environment (README.md);
# the container image's entrypoint runs the same script.
run-prefix:
	@TOP=$(TOP) BUILD=$(B) RUN_DIR=$(RUN_DIR) PORT=$(PORT) \
	    DEMO_PORT=$(DEMO_PORT) LOAD_MODULES="$(LOAD_MODULES)" \
	    sh conf/run-prefix.sh

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
          $(NPM_DIR)/k8s-$(K8S_MODELS_NPM)-yaml-$(YAML_NPM).stamp \
          $(NPM_DIR)/puppeteer-core-$(PUPPETEER_NPM).stamp

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

# after the others, for the same reason
$(NPM_DIR)/puppeteer-core-$(PUPPETEER_NPM).stamp: | deps \
        $(NPM_DIR)/k8s-$(K8S_MODELS_NPM)-yaml-$(YAML_NPM).stamp
	@if command -v npm >/dev/null 2>&1; then \
	    PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-audit --no-fund \
	        --save-exact --prefix $(NPM_DIR) \
	        puppeteer-core@$(PUPPETEER_NPM) \
	    && rm -f $(NPM_DIR)/puppeteer-core-*.stamp && touch $@; \
	elif [ -n "$$RLM_REQUIRE_NODE" ]; then \
	    echo "ngx_rlm: npm is missing: apt-get install nodejs npm" >&2; \
	    exit 1; \
	else \
	    echo "ngx_rlm: no npm: t/viewer.t will be skipped" >&2; \
	fi

# The OCI image (docs/deploy.md, "Image"): a Debian 12 base made with
# debootstrap from this machine's apt mirror and kept in build/image
# (deploy/image/base.sh), then deploy/Containerfile with the runtime
# packages and this build, staged in build/image/ctx.  Podman here needs
# the cgroupfs manager (no systemd session).
IMAGE     ?= localhost/ngx-rlm:latest
PODMAN    ?= podman --cgroup-manager=cgroupfs
IMG_DIR   := $(TOP)/build/image

image: all
	sh deploy/image/base.sh $(IMG_DIR) $(PODMAN)
	rm -rf $(IMG_DIR)/ctx
	mkdir -p $(IMG_DIR)/ctx/lib/bin $(IMG_DIR)/ctx/share
	cp $(MODULE) $(IMG_DIR)/ctx/lib/
	cp $(B)/bin/rlm-sandboxd $(B)/bin/rlm-sandboxctl $(IMG_DIR)/ctx/lib/bin/
	cp -r lua conf $(IMG_DIR)/ctx/share/
	cp deploy/image/entrypoint.sh $(IMG_DIR)/ctx/
	$(PODMAN) build --quiet --network=host -f deploy/Containerfile \
	    -t $(IMAGE) $(IMG_DIR)/ctx

# t/image.t skips unless RLM_IMAGE names an image (as here)
image-test:
	RLM_IMAGE=$(IMAGE) PODMAN="$(PODMAN)" prove -I t/lib -I t t/image.t

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

# Installed like Debian's own nginx modules (docs/install.md).  The
# module and its load_module snippet go where nginx looks for them, which
# does not move with PREFIX; the rest follows PREFIX.  The REPL runtime is
# compiled into rlm-sandboxd: installing the manager installs it.
PREFIX     ?= /usr
DESTDIR    ?=
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
NGX_MODULES_DIR   ?= /usr/lib/nginx/modules
NGX_MODULES_AVAIL ?= /usr/share/nginx/modules-available
RLM_LIBDIR ?= $(PREFIX)/lib/ngx_rlm
LUA_DIR    ?= $(PREFIX)/share/lua/5.1
RLM_CONFDIR ?= $(SYSCONFDIR)/nginx/rlm
DOCDIR     ?= $(PREFIX)/share/doc/ngx_rlm
UNIT_DIR   ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)

# nginx resolves a relative load_module path against its prefix, whose
# modules/ is Debian's modules directory
MOD_LOAD_PATH = $(if $(filter /usr/lib/nginx/modules,$(NGX_MODULES_DIR)),modules,$(NGX_MODULES_DIR))/ngx_http_rlm_module.so

install: module sandbox
	install -d $(DESTDIR)$(NGX_MODULES_DIR) $(DESTDIR)$(NGX_MODULES_AVAIL) \
	    $(DESTDIR)$(RLM_LIBDIR) $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(LUA_DIR)/rlm $(DESTDIR)$(LUA_DIR)/resty \
	    $(DESTDIR)$(RLM_CONFDIR) $(DESTDIR)$(DOCDIR) $(DESTDIR)$(UNIT_DIR)
	install -m 644 $(MODULE) $(DESTDIR)$(NGX_MODULES_DIR)/
	echo 'load_module $(MOD_LOAD_PATH);' \
	    > $(DESTDIR)$(NGX_MODULES_AVAIL)/mod-http-rlm.conf
	chmod 644 $(DESTDIR)$(NGX_MODULES_AVAIL)/mod-http-rlm.conf
	install -m 755 $(SANDBOXD) $(DESTDIR)$(RLM_LIBDIR)/
	install -m 755 $(B)/bin/rlm-sandboxctl $(DESTDIR)$(PREFIX)/bin/
	install -m 644 lua/rlm/*.lua $(DESTDIR)$(LUA_DIR)/rlm/
	install -m 644 lua/resty/*.lua $(DESTDIR)$(LUA_DIR)/resty/
	for f in conf/*.conf conf/*.json; do \
	    sed 's|/usr/lib/ngx_rlm/|$(RLM_LIBDIR)/|g' $$f \
	        > $(DESTDIR)$(RLM_CONFDIR)/$$(basename $$f) \
	    && chmod 644 $(DESTDIR)$(RLM_CONFDIR)/$$(basename $$f) || exit 1; \
	done
	sed -e 's|/usr/lib/ngx_rlm/|$(RLM_LIBDIR)/|g' \
	    -e 's|/usr/share/doc/ngx_rlm/|$(DOCDIR)/|g' \
	    deploy/systemd/rlm-sandboxd.service \
	    > $(DESTDIR)$(UNIT_DIR)/rlm-sandboxd.service
	chmod 644 $(DESTDIR)$(UNIT_DIR)/rlm-sandboxd.service
	install -m 644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/

# The Debian packages (debian/), built by dpkg-buildpackage in a copy of
# the checkout under build/deb, where the .deb files land
DEB_DIR := $(TOP)/build/deb

deb:
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/src
	git ls-files -co --exclude-standard -z | grep -zv '^build/' \
	    | xargs -0 tar cf - | tar xf - -C $(DEB_DIR)/src
	cd $(DEB_DIR)/src && dpkg-buildpackage -us -uc -b
	@ls $(DEB_DIR)/*.deb

clean:
	rm -rf build t/servroot*
