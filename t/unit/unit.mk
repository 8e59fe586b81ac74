# Unit tests and fuzz targets of the module's plain-C parsers.
#
#   make -f t/unit/unit.mk            build/unit/parse_test (ASan + UBSan)
#   make -f t/unit/unit.mk check      build and run it (TAP)
#   make -f t/unit/unit.mk fuzz       build/fuzz/* with clang's libFuzzer
#
# t/unit_parse.t builds and runs parse_test, so `make test` covers it.

UNIT_BUILD ?= build/unit
FUZZ_BUILD ?= build/fuzz
UNIT_CC    ?= cc
FUZZ_CC    ?= clang
UNIT_FLAGS := -g -O1 -Wall -Wextra -Werror -fno-omit-frame-pointer \
              -fsanitize=address,undefined -fno-sanitize-recover=all \
              -Ingx_rlm_module

PARSERS    := ngx_rlm_module/ngx_http_rlm_parse.c \
              ngx_rlm_module/ngx_http_rlm_sse.c \
              ngx_rlm_module/ngx_http_rlm_jsonstr.c
PARSER_HS  := ngx_rlm_module/ngx_http_rlm_parse.h \
              ngx_rlm_module/ngx_http_rlm_sse.h \
              ngx_rlm_module/ngx_http_rlm_jsonstr.h

.PHONY: unit check fuzz

unit: $(UNIT_BUILD)/parse_test

check: unit
	$(UNIT_BUILD)/parse_test

$(UNIT_BUILD)/parse_test: t/unit/parse_test.c $(PARSERS) $(PARSER_HS)
	@mkdir -p $(UNIT_BUILD)
	$(UNIT_CC) $(UNIT_FLAGS) -o $@ t/unit/parse_test.c $(PARSERS)

fuzz: $(FUZZ_BUILD)/fuzz_parse $(FUZZ_BUILD)/fuzz_sse $(FUZZ_BUILD)/fuzz_jsonstr \
      $(FUZZ_BUILD)/fuzz_proto

# The protocol layer includes the module's header from its own folder:
# it is copied next to a plain-C stand-in for that header and built there.
PROTO_SRC  := ngx_rlm_module/ngx_http_rlm_proto.c \
              ngx_rlm_module/ngx_http_rlm_proto.h \
              t/fuzz/proto_shim/ngx_http_rlm_module.h

# what the layer costs per cell, measured alone (bench/proto_decode.c)
build/bench/proto_decode: bench/proto_decode.c $(PROTO_SRC)
	@mkdir -p build/bench/proto
	cp $(PROTO_SRC) build/bench/proto/
	$(UNIT_CC) -O2 -Wall -Werror -Ibuild/bench/proto -o $@ $< \
	    build/bench/proto/ngx_http_rlm_proto.c -ljansson

$(FUZZ_BUILD)/fuzz_proto: t/fuzz/fuzz_proto.c $(PROTO_SRC)
	@mkdir -p $(FUZZ_BUILD)/proto
	cp $(PROTO_SRC) $(FUZZ_BUILD)/proto/
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined \
	    -I$(FUZZ_BUILD)/proto -o $@ $< $(FUZZ_BUILD)/proto/ngx_http_rlm_proto.c \
	    -ljansson

$(FUZZ_BUILD)/fuzz_%: t/fuzz/fuzz_%.c $(PARSERS) $(PARSER_HS)
	@mkdir -p $(FUZZ_BUILD)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined \
	    -Ingx_rlm_module -o $@ $< $(PARSERS) -ljansson

# what the gateway counters cost per completion, measured alone
# (bench/metrics_hooks.c), against the configured nginx tree of `make`
NGX_TREE   ?= build/nginx-src
build/bench/metrics_hooks: bench/metrics_hooks.c \
                           ngx_rlm_module/ngx_http_rlm_metrics.c \
                           ngx_rlm_module/ngx_http_rlm_metrics.h \
                           ngx_rlm_module/ngx_http_rlm_module.h
	@mkdir -p build/bench
	$(UNIT_CC) -O2 -Wall -Werror -Wno-unused-function -no-pie \
	    -I$(NGX_TREE)/objs -I$(NGX_TREE)/src/core -I$(NGX_TREE)/src/event \
	    -I$(NGX_TREE)/src/event/modules -I$(NGX_TREE)/src/os/unix \
	    -I$(NGX_TREE)/src/http -I$(NGX_TREE)/src/http/modules \
	    -I$(NGX_TREE)/src/http/v2 \
	    -Ingx_rlm_module -o $@ $< -ljansson -lcurl \
	    -Wl,--unresolved-symbols=ignore-all
