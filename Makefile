# snowflake: the two commands are `make demo` and `make test`.
PG_MAJOR   ?= 15
PG_CONFIG  ?= /usr/lib/postgresql/$(PG_MAJOR)/bin/pg_config
export PG_CONFIG PG_MAJOR
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps install demo test unit sql lint bench package clean

deps:
	@scripts/deps.sh

# Release build, installed into the PostgreSQL found by $(PG_CONFIG).
# The scripts under sql/ (the frozen first release and the upgrade scripts) go beside the
# current version's script that cargo pgrx generates.
install: deps
	$(SUDO) env PATH="$$PATH" HOME="$$HOME" cargo pgrx install --release --pg-config $(PG_CONFIG)
	$(SUDO) install -m 644 sql/snowflake--*.sql "$$($(PG_CONFIG) --sharedir)/extension/"

# An installable .deb under target/ (no Rust needed where it is installed).
package: deps
	@scripts/package.sh

# A benchmark, not a test: prints and writes bench/results/, never fails on a time.
bench: install
	@command -v gnuplot >/dev/null || $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null
	python3 bench/bench.py

demo: install
	@scripts/demo.sh

# Every test: the pure core (unit + property + multi-threaded stress tests), then SQL tests
# against real clusters that the tests start and stop themselves.
test: install package
	cargo test --lib
	cargo test --test '*' -- --test-threads=2

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

clean:
	cargo clean
