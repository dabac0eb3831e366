# snowflake: the two commands are `make demo` and `make test`.
#
# Every target takes the PostgreSQL major as a parameter: `make install PG_MAJOR=18`. Without it,
# `make test` runs on every major below (the SQL suite chosen per major, SUITE_NN), and the other
# targets use the crate's default major (Cargo.toml's default feature).
MAJORS   := 15 16 17 18 19
given = $(filter command line environment,$(origin $(1)))
# Given only PG_CONFIG, the major is that server's: `make install PG_CONFIG=/usr/lib/postgresql/16/bin/pg_config`.
ifneq ($(call given,PG_CONFIG),)
ifeq ($(call given,PG_MAJOR),)
PG_MAJOR := $(shell $(PG_CONFIG) --version | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
endif
endif
# Otherwise the default major is the crate's default feature (Cargo.toml), named there only.
ifeq ($(origin PG_MAJOR),undefined)
PG_MAJOR := $(shell sed -n 's/^default = \["pg\([0-9][0-9]*\)"\]$$/\1/p' Cargo.toml)
endif
$(if $(PG_MAJOR),,$(error no PostgreSQL major: give PG_MAJOR, or a default = ["pgNN"] feature in Cargo.toml))
# `make test` with PG_MAJOR or PG_CONFIG given (on the command line or in the environment) tests
# that major.
TEST_MAJORS := $(if $(call given,PG_MAJOR)$(call given,PG_CONFIG),$(PG_MAJOR),$(MAJORS))
# The major's pg_config, found or installed by scripts/pg.sh (expanded only where it is used).
PG_CONFIG ?= $(shell scripts/pg.sh $(PG_MAJOR))
# The pg_upgrade tests upgrade from each of these majors to the one under test, where it is
# older: from the oldest supported major (Debian 12's own), and from 18 (to 19).
UPGRADE_FROM := 15 18
UPGRADE_SOURCES = $(foreach m,$(UPGRADE_FROM),$(if $(shell [ $(m) -lt $(PG_MAJOR) ] && echo y),$(m)))
FEATURES := --no-default-features --features pg$(PG_MAJOR)
VERSION  := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Every cargo call goes through scripts/cargo, which says why (pgrx 0.19 declares Rust 1.96; this
# toolchain is 1.95) and adds `--ignore-rust-version` where cargo takes it. `$(CARGO) pgrx ...` runs
# cargo-pgrx through it too.
CARGO := $(CURDIR)/scripts/cargo

DEPS_LEVELS := build package unit demo test bench

.PHONY: deps $(addprefix deps-,$(DEPS_LEVELS)) install pg-config demo test test-all test-steps test-major prepare-major suite-major unit glue-unit \
  upgrade-source previous-package citus lint bench package rpm reproducible clean sim sim-budget sim-regressions sim-mutants loom mutants \
  check-install

# What each target needs, installed where it is missing: `deps-build` for `install`, and so on
# (scripts/deps.sh lists what each level holds). `make deps` installs everything, for this major.
$(addprefix deps-,$(DEPS_LEVELS)):
	@PG_MAJOR=$(PG_MAJOR) scripts/deps.sh $(@:deps-%=%)

deps: deps-test deps-bench

# The path of this major's pg_config and nothing else: `make -s pg-config PG_MAJOR=18`. It runs
# the script itself (not $(shell ...), which would hide its failure for a major we cannot install).
pg-config:
	@$(if $(filter command line environment,$(origin PG_CONFIG)),echo $(PG_CONFIG),scripts/pg.sh $(PG_MAJOR))

# The release build (install and package) names no path of the machine it is built on: panic
# locations, line tables and the bindings pgrx generates name the workspace, the target directory
# and cargo's registry, mapped here to neutral names (a later mapping wins where two match), in
# the Rust code and in the C that pgrx compiles. install and package use the same flags, so that
# one build serves both (cargo keeps builds with other flags, the simulator's, beside it).
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),$(CURDIR)/target))
RELEASE_PATH_MAP := $(CURDIR)=/usr/src/snowflake $(abspath $(or $(CARGO_HOME),$(HOME)/.cargo))=/usr/src/cargo \
  $(TARGET_DIR)=/usr/src/snowflake/target
RELEASE_ENV := RUSTFLAGS="$(strip $(RUSTFLAGS) $(addprefix --remap-path-prefix=,$(RELEASE_PATH_MAP)))" \
  CFLAGS="$(strip $(CFLAGS) $(addprefix -ffile-prefix-map=,$(RELEASE_PATH_MAP)))"

# Release build, installed into the server of $(PG_CONFIG).
# The scripts under sql/ (the frozen first release and the upgrade scripts) go beside the
# current version's script that cargo pgrx generates.
install: deps-build
	$(SUDO) env PATH="$$PATH" HOME="$$HOME" $(RELEASE_ENV) $(CARGO) pgrx install --release --pg-config $(PG_CONFIG) $(FEATURES)
	$(SUDO) install -m 644 sql/snowflake--*.sql "$$($(PG_CONFIG) --sharedir)/extension/"

# An installable .deb under target/ ($CARGO_TARGET_DIR where it is set, here and below; no Rust
# needed where it is installed), and its -dbgsym package: target/postgresql-NN-snowflake_<version>-$(DEB_REVISION)_<arch>.deb. The revision and
# the maintainer are the packager's to set: `make package PG_MAJOR=16 DEB_REVISION=2
# DEB_MAINTAINER='Jane Doe <jane@example.org>'` (the default is this project's own name).
DEB_REVISION ?= 1
DEB_MAINTAINER ?= snowflake maintainers <maintainers@users.noreply.a-seed-216766a1.example>
package: deps-package
	@PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG) $(RELEASE_ENV) \
	  DEB_REVISION='$(DEB_REVISION)' DEB_MAINTAINER='$(DEB_MAINTAINER)' scripts/package.sh

# The previous release's .deb for this major (tests/package.rs upgrades it to this one through
# Debian's dpkg), built once from its commit by its own `make package` into target/previous/.
PREVIOUS_RELEASE := 1.6.0
PREVIOUS_COMMIT := f9c1cbfdf03379a138cdaea73947709304b17277
previous-package: deps-package
	@PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG) PREVIOUS_RELEASE=$(PREVIOUS_RELEASE) \
	  PREVIOUS_COMMIT=$(PREVIOUS_COMMIT) scripts/previous-package.sh >/dev/null

# An RPM for PGDG's postgresqlNN-server (/usr/pgsql-NN), and its -debuginfo:
# target/snowflake_NN-<version>-$(RPM_RELEASE).<arch>.rpm. The release and the packager are the
# packager's to set, as for the .deb.
RPM_RELEASE ?= 1
RPM_PACKAGER ?= $(DEB_MAINTAINER)
rpm: deps-package
	@PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG) $(RELEASE_ENV) \
	  RPM_RELEASE='$(RPM_RELEASE)' RPM_PACKAGER='$(RPM_PACKAGER)' scripts/rpm.sh

# The same commit gives byte-identical packages: HEAD cloned twice, each clone's `make package rpm`
# from nothing (other directories, target directories, time zones and umasks), every .deb and RPM
# compared with cmp (scripts/reproducible.sh). Two release builds of the major.
reproducible: deps-package
	@PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG) scripts/reproducible.sh

# A benchmark, not a test: prints and writes bench/results/, never fails on a time.
bench: deps-bench install citus
	PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG) python3 bench/bench.py

demo: deps-demo install
	@PG_CONFIG=$(PG_CONFIG) scripts/demo.sh

# `make test`: the pure core (unit, property and multi-threaded stress tests), the simulator's
# fixed budget and regression seeds, loom, then every major built, installed and packaged, with
# the SQL suite that SUITE_NN below chooses for it (CONTRIBUTING.md "What runs on which major"
# says why). With PG_MAJOR or PG_CONFIG given, the whole SQL suite on that major. It prints its
# time at the end. `make test-all`: the whole SQL suite on every major (before a release, and
# for a change to code that differs between majors).
test:
	@$(call timed,make test,$(MAKE) --no-print-directory test-steps)

test-all:
	@$(call timed,make test-all,$(MAKE) --no-print-directory test-steps SUITE=all)

# The majors are built one after another, and their SQL suites run one after another, but each
# major's suite runs while the next major builds: a build keeps about one core busy (its last
# step, the LTO link, is one process), a suite mostly waits. So -j2, and a chain of each kind.
test-steps: unit glue-unit sim-budget sim-regressions loom
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(addprefix suite-,$(TEST_MAJORS)) SUITE=$(SUITE)

# built-NN: major NN built, installed and packaged; suite-NN: its SQL suite. Each waits for the
# one of the major before it ($(MAJOR_PAIRS): "15:16 16:17 ...").
MAJOR_PAIRS := $(shell set -- $(TEST_MAJORS); while [ $$# -gt 1 ]; do echo $$1:$$2; shift; done)
$(foreach p,$(MAJOR_PAIRS),$(eval built-$(lastword $(subst :, ,$(p))): built-$(firstword $(subst :, ,$(p))))\
  $(eval suite-$(lastword $(subst :, ,$(p))): suite-$(firstword $(subst :, ,$(p)))))
built-%:
	@$(call timed,PostgreSQL $* built$(,) installed and packaged,$(MAKE) --no-print-directory prepare-major PG_MAJOR=$* SUITE=$(SUITE))
suite-%: built-%
	@$(call timed,the SQL suite on PostgreSQL $*,$(MAKE) --no-print-directory suite-major PG_MAJOR=$* SUITE=$(SUITE))
, := ,

# Runs a command and says how long it took: $(call timed,name,command).
timed = started=$$(date +%s); $(2); rc=$$?; took=$$(( $$(date +%s) - started )); \
  echo "$(1): $$( [ $$rc = 0 ] && echo green || echo FAILED ) in $$((took / 60)) min $$((took % 60)) s"; exit $$rc

# The pure core's tests (unit, property and multi-threaded stress tests): the crate
# snowflake-core has no pgrx and no PostgreSQL in its tree, so nothing is installed for them.
# The simulator's own tests too.
unit:
	$(CARGO) test -p snowflake-core -p snowflake-sim

# The horizon's slots over every interleaving of backends and a reader (core/src/horizon.rs,
# `loom_tests`), in a build of their own: --cfg loom swaps the slots' atomics for loom's.
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(TARGET_DIR)/loom $(CARGO) test --release -p snowflake-core --lib loom_tests

# The deterministic simulator (sim/, CONTRIBUTING.md "The simulator"): `make sim` runs schedules
# from a random seed for SIM_SECONDS (default 60) and is what a contributor runs before a
# release; `make sim SEED=n` replays one seed and shrinks what it breaks.
SIM_SECONDS ?= 60
# SIM_KEEP_GOING=1 lists every seed that breaks an invariant and goes on.
sim:
	SIM_SECONDS=$(SIM_SECONDS) SEED=$(SEED) SIM_KEEP_GOING=$(SIM_KEEP_GOING) $(CARGO) run --release --quiet -p snowflake-sim

# The defects of this project's history put back one at a time into a copy of the core: the
# budget below must find each (sim/mutants.py lists them).
sim-mutants:
	SIM_MUTANT="$(SIM_MUTANT)" python3 sim/mutants.py

# cargo-mutants over the core's protocol modules, against the core's own tests (CONTRIBUTING.md
# "Mutants"), with the equivalent mutants .cargo/mutants.toml excludes by name: what survives is in
# mutants.out/missed.txt, and the last line gives the count (missed, caught, unviable, timeouts).
# About 40 minutes on two cores; not part of `make test`. MUTANTS_FILES narrows it to some modules.
MUTANTS_VERSION := 27.1.0
MUTANTS_JOBS ?= 2
MUTANTS_FILES ?= core/src/generator.rs core/src/lease.rs core/src/fleet.rs core/src/horizon.rs \
  core/src/worker.rs
mutants:
	@cargo mutants --version 2>/dev/null | grep -q ' $(MUTANTS_VERSION)$$' || \
	  cargo install --locked cargo-mutants --version $(MUTANTS_VERSION)
	@status=0; \
	cargo mutants -p snowflake-core -j $(MUTANTS_JOBS) --exclude-re 'impl fmt::Display' \
	  --exclude-re 'tests::' $(addprefix -f ,$(MUTANTS_FILES)) || status=$$?; \
	n() { if [ -f mutants.out/$$1.txt ]; then wc -l < mutants.out/$$1.txt; else echo '?'; fi; }; \
	echo "mutants: $$(n missed) missed, $$(n caught) caught, $$(n unviable) unviable," \
	  "$$(n timeout) timeouts"; \
	exit $$status

# Every seed that ever broke an invariant, replayed (sim/regressions.txt says how they are kept).
sim-regressions:
	SIM_REGRESSIONS=sim/regressions.txt $(CARGO) run --release --quiet -p snowflake-sim

# make test's share: the same seeds every time (about a minute of schedules on one core).
SIM_BUDGET := 16000
sim-budget:
	SIM_SCHEDULES=$(SIM_BUDGET) SIM_FIRST_SEED=1 $(CARGO) run --release --quiet -p snowflake-sim

# The glue's own unit tests are built with the crate's default feature (pg15): they need that
# major's headers and pgrx's config naming it, but no server.
glue-unit: deps-unit
	$(CARGO) test -p snowflake --lib

# The test binaries are built once, with the crate's default feature (they drive servers through
# psql and pgbench, so they do not depend on the major); PG_CONFIG tells them which server to run.
# The SQL suite runs under cargo-nextest (.config/nextest.toml): every test in its own process,
# those of every file side by side. FILTER (a nextest filterset) narrows it by hand:
# `make test-major PG_MAJOR=16 FILTER='binary(dba)'`.
# Its JUnit report (each test's time) is kept as target/nextest/junit-pgNN.xml.
test-major: prepare-major
	@$(MAKE) --no-print-directory suite-major

# The RPM after the .deb (both read the tree `cargo pgrx package` writes), and on 15 the previous
# release's .deb (tests/package.rs upgrades it in Debian's own 15).
prepare-major: deps-test install package upgrade-source citus
	@$(MAKE) --no-print-directory rpm
	$(if $(filter 15,$(PG_MAJOR)),@$(MAKE) --no-print-directory previous-package)

suite-major:
	@echo "== the SQL suite on PostgreSQL $(PG_MAJOR) ($(PG_CONFIG)): $(or $(SUITE_FILTER),all())"
	PG_CONFIG=$(PG_CONFIG) \
	  SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS="$$(for m in $(if $(RUNS_UPGRADES),$(UPGRADE_SOURCES)); do scripts/pg.sh $$m; done)" \
	  $(CARGO) nextest run --test '*' $(if $(NEXTEST_THREADS),--test-threads $(NEXTEST_THREADS)) \
	    $(if $(SUITE_FILTER),-E '$(SUITE_FILTER)'); \
	  rc=$$?; cp $(TARGET_DIR)/nextest/default/junit.xml $(TARGET_DIR)/nextest/junit-pg$(PG_MAJOR).xml 2>/dev/null; exit $$rc

# What make test runs of the SQL suite on each major: everything on the oldest and the newest,
# and on the others the files that cover code or behaviour that differs there (CONTRIBUTING.md
# "What runs on which major"). SUITE=all (make test-all, or a major given) runs everything.
SUITE ?= $(if $(call given,PG_MAJOR)$(call given,PG_CONFIG),all,per-major)
SUITE_15 := all()
SUITE_16 := binary(sql_api) | binary(package) | binary(multiwriter) | binary(durability) | binary(monitoring) | binary(citus)
SUITE_17 := binary(sql_api) | binary(package) | binary(multiwriter) | binary(citus)
SUITE_18 := binary(sql_api) | binary(package) | binary(citus) | binary(guard)
SUITE_19 := all()
# What cannot run on a major, whatever the suite or FILTER: nextest counts it as skipped, and the
# test itself fails there with the reason if run anyway (CONTRIBUTING.md "What runs on which
# major"). Citus 14.0.1 supports 16 to 18 only (the last Citus for 15 was 13.x; none supports 19
# yet); sequences replicate (FOR ALL SEQUENCES) from 19 on.
NOT_CITUS := binary(citus)
NOT_SEQUENCES := (binary(multiwriter) & (test(=sequences_copied_from_another_server_never_reach_the_mark) | test(=mesh_add_ends_beside_subscriptions_for_all_sequences)))
CANNOT_15 := $(NOT_CITUS) | $(NOT_SEQUENCES)
CANNOT_16 := $(NOT_SEQUENCES)
CANNOT_17 := $(NOT_SEQUENCES)
CANNOT_18 := $(NOT_SEQUENCES)
CANNOT_19 := $(NOT_CITUS)
CHOSEN_FILTER = $(or $(FILTER),$(if $(filter all,$(SUITE)),,$(filter-out all(),$(SUITE_$(PG_MAJOR)))))
# Whether the suite chosen runs tests/pg_upgrade.rs (only then are the older majors built).
RUNS_UPGRADES = $(if $(CHOSEN_FILTER),$(findstring pg_upgrade,$(CHOSEN_FILTER)),yes)
SUITE_FILTER = $(if $(CANNOT_$(PG_MAJOR)),$(if $(CHOSEN_FILTER),($(CHOSEN_FILTER)) & )not ($(CANNOT_$(PG_MAJOR))),$(CHOSEN_FILTER))

# The pg_upgrade tests need the extension in the old majors' servers too: build it there unless
# this version is installed already.
upgrade-source:
	@for m in $(if $(RUNS_UPGRADES),$(UPGRADE_SOURCES)); do old=$$(scripts/pg.sh $$m); \
	  if [ ! -f "$$($$old --pkglibdir)/snowflake.so" ] || \
	     [ ! -f "$$($$old --sharedir)/extension/snowflake--$(VERSION).sql" ]; then \
	    $(MAKE) --no-print-directory install PG_MAJOR=$$m || exit 1; fi; done

# Citus 14.0.1, built into this major's server once, for tests/citus.rs and the benchmark's Citus
# part (scripts/citus.sh says where its source comes from). Citus 14 supports 16, 17 and 18
# (status 3 on another major: the tests then say why they do not run); a missing source fails.
citus:
	@PG_CONFIG=$(PG_CONFIG) scripts/citus.sh $(PG_MAJOR) >/dev/null || test $$? = 3

# What a brand-new machine installs (19 from source and a PyPI major, cargo-pgrx, pgrx's config,
# the extension, Citus), done again into an empty directory through make, so that a machine that
# has everything cannot hide a broken step (scripts/check-install.sh). CI runs it after make test.
check-install:
	scripts/check-install.sh

# Clippy sees each major's cfg branches only in that major's build.
lint:
	cargo fmt --check
	RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" $(CARGO) doc --quiet --no-deps --document-private-items -p snowflake-core -p snowflake
	$(CARGO) clippy --all-targets --workspace -- -D warnings
	@for m in $(filter-out 15,$(MAJORS)); do \
	  echo "scripts/cargo clippy --lib --no-default-features --features pg$$m -- -D warnings"; \
	  $(CARGO) clippy --quiet --lib --no-default-features --features pg$$m -- -D warnings || exit 1; done

clean:
	$(CARGO) clean
