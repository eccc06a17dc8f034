# The README's two commands live here: `make run` and `make test`. Each does its own set-up:
# Debian packages (as root), a virtualenv with the Python dependencies, and the Rust engine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# what the presets run on (servers, the Ruby and PHP stacks two of them measure through); the test set adds the
# other drivers' toolchains (a JDK and Maven for the Java driver), the SQL servers, Chromium and valgrind
RUN_PACKAGES  := redis-server memcached sasl2-bin libsasl2-modules libmemcached-dev ruby ruby-activesupport ruby-dalli ruby-redis \
                 php-cli php-redis php-memcached php-symfony-cache
TEST_PACKAGES := $(RUN_PACKAGES) ruby-railties openjdk-17-jdk-headless maven redis-tools libmemcached-tools postgresql mariadb-server \
                 chromium valgrind
ENGINE_SOURCES := $(shell find engine -name '*.rs' -o -name 'Cargo.toml' -o -name 'Cargo.lock' | grep -v target)
DRIVER_SOURCES := $(shell find drivers -name build.sh -o -name '*.go' -o -name go.mod -o -name go.sum -o -name pom.xml \
                    -o -name '*.java' -o -name package.json -o -name package-lock.json | grep -v -e node_modules -e target)

.PHONY: run test setup setup-test bytecode engine-check packages-run packages-test drivers lint bench dist clean

run: packages-run setup bytecode
	$(BIN)/cachemark run

# The set-up and the engine's own checks run side by side (-j2): pip, its downloads and the Maven/npm
# drivers leave a core idle that clippy and the debug build use. -O prints each one's output whole.
# Then the tests four at a time (a file's fixtures once, the longest files first: conftest.py; on 2 cores,
# as the tests wait on servers and subprocesses about half the time: 325 s against 353 s three at a time,
# quiet), those that race a kill, a failover or a signal four at a time too (marked serial: they mostly
# wait; 76 s against 95 s three at a time, quiet, with the cluster's failovers in a file of their own),
# and last, by itself, each test that times a latency, a rate or a schedule (marked alone; conftest.py
# says why). The last two passes collect only the files that name their marker (conftest.py checks that
# a marked test's file does): four workers collecting every file took ~14 s of CPU. Each pass names its
# ten slowest tests. PYTHONDONTWRITEBYTECODE is emptied for them: pytest then keeps each test module as
# it rewrote its asserts, and a later pass collects in ~3 s, not ~7 s.
test: PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest
marked = $(shell grep -l 'mark\.$(1)' tests/test_*.py)
test: packages-test
	$(MAKE) -j2 -O --no-print-directory setup-test bytecode engine-check
	$(BIN)/ruff check src tests benchmarks
	$(PYTEST) -q -n 4 --dist loadfile --no-loadscope-reorder -m 'not serial and not alone' --durations=10
	$(PYTEST) -q -n 4 --dist loadfile --no-loadscope-reorder -m serial --durations=10 $(call marked,serial)
	$(PYTEST) -q -m alone --durations=10 $(call marked,alone)

# cachemark's own modules compiled once (an up-to-date one is skipped): with PYTHONDONTWRITEBYTECODE set,
# as in many CI images, every process would otherwise compile them again (~0.3 s per CLI or worker start)
bytecode: $(VENV)/bin/python
	$(BIN)/python -m compileall -q src > /dev/null

# the Rust workspace's checks: formatting, lints, its tests (a debug build, beside the release one pip makes)
# (cargo without make's MAKEFLAGS/MFLAGS: it keeps its own jobs, not a warning per doctest about make's jobserver)
engine-check: CARGO := env -u MAKEFLAGS -u MFLAGS cargo
engine-check:
	cd engine && $(CARGO) fmt --all --check
	cd engine && $(CARGO) clippy --workspace --all-targets --quiet -- -D warnings
	cd engine && $(CARGO) test --workspace --quiet

packages-run:
	@scripts/ensure-packages.sh $(RUN_PACKAGES)

packages-test:
	@scripts/ensure-packages.sh $(TEST_PACKAGES)

# `make run` needs no driver build: no preset runs through Node, Java or Go (`make drivers` builds them, and a
# run through one that is not built says so in one line)
setup: $(VENV)/.stamp-install

setup-test: $(VENV)/.stamp-test drivers/.stamp-built

# Drivers in other stacks that need a build (npm, Maven, Go): one line for each that cannot.
drivers:
	@scripts/build-drivers.sh

drivers/.stamp-built: $(DRIVER_SOURCES)
	@scripts/build-drivers.sh
	touch $@

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip

# cachemark (its engine built by maturin, ~60 s) and its extras' requirements (~25 s) installed side by side:
# one after the other (`pip install -e '.[all]'`) they took 82 s of a fresh clone's `make run`. The engine's
# build through `python -m pip` names the interpreter as bin/python, as `make dist` and the wheel test do: pyo3
# builds the engine again for another path to the same interpreter (bin/python3, pip's own shebang)
INSTALL = $(BIN)/python scripts/requirements.py $(1) > $(VENV)/requirements.txt && \
	{ $(BIN)/python -m pip install -q -e . --no-deps & engine=$$!; \
	  $(BIN)/pip install -q -r $(VENV)/requirements.txt || { wait $$engine; exit 1; }; \
	  wait $$engine; }

$(VENV)/.stamp-install: $(VENV)/bin/python pyproject.toml $(ENGINE_SOURCES)
	$(call INSTALL,all)  # every backend's client: the presets use them
	touch $@

# test + all holds all: one install (one engine build) stands for both stamps
$(VENV)/.stamp-test: $(VENV)/bin/python pyproject.toml $(ENGINE_SOURCES)
	$(call INSTALL,test all)
	touch $(VENV)/.stamp-install $@

# A wheel (the engine inside: no Rust toolchain needed to install it; manylinux, as the toolchain's glibc
# allows) and an sdist, in dist/: `pipx install dist/cachemark-*.whl`
dist: $(VENV)/bin/python
	$(BIN)/pip install -q 'maturin>=1.7,<2'
	$(BIN)/maturin build --release --sdist -i $(BIN)/python --out dist

lint: setup-test
	$(BIN)/ruff check src tests benchmarks
	cd engine && cargo fmt --all --check
	cd engine && cargo clippy --workspace --all-targets -- -D warnings

bench: packages-test setup-test
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/django_overhead.py
	$(BIN)/python benchmarks/proxy_accuracy.py
	$(BIN)/python benchmarks/report_speed.py
	$(BIN)/pip install -q 'resp-benchmark==0.2.5'  # vs_peers.py's third Redis peer
	$(BIN)/python benchmarks/vs_peers.py

clean:
	rm -rf $(VENV) dist engine/target drivers/.stamp-built drivers/node/node_modules drivers/java/target drivers/go/cachemark-driver
