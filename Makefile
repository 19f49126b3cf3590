# The entry for humans (docs/architecture.md section 1). `make install` builds both distributions into .venv;
# `make test` runs everything CI runs; `make bench` measures; `make bench-gate` checks the ratios.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CARGO  := cargo
NATIVE := native/Cargo.toml
NATIVE_SRC := $(shell find native/src -name '*.rs') native/Cargo.toml native/rustfmt.toml native/Cargo.lock native/pyproject.toml native/hongbao_native.pyi
STAMP_NATIVE := $(VENV)/.native-built
STAMP_DEPS   := $(VENV)/.deps-installed
BENCH_JSON   := bench-results/native.json

CHAOS_DURATION ?= 600

.PHONY: chaos demo install test lint lint-rust format test-rust test-python stubtest typecheck fuzz bench bench-gate bench-http bench-storm bench-grab bench-idle bench-push bench-fleet clean

install: $(STAMP_NATIVE) $(STAMP_DEPS)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Release build of the native module (maturin, PEP 517), then hongbao itself.
$(STAMP_NATIVE): $(BIN)/python $(NATIVE_SRC)
	$(BIN)/pip install -q ./native
	touch $@

# Strict editable mode (type checkers see the modules); a new module means a reinstall, hence the file list.
PY_SRC := $(shell find core server bench -name '*.py' -not -path 'bench/native/*')
$(STAMP_DEPS): $(BIN)/python $(STAMP_NATIVE) pyproject.toml setup.py $(PY_SRC)
	flock $(VENV)/.install.lock $(BIN)/pip install -q --config-settings editable_mode=strict -e '.[test]'
	touch $@

test: install lint test-rust stubtest typecheck test-python

# The Python code's lint and format check (ruff, pinned in the test extra; settings in pyproject.toml).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# For humans: format the Python code and apply ruff's safe fixes (what is left is printed).
format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test-rust:
	$(CARGO) fmt --manifest-path $(NATIVE) --check
	$(CARGO) test --manifest-path $(NATIVE) --quiet
	$(CARGO) clippy --manifest-path $(NATIVE) --tests --quiet -- -D warnings

# Formatting (native/rustfmt.toml) and lints only, without running the tests.
lint-rust:
	$(CARGO) fmt --manifest-path $(NATIVE) --check
	$(CARGO) clippy --manifest-path $(NATIVE) --tests --quiet -- -D warnings

stubtest: install
	$(BIN)/python -m mypy.stubtest hongbao_native --concise --allowlist native/stubtest-allowlist.txt
	$(BIN)/python -m mypy --strict native/hongbao_native.pyi

typecheck: install
	$(BIN)/python -m mypy -p hongbao.core -p hongbao.server -p hongbao.bench

# Every benchmark runs once as a correctness test; fuzz targets run for a short, bounded time.
test-python: install
	$(BIN)/python -m pytest --benchmark-disable -q -p no:cacheprovider --durations=15
	$(MAKE) fuzz

FUZZ_SECONDS ?= 20
fuzz: install
	$(BIN)/python tests/fuzz/fuzz_ws_frame.py -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048
	$(BIN)/python tests/fuzz/fuzz_http.py -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048

bench: install
	mkdir -p bench-results
	$(BIN)/python -m pytest bench -q -p no:randomly --benchmark-only --benchmark-json=$(BENCH_JSON) --benchmark-disable-gc --benchmark-columns=min,median,mean,ops,rounds

bench-gate: bench
	$(BIN)/python -m hongbao.bench.gate $(BENCH_JSON)

# wrk against the server and a minimal uvloop server (the Python ceiling), same run; needs wrk.
bench-http: install
	$(BIN)/python bench/http/run.py --out bench-results/http.json

# The peak: the new-year-eve storm (20k users, 4k groups, 120 s of sends + a 60 s tail) on the production backend
# (2 workers) and on the baseline (bench/baselines), up a ladder of send rates (STORM_RATES, sends/s), each system
# stopping after its first rate that does not hold (open p99 >= 500 ms, a timeout, a dirty audit, or a load
# generator that fell behind; down by halves when its first rate fails), then each knee narrowed by bisection to within an eighth of it and the two rates
# that bracket it played again until two plays agree; hongbao with its users online (20%) and offline, and the
# baseline; every rung on a MariaDB and a Redis of its own. Knees, knee
# ratios and their bounds, p50/p99 per operation and CPU per request and per open in
# bench-results/storm-production/peak.json and on stderr (bench/storm/peak.py; docs/operations.md, "Reading the
# peak report"). About 3-4 minutes per rung, some 20-30 rungs: 70-110 minutes in all. STORM_RATE=R plays that one
# rate instead, hongbao online and the baseline: bench-results/storm-production/bench-storm.json
# (bench/storm/production.py).
STORM_RATES ?= 20,40,80,150,300
STORM_RATE ?=
bench-storm: install
	$(BIN)/python -m hongbao.bench.storm.$(if $(STORM_RATE),production --rate $(STORM_RATE),peak --rates $(STORM_RATES)) --scenario new-year-eve --out bench-results/storm-production

# The storm against a two-region fleet (2 x 2 nodes, every node an entry) and against one node with
# the same workers, in one run: bench-results/storm-fleet/fleet.json (bench/storm/fleet.py).
FLEET_RATE ?= 20
bench-fleet: install
	$(BIN)/python -m hongbao.bench.storm.fleet --rate $(FLEET_RATE) --out bench-results/storm-fleet

# Grabs/s on the production backend (MariaDB + Redis started here, 2 workers) vs the uvloop ceiling and
# vs one redis-py round trip per request, and Redis bytes per packet: bench-results/grab.json (bench/http/grab.py).
bench-grab: install
	$(BIN)/python -m hongbao.bench.http.grab --out bench-results/grab.json

# Statements/s an idle production node puts on MariaDB with 2 and 4 workers (floor: < 5/s at each):
# bench-results/idle.json (bench/idle.py; starts its own MariaDB and Redis).
bench-idle: install
	$(BIN)/python -m hongbao.bench.idle --out bench-results/idle.json

clean:
	rm -rf $(VENV) native/target build bench-results *.egg-info

# hongbao's WebSocket push against a websockets server in the same run: fan-out CPU,
# idle memory, push latency, Redis memory per user (starts its own redis-server). Not in `make test`.
bench-push: install
	$(BIN)/python bench/push/run.py --out bench-results/push.json

# An embedded server on a free port, the smoke storm (20 s of sends, 8 s of late opens), the audit, the report (bench/storm/demo.py).
demo: install
	$(BIN)/python -m hongbao.bench.storm.demo --out bench-results/demo

# The storm for CHAOS_DURATION seconds (default 10 minutes) while workers are killed and Redis and
# MariaDB fail (bench/chaos): the money audit, the node's health, pushes, latency around each fault.
# Its report: bench-results/chaos/chaos.json. A bounded run is in `make test` (tests/integration/test_chaos.py).
chaos: install
	$(BIN)/python -m hongbao.bench.chaos --duration $(CHAOS_DURATION) --out bench-results/chaos
