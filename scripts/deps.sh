#!/usr/bin/env bash
# scripts/deps.sh LEVEL: installs what one kind of work needs, only where it is missing, for
# PostgreSQL $PG_MAJOR (default: the crate's default major, Cargo.toml's default feature). Safe
# to run again; quiet when there is nothing to do. The Makefile's targets call the level they
# need:
#   build    make install: the major's server with its headers (scripts/pg.sh says where it comes
#            from), clang and libclang-dev for bindgen, cargo-pgrx 0.19.3 (built with
#            scripts/cargo, which says why), and pgrx's config naming every major installed here.
#   package  make package and make rpm: build, dpkg-dev (dpkg-shlibdeps computes the .deb's
#            dependencies), rpm (rpmbuild) and python3 (scripts/crate-licenses.py).
#   unit     the glue's unit tests in make test (`cargo test -p snowflake --lib`; `make unit`, the
#            pure core's tests, needs nothing but Rust): build, but for the crate's default major (Cargo.toml's
#            default feature, pg15) rather than $PG_MAJOR: without --features, pgrx-pg-sys is
#            compiled against that major's headers, found through pgrx's config. No server runs.
#   demo     make demo: build, and (as root) the postgres user that runs the throwaway server.
#   test     make test, for each major: package and unit (the test binaries link the crate built
#            with its default feature), lintian (tests/package.rs runs it on the .deb),
#            prometheus-postgres-exporter (tests/monitoring.rs scrapes it), prometheus (for
#            promtool, which checks and unit-tests monitoring/snowflake.rules.yml), libfaketime,
#            Python's venv and Node.js with npm (the client recipes, tests/clients.rs),
#            pg_partman for $PG_MAJOR where apt packages it, and (as root) the postgres user.
#            scripts/citus.sh builds Citus when the tests need it; the Makefile's upgrade-source
#            installs the pg_upgrade tests' older majors.
#   bench    make bench: build, valgrind (callgrind), gnuplot for the charts, python3, and (as
#            root) the postgres user.
set -euo pipefail
# Debian's apt-get, one at a time (scripts/apt-get says why).
APT_GET=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt-get
cd "$(dirname "$0")/.."
level=${1:-}
PGRX_VERSION=0.19.3
# The major that a build without --features is for.
DEFAULT_MAJOR=$(sed -n 's/^default = \["pg\([0-9][0-9]\)"\]$/\1/p' Cargo.toml)
[ -n "$DEFAULT_MAJOR" ] || { echo "deps: Cargo.toml has no default pgNN feature" >&2; exit 1; }
PG_MAJOR=${PG_MAJOR:-$DEFAULT_MAJOR}

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

packages=(clang libclang-dev)
majors=("$PG_MAJOR")
owner=false clients=false partman=false
case $level in
  build) ;;
  package) packages+=(dpkg-dev rpm) ;;
  unit) majors=("$DEFAULT_MAJOR") ;;
  demo) owner=true ;;
  test)
    packages+=(dpkg-dev rpm lintian prometheus-postgres-exporter prometheus libfaketime)
    majors+=("$DEFAULT_MAJOR")
    owner=true clients=true partman=true
    ;;
  bench) packages+=(valgrind); owner=true ;;
  *) echo "usage: [PG_MAJOR=NN] scripts/deps.sh build|package|unit|demo|test|bench" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
# Programs that a machine may have from elsewhere (pyenv, NodeSource, another gnuplot) keep theirs.
case $level in
  package | test | bench) command -v python3 >/dev/null || missing+=(python3) ;;
esac
if $clients; then
  python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
fi
if [ "$level" = bench ]; then command -v gnuplot >/dev/null || missing+=(gnuplot-nox); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  "$APT_GET" update -qq
  "$APT_GET" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for m in $(printf '%s\n' "${majors[@]}" | sort -u); do scripts/pg.sh "$m" >/dev/null; done

# pg_partman, for the partitioning recipe's test, where the distribution packages it for the major
# (Debian 12: 4.7 for 15; the PyPI builds have none). After scripts/pg.sh, which keeps apt's
# postgresql-NN from creating a cluster.
if $partman; then
  p=postgresql-$PG_MAJOR-partman
  if ! installed "$p"; then
    candidate=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p')
    if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
      echo "deps: installing $p"
      "$APT_GET" install -y -qq --no-install-recommends "$p" >/dev/null
    fi
  fi
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  echo "deps: installing cargo-pgrx $PGRX_VERSION (a few minutes)"
  scripts/cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

# pgrx's config names every major that is installed here, so that each can be built; `init`
# replaces the whole list, so it is given all of them whenever one is new.
config=${PGRX_HOME:-$HOME/.pgrx}/config.toml
args=()
stale=false
for m in 15 16 17 18 19; do
  if p=$(scripts/pg.sh --find "$m"); then
    args+=("--pg$m" "$p")
    grep -qx "pg$m = \"$p\"" "$config" 2>/dev/null || stale=true
  fi
done
if $stale; then
  scripts/cargo pgrx init "${args[@]}" >/dev/null
fi

# As root, the tests, the demo and the benchmark run their servers as postgres (runuser). Debian's
# postgresql-NN creates that user; a server from PyPI (scripts/pg.sh) does not.
if $owner && [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  echo "deps: creating the postgres user"
  useradd --system --user-group --home-dir /var/lib/postgresql --no-create-home \
    --shell /bin/bash --comment "PostgreSQL administrator" postgres
fi
