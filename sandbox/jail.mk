# The sandbox jail: objects for rlm-sandboxd and a standalone self-test.
#
# Include from sandbox/Makefile:      include $(RLM_JAIL_DIR)jail.mk
# or run alone (from the repo root):   make -f sandbox/jail.mk jail-selftest
#
# Provides:
#   RLM_JAIL_OBJS    objects to link into rlm-sandboxd
#   RLM_JAIL_LIBS    libraries they need (-lseccomp)
#   jail-selftest    builds $(RLM_BUILD)/bin/rlm-jail-selftest
#   jail-check       builds and runs it (root only)

# do not steal the default goal of the including makefile
RLM_JAIL_SAVED_GOAL := $(.DEFAULT_GOAL)

RLM_JAIL_DIR ?= $(dir $(lastword $(MAKEFILE_LIST)))
RLM_BUILD ?= $(abspath $(RLM_JAIL_DIR)../build)

RLM_JAIL_CC ?= cc
RLM_JAIL_CFLAGS ?= -O2 -g -Wall -Wextra -D_GNU_SOURCE

RLM_JAIL_OBJDIR = $(RLM_BUILD)/sandbox/jail
RLM_JAIL_OBJS = $(RLM_JAIL_OBJDIR)/jail.o $(RLM_JAIL_OBJDIR)/cgroup.o \
                $(RLM_JAIL_OBJDIR)/seccomp.o
RLM_JAIL_LIBS = -lseccomp
RLM_JAIL_DEPS = $(RLM_JAIL_DIR)jail.h $(RLM_JAIL_DIR)cgroup.h \
                $(RLM_JAIL_DIR)seccomp.h

$(RLM_JAIL_OBJDIR)/%.o: $(RLM_JAIL_DIR)%.c $(RLM_JAIL_DEPS)
	@mkdir -p $(RLM_JAIL_OBJDIR)
	$(RLM_JAIL_CC) $(RLM_JAIL_CFLAGS) -c -o $@ $<

$(RLM_BUILD)/bin/rlm-jail-selftest: $(RLM_JAIL_DIR)jail_selftest.c \
        $(RLM_JAIL_OBJS) $(RLM_JAIL_DEPS)
	@mkdir -p $(RLM_BUILD)/bin
	$(RLM_JAIL_CC) $(RLM_JAIL_CFLAGS) -o $@ $(RLM_JAIL_DIR)jail_selftest.c \
	    $(RLM_JAIL_OBJS) $(RLM_JAIL_LIBS) -lpthread

.PHONY: jail-selftest jail-check
jail-selftest: $(RLM_BUILD)/bin/rlm-jail-selftest

jail-check: $(RLM_BUILD)/bin/rlm-jail-selftest
	$(RLM_BUILD)/bin/rlm-jail-selftest

.DEFAULT_GOAL := $(RLM_JAIL_SAVED_GOAL)
