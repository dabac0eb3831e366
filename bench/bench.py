#!/usr/bin/env python3
"""make bench: snowflake_nextval() against PostgreSQL's own sequences, identity and UUIDs.

Everything is measured in one run, on throwaway servers this script starts, so the ratios compare
like with like:
  1. cost per call in one session (interleaved rounds; each round's count(*) floor subtracted),
  1b. the same with one and with two backends at once, timed by pgbench inside the server,
  2. pgbench INSERT throughput at several client counts, with synchronous_commit on and off,
  3. table and primary-key index size after 1,000,000 rows,
  4. instructions per call counted by valgrind (callgrind), which machine noise does not move,
  5. each key's table grown past memory (WAL, full-page images, index size), at PostgreSQL's
     default checkpoint settings and at a stated "busy server" setting,
  6. on PostgreSQL 16 to 18, INSERT throughput on a Citus cluster (a coordinator and two workers),
  7. what the read horizon (snowflake.track_horizon) costs,
  8. what the key guard (snowflake_guard(), and its 'always' mode) costs per inserted row.
Before any measurement it states its hypotheses (HYPOTHESES below, with their thresholds); after
the run it prints each one's verdict from the numbers.

Writes bench/results/pgNN.md (for people: every figure with its spread, the commit measured, and
every server's settings that differ from PostgreSQL's defaults), pgNN.json (the same numbers, for
bench/render.py, which renders bench/README.md's tables from them) and the charts.
This is a benchmark, not a test: it never fails on a time.
"""
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from figures import signal_text, threshold_text

PG_CONFIG = os.environ.get("PG_CONFIG") or sys.exit("bench.py: set PG_CONFIG (make bench PG_MAJOR=NN does)")
BIN = subprocess.run([PG_CONFIG, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
MAJOR = int(re.match(r"PostgreSQL (\d+)", subprocess.run([PG_CONFIG, "--version"], capture_output=True, text=True,
                                                          check=True).stdout).group(1))
CALLS = int(os.environ.get("BENCH_CALLS", "3000000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
DURATION = int(os.environ.get("BENCH_DURATION", "4"))
PGBENCH_ROUNDS = int(os.environ.get("BENCH_PGBENCH_ROUNDS", "2"))
CLIENTS = [int(c) for c in os.environ.get("BENCH_CLIENTS", "1,4,16").split(",")]
DEFAULT_PARTS = "calls,concurrency,pgbench,sizes,instructions,scale,citus,horizon,guard"
PARTS = os.environ.get("BENCH_PARTS", DEFAULT_PARTS).split(",")
# Part 1b: pgbench runs `SELECT count(f) FROM generate_series(1, CONC_BATCH)` as its transaction
# for CONC_DURATION s, with 1 and with 2 clients, in CONC_ROUNDS interleaved rounds.
CONC_BATCH = int(os.environ.get("BENCH_CONC_BATCH", "200000"))
CONC_DURATION = int(os.environ.get("BENCH_CONC_DURATION", "3"))
CONC_ROUNDS = int(os.environ.get("BENCH_CONC_ROUNDS", "3"))
# The Citus part: total pgbench clients, spread evenly over the nodes in the "every node" runs.
CITUS_CLIENTS = int(os.environ.get("BENCH_CITUS_CLIENTS", "6"))
# The scale part: a server with small shared buffers, each key's table grown in steps until its
# primary-key index is SCALE_FACTOR times shared_buffers (or SCALE_MAX_ROWS), once per profile.
SCALE_SHARED_BUFFERS_MB = int(os.environ.get("BENCH_SCALE_SHARED_BUFFERS_MB", "32"))
SCALE_FACTOR = float(os.environ.get("BENCH_SCALE_FACTOR", "4"))
SCALE_STEP_ROWS = int(os.environ.get("BENCH_SCALE_STEP_ROWS", "250000"))
SCALE_MAX_ROWS = int(os.environ.get("BENCH_SCALE_MAX_ROWS", "20000000"))
SCALE_CLIENTS = int(os.environ.get("BENCH_SCALE_CLIENTS", "4"))
SCALE_BATCH = int(os.environ.get("BENCH_SCALE_BATCH", "500"))
# The checkpoint settings of the scale part, which drive its WAL and full-page-image figures: a
# checkpoint starts a new round of full-page images, one per page first touched after it.
# "defaults" is PostgreSQL's; "busy" checkpoints 4x as often by WAL volume and 10x as often by
# time, as a server does whose writes fill max_wal_size between timed checkpoints.
SCALE_PROFILES = {
    "defaults": {"max_wal_size": "1GB", "checkpoint_timeout": "5min"},
    "busy": {"max_wal_size": "256MB", "checkpoint_timeout": "30s"},
}
HORIZON_ROUNDS = int(os.environ.get("BENCH_HORIZON_ROUNDS", "3"))
# The guard part: each table gets GUARD_ROWS rows in one INSERT ... SELECT, in GUARD_ROUNDS
# interleaved rounds after a warm-up.
GUARD_ROWS = int(os.environ.get("BENCH_GUARD_ROWS", "200000"))
GUARD_ROUNDS = int(os.environ.get("BENCH_GUARD_ROUNDS", "5"))
# and, under callgrind, N and 3N rows in two fresh backends per table (N = GUARD_VG_ROWS).
GUARD_VG_ROWS = int(os.environ.get("BENCH_GUARD_VG_ROWS", "10000"))
VG_CALLS = int(os.environ.get("BENCH_VG_CALLS", "100000"))
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results")
ROOT = os.geteuid() == 0

FUNCS = [
    ("snowflake_nextval()", "snowflake_nextval()"),
    ("nextval CACHE 1", "nextval('seq_cache1')"),
    ("nextval CACHE 1000", "nextval('seq_cache1000')"),
    ("gen_random_uuid()", "gen_random_uuid()"),
] + ([("uuidv7()", "uuidv7()")] if MAJOR >= 18 else []) + [
    ("clock_timestamp()", "clock_timestamp()"),
    # The floor: count(*) evaluates nothing per row. (count(x) would also deform the generated
    # row to read x, about 25 ns here, which count(f()) does not do.)
    ("count(*)", "*"),
]
FLOOR = "count(*)"
KINDS = {
    "snowflake": "id bigint PRIMARY KEY DEFAULT snowflake_nextval()",
    "bigserial": "id bigserial PRIMARY KEY",
    "identity": "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    "uuid": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
}
if MAJOR >= 18:
    KINDS["uuidv7"] = "id uuid PRIMARY KEY DEFAULT uuidv7()"


def ratio(a, b):
    """a / b, or None when either is missing or b is not positive (nothing to compare)."""
    return a / b if a is not None and b is not None and b > 0 else None


def resolved_ratio(a, b):
    """The ratio of two per-call figures, None unless both stand out of their floor's spread."""
    return ratio(a["median"], b["median"]) if a["resolved"] and b["resolved"] else None


def past_memory(r, profile, kind):
    """The step indices at which kind's index exceeds shared_buffers and snowflake has a step too
    (every key grows in the same steps, so an index is the same row count for each)."""
    series = r.get("scale", {}).get(profile)
    if not series or kind not in series:
        return []
    return [i for i, p in enumerate(series[kind])
            if p["index_mib"] > r["parameters"]["scale_shared_buffers_mb"] and i < len(series["snowflake"])]


def over_steps(r, profile, kind, metric, steps):
    """snowflake's total of a per-row metric over kind's, over the same steps (the same rows):
    WAL bytes per row, or seconds per row for the insert rate."""
    series = r["scale"][profile]
    def total(k):
        if metric == "wal_per_row":
            return sum(series[k][i]["wal_per_row"] for i in steps)
        return sum(1 / series[k][i]["rows_per_s"] for i in steps)
    if not steps:
        return None
    return ratio(total("snowflake"), total(kind)) if metric == "wal_per_row" else ratio(total(kind), total("snowflake"))


def final(r, profile, kind, metric):
    series = r.get("scale", {}).get(profile)
    return series[kind][-1][metric] if series and kind in series else None


def pgbench_ratios(r, kind, sync):
    pg = r.get("pgbench")
    return [c[kind] / c["bigserial"] for c in pg["cells"] if c["sync"] == sync] if pg else None


# The hypotheses, stated before the run and never edited after one: (id, statement, what is
# compared, how: "<=" / ">=" a threshold or "within" a (low, high) pair). `value` computes the
# compared figure from this run's results, None when the part did not run or does not apply.
HYPOTHESES = [
    ("H1", "`snowflake_nextval()` costs at most what `nextval()` on a CACHE 1000 sequence costs per call "
           "(median time, one session; both figures resolved)",
     lambda r: resolved_ratio(r["calls"]["snowflake_nextval()"], r["calls"]["nextval CACHE 1000"]), "<=", 1.0),
    ("H2", "`snowflake_nextval()` takes at most a fifth of the instructions of `nextval()` on a CACHE 1 sequence",
     lambda r: ratio(r["instructions"]["per_call"]["snowflake_nextval()"],
                     r["instructions"]["per_call"]["nextval CACHE 1"]), "<=", 0.2),
    ("H3", "two backends calling `snowflake_nextval()` at once make at least as many calls per second, together, "
           "as one backend alone (contention on the generator's lock does not lower the total)",
     lambda r: ratio(r["concurrency"]["snowflake_nextval()|2"]["calls_per_s"]["median"],
                     r["concurrency"]["snowflake_nextval()|1"]["calls_per_s"]["median"]), ">=", 1.0),
    ("H4", "single-row INSERT throughput with a snowflake key is that of `bigserial` where commits do not wait for "
           "the disk: the median of its ratios over the `synchronous_commit = off` cells within 0.9 to 1.1",
     lambda r: statistics.median(pgbench_ratios(r, "snowflake", "off")), "within", (0.9, 1.1)),
] + [h for profile in SCALE_PROFILES for h in [
    (f"H5-{profile}", f"growing past memory, {profile}: snowflake writes at most 1.05x `bigserial`'s WAL per row "
                      "over all steps",
     lambda r, p=profile: over_steps(r, p, "bigserial", "wal_per_row", range(len(r["scale"][p]["bigserial"]))),
     "<=", 1.05),
    (f"H7-{profile}", f"growing past memory, {profile}: snowflake writes at most 1/3 of UUID v4's WAL per row over "
                      "the steps where UUID v4's index exceeds shared_buffers",
     lambda r, p=profile: over_steps(r, p, "uuid", "wal_per_row", past_memory(r, p, "uuid")), "<=", 1 / 3),
    (f"H8-{profile}", f"growing past memory, {profile}: snowflake inserts at least 2x as many rows per second as "
                      "UUID v4 over the steps where UUID v4's index exceeds shared_buffers",
     lambda r, p=profile: over_steps(r, p, "uuid", "rows_per_s", past_memory(r, p, "uuid")), ">=", 2.0),
    (f"H9-{profile}", f"growing past memory, {profile}: snowflake inserts at least as many rows per second as "
                      "UUIDv7 over the steps where UUIDv7's index exceeds shared_buffers (18 and later)",
     lambda r, p=profile: over_steps(r, p, "uuidv7", "rows_per_s", past_memory(r, p, "uuidv7")), ">=", 1.0),
    (f"H10-{profile}", f"growing past memory, {profile}: snowflake's primary-key index per row is at most 0.6x "
                       "UUIDv7's (18 and later)",
     lambda r, p=profile: ratio(final(r, p, "snowflake", "index_mib") / final(r, p, "snowflake", "rows"),
                                final(r, p, "uuidv7", "index_mib") / final(r, p, "uuidv7", "rows"))
     if final(r, p, "uuidv7", "rows") else None, "<=", 0.6),
]] + [
    ("H11", "on Citus, INSERT throughput through every node with a snowflake key is at least 0.9x `bigserial`'s",
     lambda r: ratio(r["citus"]["every node|snowflake"], r["citus"]["every node|bigserial"]) if r.get("citus") else None,
     ">=", 0.9),
    ("H12", "tracking the read horizon costs at most 5 % more instructions per `snowflake_nextval()` call",
     lambda r: ratio(r["horizon"]["instructions"]["on"], r["horizon"]["instructions"]["off"]), "<=", 1.05),
    ("H13", "a table guarded by `snowflake_guard('id')` takes at most 1.1x the instructions per inserted row of "
            "the same table without it (INSERT ... SELECT of many rows, the key by default)",
     lambda r: ratio(r["guard"]["instructions"]["guard"], r["guard"]["instructions"]["none"]), "<=", 1.1),
    ("H14", "the same with `snowflake_guard('id', 'always')`: at most 1.1x the instructions per inserted row",
     lambda r: ratio(r["guard"]["instructions"]["always"], r["guard"]["instructions"]["none"]), "<=", 1.1),
]


def verdicts(r):
    out = []
    for hid, text, value, how, threshold in HYPOTHESES:
        try:
            v = value(r)
        except (KeyError, ZeroDivisionError, TypeError):
            v = None
        if v is None:
            verdict = "not measured"
        elif how == "<=":
            verdict = "holds" if v <= threshold else "fails"
        elif how == ">=":
            verdict = "holds" if v >= threshold else "fails"
        else:
            verdict = "holds" if threshold[0] <= v <= threshold[1] else "fails"
        out.append({"id": hid, "text": text, "how": how, "threshold": threshold, "value": v, "verdict": verdict})
    return out


def spread(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def signal(f_ns, floor_ns):
    """A per-call figure from rounds that each timed f and the floor: the paired differences'
    spread, the floor's own median and spread, and whether the signal stands out of that spread
    (resolved). An unresolved figure is reported as such, not as a number."""
    s = spread([a - b for a, b in zip(f_ns, floor_ns)])
    s["floor"] = statistics.median(floor_ns)
    s["floor_spread"] = max(floor_ns) - min(floor_ns)
    s["share"] = s["median"] / s["floor"]
    # At least 3 rounds, every round's difference positive, and the median above the floor's
    # own spread between rounds: otherwise the number is the machine's noise.
    s["resolved"] = s["n"] >= 3 and s["min"] > 0 and s["median"] > s["floor_spread"]
    return s


def as_owner(cmd):
    return ["runuser", "-u", "postgres", "--"] + cmd if ROOT else cmd


class Server:
    def __init__(self, port=54400, conf=""):
        self.dir = tempfile.mkdtemp(prefix="snowflake-bench.")
        if ROOT:
            shutil.chown(self.dir, "postgres")
        self.data = os.path.join(self.dir, "data")
        self.port = port
        # Data checksums on every major (18's initdb default, and common in production): with
        # them, hint bits are WAL-logged as full-page images too, so the WAL figures of every
        # major are taken alike.
        subprocess.run(as_owner([f"{BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync",
                                 "--data-checksums"]), check=True, capture_output=True)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(f"""
port = {port}
unix_socket_directories = '{self.dir}'
listen_addresses = ''
shared_preload_libraries = 'snowflake'
shared_buffers = 512MB
max_connections = 64
max_wal_size = 4GB
checkpoint_timeout = 30min
# generate_series() in FROM is kept in a tuplestore: 3,000,000 rows would spill to a temporary
# file at the default 4MB and put file I/O into every timed loop, the floor's included.
work_mem = 1GB
{conf}
""")
        self.proc = None

    def start(self, wrapper=None):
        cmd = as_owner((wrapper or []) + [f"{BIN}/postgres", "-D", self.data])
        self.proc = subprocess.Popen(cmd, stdout=open(os.path.join(self.dir, "server.log"), "w"),
                                     stderr=subprocess.STDOUT)
        for _ in range(600):
            if subprocess.run([f"{BIN}/pg_isready", "-q", "-h", self.dir, "-p", str(self.port)]).returncode == 0:
                return
            time.sleep(0.2)
        raise SystemExit("server did not start: see " + self.dir)

    def stop(self):
        subprocess.run(as_owner([f"{BIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "300", "stop"]),
                       capture_output=True)
        self.proc.wait()

    def psql(self, sql, check=True):
        r = subprocess.run([f"{BIN}/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.dir,
                            "-p", str(self.port), "-U", "postgres", "-d", "postgres"],
                           input=sql, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SystemExit(f"psql failed: {r.stderr}\n{sql}")
        return r.stdout.strip()

    def pgbench_tps(self, script, clients, seconds=None, transactions=None, options=""):
        """pgbench's own TPS (connection set-up excluded) of `script`, for `seconds` or for
        `transactions` per client; `options` are settings for its sessions (PGOPTIONS)."""
        limit = ["-T", str(seconds)] if seconds else ["-t", str(transactions)]
        r = subprocess.run([f"{BIN}/pgbench", "-n", "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                            "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1))] + limit +
                           ["-f", script, "postgres"], capture_output=True, text=True,
                           env={**os.environ, "PGOPTIONS": options})
        m = re.search(r"tps = ([0-9.]+)", r.stdout)
        if r.returncode != 0 or not m:
            raise SystemExit(f"pgbench failed: {r.stderr}")
        return float(m.group(1))

    def settings(self):
        """Every server setting whose value differs from PostgreSQL's built-in default, as
        `name = value` (a session's own, such as application_name, left out; this run's
        directory shown as <run>)."""
        out = self.psql("SELECT name || ' = ' || current_setting(name) FROM pg_catalog.pg_settings "
                        "WHERE (source NOT IN ('default', 'client', 'session') AND setting IS DISTINCT FROM boot_val "
                        "AND name NOT IN ('config_file', 'data_directory', 'hba_file', 'ident_file')) "
                        # Set by initdb or derived at start-up, whatever their source says:
                        "OR name IN ('data_checksums', 'wal_buffers') ORDER BY name")
        return out.replace(self.dir, "<run>").splitlines()

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def machine():
    cpu = "unknown CPU"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(open("/proc/meminfo").readline().split()[1]) // (1024 * 1024)
    pg = subprocess.run([f"{BIN}/postgres", "--version"], capture_output=True, text=True).stdout.strip()
    fs = subprocess.run(["df", "--output=fstype", tempfile.gettempdir()], capture_output=True, text=True).stdout.split()
    return (f"{os.cpu_count()} cores ({cpu}), {mem} GiB RAM, {platform.system()} {platform.release()}, {pg}, "
            f"data directories on {fs[-1] if fs else 'an unknown file system'}")


def commit():
    """The commit measured (make bench builds and installs the work tree first), marked when
    what is built or run here (the extension's code, its SQL, the build, the servers' scripts and
    this benchmark) has uncommitted changes; the docs and the results do not count."""
    head = subprocess.run(["git", "-C", HERE, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown (not a git work tree)"
    dirty = subprocess.run(["git", "-C", os.path.dirname(HERE), "status", "--porcelain", "--untracked-files=no", "--",
                            "src", "core", "sql", "scripts", "Cargo.toml", "Cargo.lock", "Makefile", "snowflake.control",
                            "bench/bench.py"], capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + (" with uncommitted changes" if dirty else "")


SETTINGS = {}  # server role -> its settings that differ from the defaults, for the result file


def note_settings(role, s):
    SETTINGS[role] = s.settings()


def bench_calls(s):
    """Per call in one session: ROUNDS interleaved rounds after a warm-up; in each round every f
    and the floor run once, and f's per-call figure is (its time - the floor's time of the same
    round) / CALLS."""
    s.psql("CREATE SEQUENCE IF NOT EXISTS seq_cache1 CACHE 1; CREATE SEQUENCE IF NOT EXISTS seq_cache1000 CACHE 1000;")
    lines = ["\\timing on"]
    order = []
    for r in range(ROUNDS + 1):  # round 0 warms up and is discarded
        # Each round starts one function later, so no function always runs first or last.
        for name, expr in FUNCS[r % len(FUNCS):] + FUNCS[:r % len(FUNCS)]:
            lines.append(f"SELECT count({expr}) FROM generate_series(1, {CALLS}) x;")
            order.append((r, name))
    out = s.psql("\n".join(lines) + "\n")
    times = [float(m) for m in re.findall(r"Time: ([0-9.]+) ms", out)]
    assert len(times) == len(order), out
    per = {name: [] for name, _ in FUNCS}
    for (r, name), t in zip(order, times):
        if r > 0:
            per[name].append(t * 1e6 / CALLS)  # ns per row
    return {name: signal(per[name], per[FLOOR]) for name, _ in FUNCS if name != FLOOR} | \
        {FLOOR: spread(per[FLOOR])}


def bench_concurrency(s):
    """One and two backends calling f at once, timed by pgbench: each transaction is
    `SELECT count(f) FROM generate_series(1, CONC_BATCH)`, run for CONC_DURATION s, so neither
    client start-up nor connection set-up is in the time. Per call and backend = (clients / TPS)
    / CONC_BATCH, minus that of count(*) in the same round; calls per second = TPS * CONC_BATCH
    (with the loop's own cost in it, as measured)."""
    s.psql("CREATE SEQUENCE IF NOT EXISTS seq_cache1 CACHE 1;")
    exprs = [("snowflake_nextval()", "snowflake_nextval()"), ("nextval CACHE 1", "nextval('seq_cache1')"),
             (FLOOR, "*")]
    scripts = {}
    for i, (name, expr) in enumerate(exprs):
        scripts[name] = os.path.join(s.dir, f"conc{i}.sql")
        with open(scripts[name], "w") as f:
            f.write(f"SELECT count({expr}) FROM generate_series(1, {CONC_BATCH}) x;\n")
    ns, cps = {}, {}
    for rnd in range(CONC_ROUNDS):
        for clients in (1, 2):
            for name, _ in exprs[rnd % 3:] + exprs[:rnd % 3]:
                tps = s.pgbench_tps(scripts[name], clients, CONC_DURATION)
                ns.setdefault((name, clients), []).append(clients / tps * 1e9 / CONC_BATCH)
                cps.setdefault((name, clients), []).append(tps * CONC_BATCH)
                print(f"  round {rnd + 1} {name:20s} {clients} backend(s) {tps * CONC_BATCH:12,.0f} calls/s", flush=True)
    return {f"{name}|{c}": {"per_call": signal(ns[(name, c)], ns[(FLOOR, c)]), "calls_per_s": spread(cps[(name, c)])}
            for name, _ in exprs[:2] for c in (1, 2)}


def bench_pgbench(s):
    for kind, col in KINDS.items():
        s.psql(f"DROP TABLE IF EXISTS t_{kind}; CREATE TABLE t_{kind} ({col}, payload text NOT NULL);")
    runs = {}
    for sync in ("on", "off"):
        # Rounds interleave the key kinds, so a slow moment of the machine hits all of them.
        for r in range(PGBENCH_ROUNDS):
            for c in CLIENTS:
                for kind in KINDS:
                    s.psql(f"TRUNCATE t_{kind}; CHECKPOINT;")
                    script = os.path.join(s.dir, f"{kind}.sql")
                    with open(script, "w") as f:
                        f.write(f"INSERT INTO t_{kind} (payload) VALUES ('payload');\n")
                    tps = s.pgbench_tps(script, c, DURATION, options=f"-c synchronous_commit={sync}")
                    runs.setdefault((sync, c, kind), []).append(tps)
                    print(f"  round {r + 1} synchronous_commit={sync} clients={c:2d} {kind:10s} {tps:10.0f} tps", flush=True)
    cells = [{"sync": sync, "clients": c, **{k: statistics.median(runs[(sync, c, k)]) for k in KINDS},
              "spread": {k: spread(runs[(sync, c, k)]) for k in KINDS}}
             for sync in ("on", "off") for c in CLIENTS]
    return {"cells": cells}


def bench_sizes(s):
    sizes = {}
    for kind, col in KINDS.items():
        s.psql(f"DROP TABLE IF EXISTS t_{kind}; CREATE TABLE t_{kind} ({col}, payload text NOT NULL);"
               f"INSERT INTO t_{kind} (payload) SELECT 'payload' FROM generate_series(1, 1000000); VACUUM ANALYZE t_{kind};")
        out = s.psql(f"SELECT pg_table_size('t_{kind}'), pg_relation_size('t_{kind}_pkey')")
        t, i = out.split("|")
        sizes[kind] = {"table_mib": int(t) / 1048576, "index_mib": int(i) / 1048576}
    return sizes


def bench_horizon():
    """What the read horizon costs: one server, restarted with snowflake.track_horizon on and off
    in alternating rounds; per call, per INSERT transaction, and in instructions. PostgreSQL's own
    sequence (a bigserial table and its nextval()) is measured in every round beside them, so
    each figure is also a ratio to it from the same run. The sequence does not depend on the
    setting: its figures of both modes are pooled under "seq"."""
    s = Server(port=54402)
    kinds = ("on", "off", "seq")
    ns = {k: [] for k in kinds}
    floor = {k: [] for k in kinds}
    tps = {k: [] for k in kinds}
    scripts = {}
    for table in ("t", "ts"):
        scripts[table] = os.path.join(s.dir, f"insert_{table}.sql")
        with open(scripts[table], "w") as f:
            f.write(f"INSERT INTO {table} (payload) VALUES ('payload');\n")
    per_call = {"snowflake": "snowflake_nextval()", "seq": "nextval('s')"}

    def ns_per_call(expr, calls=CALLS):
        """(the floor's, expr's) time per row, each the best of two alternating runs."""
        out = s.psql("\\timing on\n" + "".join(
            f"SELECT count({e}) FROM generate_series(1, {calls}) x;\n" for e in ("*", expr) * 2))
        t = [float(m) for m in re.findall(r"Time: ([0-9.]+) ms", out)]
        return min(t[0], t[2]) * 1e6 / calls, min(t[1], t[3]) * 1e6 / calls

    def insert_tps(table):
        return s.pgbench_tps(scripts[table], 1, DURATION)

    try:
        s.start()
        s.psql("CREATE EXTENSION snowflake; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), payload text NOT NULL);"
               "CREATE TABLE ts (id bigserial PRIMARY KEY, payload text NOT NULL); CREATE SEQUENCE s;"
               "ALTER SYSTEM SET synchronous_commit = off;")
        for r in range(HORIZON_ROUNDS + 1):  # round 0 warms up and is discarded
            for mode in ("on", "off"):
                s.psql(f"ALTER SYSTEM SET snowflake.track_horizon = {mode};")
                s.stop()
                s.start()
                s.psql("SELECT snowflake_nextval(); TRUNCATE t, ts; CHECKPOINT;")
                got = {mode: (ns_per_call(per_call["snowflake"]), insert_tps("t")),
                       "seq": (ns_per_call(per_call["seq"]), insert_tps("ts"))}
                if r > 0:
                    for k, ((fl, n), t) in got.items():
                        floor[k].append(fl)
                        ns[k].append(n)
                        tps[k].append(t)
        s.psql("ALTER SYSTEM SET snowflake.track_horizon = on;")
        s.stop()
        s.start()
        note_settings("part 7 (the read horizon)", s)
        fl, h = ns_per_call("snowflake_horizon()", 200000)
        horizon_ns = h - fl
        s.stop()
        ins = {}
        for mode in ("on", "off"):
            with open(os.path.join(s.data, "postgresql.auto.conf"), "a") as f:
                f.write(f"\nsnowflake.track_horizon = {mode}\n")
            s.start(wrapper=["valgrind", "--tool=callgrind", "--trace-children=yes",
                             f"--callgrind-out-file={s.dir}/cg.%p"])
            s.psql("SELECT snowflake_nextval()")
            # The sequence does not depend on the setting: measured once, in the off run.
            measured = {mode: per_call["snowflake"], **({"seq": per_call["seq"]} if mode == "off" else {})}
            slope = {}
            for e in ("*", *measured.values()):
                totals = [callgrind_total(callgrind_backend(s, f"SELECT count({e}) FROM generate_series(1, {n}) x;"))
                          for n in (VG_CALLS, 3 * VG_CALLS)]
                slope[e] = (totals[1] - totals[0]) / (2 * VG_CALLS)
            for k, e in measured.items():
                ins[k] = slope[e] - slope["*"]
            s.stop()
        return {"ns": {k: signal(v, floor[k]) for k, v in ns.items()}, "tps": {k: spread(v) for k, v in tps.items()},
                "horizon_us": horizon_ns / 1000, "instructions": ins}
    finally:
        if s.proc and s.proc.poll() is None:
            s.stop()
        s.cleanup()


# Part 8's tables: (name, key column, the trigger on it). "none" is snowflake's key without a
# trigger, which every other figure is compared with; "plpgsql" a PL/pgSQL trigger that only
# returns NEW, for what a trigger of the usual kind costs; bigserial and identity (GENERATED
# ALWAYS, which the 'always' mode imitates) are PostgreSQL's own.
GUARD_TABLES = [
    ("none", KINDS["snowflake"], None),
    ("guard", KINDS["snowflake"], "snowflake_guard('id')"),
    ("always", KINDS["snowflake"], "snowflake_guard('id', 'always')"),
    ("plpgsql", KINDS["snowflake"], "noop()"),
    ("bigserial", KINDS["bigserial"], None),
    ("identity", KINDS["identity"], None),
]


def bench_guard(s):
    """What the key guard costs per inserted row: one INSERT ... SELECT of GUARD_ROWS rows into
    each table (emptied and checkpointed before), GUARD_ROUNDS interleaved rounds after a warm-up,
    each round starting one table later. Per row = the statement's time / rows; each table's extra
    per row over "none" is paired by round (as part 1 subtracts its floor), and its ratio is the
    median time's over "none"'s."""
    s.psql("CREATE OR REPLACE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';")
    for name, col, trigger in GUARD_TABLES:
        s.psql(f"DROP TABLE IF EXISTS g_{name}; CREATE TABLE g_{name} ({col}, payload text NOT NULL);" +
               (f"CREATE TRIGGER g_{name}_trigger BEFORE INSERT OR UPDATE OF id ON g_{name} FOR EACH ROW "
                f"EXECUTE FUNCTION {trigger};" if trigger else ""))
    per = {name: [] for name, _, _ in GUARD_TABLES}
    for r in range(GUARD_ROUNDS + 1):  # round 0 warms up and is discarded
        k = r % len(GUARD_TABLES)
        for name, _, _ in GUARD_TABLES[k:] + GUARD_TABLES[:k]:
            out = s.psql(f"TRUNCATE g_{name}; CHECKPOINT;\n\\timing on\n"
                         f"INSERT INTO g_{name} (payload) SELECT 'payload' FROM generate_series(1, {GUARD_ROWS});\n")
            t = float(re.search(r"Time: ([0-9.]+) ms", out).group(1))
            if r > 0:
                per[name].append(t * 1e6 / GUARD_ROWS)
            print(f"  round {r} {name:10s} {t * 1e6 / GUARD_ROWS:8.1f} ns per row", flush=True)
    base = per["none"]
    s.stop()
    # Instructions per row: each table emptied by one backend, then filled by a fresh one with N
    # and 3N rows; the difference of their totals over the 2N rows between them.
    s.start(wrapper=["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={s.dir}/cg.%p"])
    s.psql("SELECT snowflake_nextval()")  # the lease worker has started and written a lease
    ins = {}
    for name, _, _ in GUARD_TABLES:
        totals = []
        for n in (GUARD_VG_ROWS, 3 * GUARD_VG_ROWS):
            s.psql(f"TRUNCATE g_{name}")
            totals.append(callgrind_total(callgrind_backend(
                s, f"INSERT INTO g_{name} (payload) SELECT 'payload' FROM generate_series(1, {n});")))
        ins[name] = (totals[1] - totals[0]) / (2 * GUARD_VG_ROWS)
        print(f"  {name:10s} {ins[name]:8.0f} instructions per row", flush=True)
    return {"ns": {name: spread(v) for name, v in per.items()},
            "extra": {name: signal(v, base) for name, v in per.items() if name != "none"},
            "ratio": {name: ratio(statistics.median(v), statistics.median(base)) for name, v in per.items()},
            "instructions": ins}


def bench_instructions():
    """Instructions per call: a server under callgrind, one backend per expression."""
    s = Server(port=54401)
    try:
        s.start(wrapper=["valgrind", "--tool=callgrind", "--trace-children=yes",
                         f"--callgrind-out-file={s.dir}/cg.%p"])
        s.psql("CREATE EXTENSION snowflake; CREATE SEQUENCE seq_cache1 CACHE 1; CREATE SEQUENCE seq_cache1000 CACHE 1000;")
        note_settings("part 4 (instructions), under callgrind", s)
        s.psql("SELECT snowflake_nextval()")  # the lease worker has started and written a lease
        # Each expression runs in two fresh backends, over N and 3N rows: the difference cancels
        # what a backend costs by itself (connection, catalog look-ups), leaving 2N calls.
        slope = {}
        breakdown = {}
        for name, expr in FUNCS:
            totals = []
            for n in (VG_CALLS, 3 * VG_CALLS):
                path = callgrind_backend(s, f"SELECT count({expr}) FROM generate_series(1, {n}) x;")
                totals.append(callgrind_total(path))
                if name == "snowflake_nextval()" and n == VG_CALLS:
                    small = callgrind_breakdown(path)
                elif name == "snowflake_nextval()":
                    big = callgrind_breakdown(path)
            slope[name] = (totals[1] - totals[0]) / (2 * VG_CALLS)
            if name == "snowflake_nextval()":
                breakdown = {k: (big.get(k, 0) - small.get(k, 0)) / (2 * VG_CALLS) for k in big}
        s.stop()
        floor = slope[FLOOR]
        return {"per_call": {name: v - floor for name, v in slope.items()}, "breakdown": breakdown}
    finally:
        if s.proc and s.proc.poll() is None:
            s.stop()
        s.cleanup()


# Where snowflake_nextval()'s instructions go: the functions on its path, self cost per call.
BREAKDOWN = [
    ("snowflake_nextval_wrapper", "the V1 function: clock arithmetic, settings, the Datum"),
    ("State::next", "the generator policy (counters included)"),
    ("LWLockAcquire", "PostgreSQL's LWLock, acquire"),
    ("LWLockRelease", "PostgreSQL's LWLock, release"),
    ("clock_gettime", "the clock read (libc; the vDSO part is not counted)"),
]


def callgrind_backend(s, sql):
    """Runs sql in a new backend of the server under callgrind; returns its profile's path."""
    pid = s.psql(f"SELECT pg_backend_pid(); {sql}").split()[0]
    path = f"{s.dir}/cg.{pid}"
    for _ in range(600):
        if os.path.exists(path) and re.search(r"^(?:totals|summary):", open(path).read(), re.M):
            return path
        time.sleep(0.2)
    raise SystemExit(f"no callgrind profile for backend {pid}")


def callgrind_total(path):
    return int(re.search(r"^(?:totals|summary): (\d+)", open(path).read(), re.M).group(1))


def callgrind_breakdown(path):
    out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True).stdout
    found = {}
    for key, _ in BREAKDOWN:
        for line in out.splitlines():
            if key in line:
                m = re.match(r"\s*([\d,]+)", line)
                if m:
                    found[key] = int(m.group(1).replace(",", ""))
                    break
    return found


def chart(pgb, path):
    if not shutil.which("gnuplot"):
        print("gnuplot is missing: no chart")
        return
    data = os.path.join(tempfile.mkdtemp(), "tps.dat")
    cells = {(c["sync"], c["clients"]): c for c in pgb["cells"]}
    with open(data, "w") as f:
        for sync in ("on", "off"):
            f.write(f"# synchronous_commit={sync}\n")
            for c in CLIENTS:
                f.write(f"{c} " + " ".join(str(cells[(sync, c)][k]) for k in KINDS) + "\n")
            f.write("\n\n")
    plots = ", ".join(f"'{data}' index IDX using 1:{i + 2} with linespoints lw 2 title '{k}'" for i, k in enumerate(KINDS))
    script = f"""
set terminal pngcairo size 1200,500 font 'sans,10' noenhanced
set output '{path}'
set xrange [0.9:{max(CLIENTS) * 1.2}]
set multiplot layout 1,2 title 'pgbench INSERT throughput by key kind, PostgreSQL {MAJOR} (higher is better)'
set logscale x 2
set xtics ({",".join(str(c) for c in CLIENTS)})
set xlabel 'clients'
set ylabel 'transactions per second'
set key left top
set grid
set yrange [0:*]
set title 'synchronous_commit = on'
plot {plots.replace('IDX', '0')}
set title 'synchronous_commit = off'
plot {plots.replace('IDX', '1')}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def wal_position(s):
    """(WAL insert position in bytes, full-page images so far). The position counts every byte
    of WAL whoever wrote it; the image counter is read after the step's backends have exited and
    flushed their statistics."""
    for _ in range(100):
        if s.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'") == "0":
            break
        time.sleep(0.05)
    lsn, fpi = s.psql("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0'), wal_fpi FROM pg_stat_wal").split("|")
    return float(lsn), int(fpi)


def checkpoints(s):
    """(timed, requested) checkpoints so far (17 moved the counters to pg_stat_checkpointer)."""
    if MAJOR >= 17:
        t, r = s.psql("SELECT num_timed, num_requested FROM pg_stat_checkpointer").split("|")
    else:
        t, r = s.psql("SELECT checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter").split("|")
    return int(t), int(r)


def block_counters(s, table):
    """(hits, reads) of shared buffers for a table and its indexes so far."""
    h, r = s.psql(f"SELECT heap_blks_hit + idx_blks_hit, heap_blks_read + idx_blks_read "
                  f"FROM pg_statio_user_tables WHERE relname = '{table}'").split("|")
    return int(h), int(r)


def bench_scale(profile):
    """Grows one table per key, the keys taking turns step by step (each round of steps starts
    with the next key), until each key's primary-key index is SCALE_FACTOR x shared_buffers, on
    a server with the checkpoint settings of `profile`. The tables start empty right after a
    checkpoint; after that, checkpoints come as the settings and the WAL of all tables make them,
    as on a server with several tables. Autovacuum is off for these tables: its work would land
    in whichever step it ran."""
    conf = "\n".join(f"{k} = {v}" for k, v in SCALE_PROFILES[profile].items())
    s = Server(port=54402, conf=f"shared_buffers = {SCALE_SHARED_BUFFERS_MB}MB\n{conf}\n")
    s.start()
    kinds = [k for k in KINDS if k != "identity"]  # identity has the same index and WAL as bigserial
    series = {k: [] for k in kinds}
    try:
        s.psql("CREATE EXTENSION snowflake;")
        note_settings(f"part 5 (growing past memory), {profile}", s)
        limit = SCALE_FACTOR * SCALE_SHARED_BUFFERS_MB * 1048576
        scripts = {}
        for kind in kinds:
            s.psql(f"CREATE TABLE s_{kind} ({KINDS[kind]}, payload text NOT NULL) WITH (autovacuum_enabled = off);")
            scripts[kind] = os.path.join(s.dir, f"scale_{kind}.sql")
            with open(scripts[kind], "w") as f:
                f.write(f"INSERT INTO s_{kind} (payload) SELECT 'payload' FROM generate_series(1, {SCALE_BATCH});\n")
        s.psql("CHECKPOINT;")
        per_client = max(SCALE_STEP_ROWS // (SCALE_CLIENTS * SCALE_BATCH), 1)
        step_rows = per_client * SCALE_CLIENTS * SCALE_BATCH
        growing = list(kinds)
        step = 0
        while growing:
            for kind in growing[step % len(growing):] + growing[:step % len(growing)]:
                points = series[kind]
                wal0, fpi0 = wal_position(s)
                io0 = block_counters(s, f"s_{kind}")
                cp0 = checkpoints(s)
                tps = s.pgbench_tps(scripts[kind], SCALE_CLIENTS, transactions=per_client)
                wal1, fpi1 = wal_position(s)
                io1 = block_counters(s, f"s_{kind}")
                cp1 = checkpoints(s)
                rows = (points[-1]["rows"] if points else 0) + step_rows
                idx, tbl = (int(v) for v in s.psql(
                    f"SELECT pg_relation_size('s_{kind}_pkey'), pg_table_size('s_{kind}')").split("|"))
                hit, read = io1[0] - io0[0], io1[1] - io0[1]
                points.append({
                    "rows": rows,
                    "rows_per_s": tps * SCALE_BATCH,
                    "wal_per_row": (wal1 - wal0) / step_rows,
                    "fpi_per_1000": (fpi1 - fpi0) * 1000 / step_rows,
                    "checkpoints_timed": cp1[0] - cp0[0],
                    "checkpoints_requested": cp1[1] - cp0[1],
                    "index_mib": idx / 1048576,
                    "table_mib": tbl / 1048576,
                    "hit_ratio": hit / (hit + read) if hit + read else 1.0,
                })
                p = points[-1]
                print(f"  {profile:8s} {kind:10s} {rows:9d} rows {p['rows_per_s']:9.0f} rows/s {p['wal_per_row']:6.0f} B WAL/row "
                      f"{p['fpi_per_1000']:6.1f} FPI/1000 checkpoints {p['checkpoints_timed']}+{p['checkpoints_requested']} "
                      f"index {p['index_mib']:6.1f} MiB hit {p['hit_ratio']:.3f}", flush=True)
                if idx >= limit or rows >= SCALE_MAX_ROWS:
                    growing.remove(kind)
            step += 1
    finally:
        s.stop()
        s.cleanup()
    return series


SCALE_METRICS = [
    ("rows_per_s", "inserts per second", "rows per second (higher is better)"),
    ("wal_per_row", "WAL bytes per row", "bytes of WAL per row (lower is better)"),
    ("fpi_per_1000", "full-page images per 1000 rows", "full-page images per 1000 rows (lower is better)"),
]


def scale_charts(scale):
    """One chart per metric: the profiles side by side, a line per key."""
    if not shutil.which("gnuplot"):
        print("gnuplot is missing: no charts")
        return []
    tmp = tempfile.mkdtemp()
    names = []
    for key, title, ylabel in SCALE_METRICS:
        panels = []
        for profile, series in scale.items():
            plots = []
            for kind, points in series.items():
                data = os.path.join(tmp, f"{profile}.{kind}.{key}.dat")
                with open(data, "w") as f:
                    for p in points:
                        f.write(f"{p['rows']} {p[key]}\n")
                plots.append(f"'{data}' using ($1/1e6):2 with linespoints lw 2 title '{kind}'")
            settings = ", ".join(f"{k} {v}" for k, v in SCALE_PROFILES[profile].items())
            panels.append(f"set title '{profile}: {settings}'\nplot {', '.join(plots)}")
        name = f"scale-{key}-{STEM}.png"
        subprocess.run(["gnuplot"], text=True, check=True, input=f"""
set terminal pngcairo size 1200,450 font 'sans,10' noenhanced
set output '{os.path.join(OUT, name)}'
set multiplot layout 1,{len(panels)} title '{title} as the table grows (PostgreSQL {MAJOR}, shared_buffers {SCALE_SHARED_BUFFERS_MB} MB)'
set xlabel 'rows (millions)'
set ylabel '{ylabel}'
set key left top
set grid
set yrange [0:*]
{chr(10).join(panels)}
unset multiplot
""")
        names.append((title, name))
    return names


CITUS_KINDS = {k: v for k, v in KINDS.items() if k in ("snowflake", "bigserial", "uuidv7")}


def bench_citus():
    """INSERT TPS on a Citus cluster, each table distributed by its key: pgbench through the
    coordinator alone, and through the coordinator and both workers at once (the same number of
    clients in all). None on a major that Citus 14 does not support."""
    r = subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "citus.sh"),
                        str(MAJOR)], capture_output=True, text=True, env={**os.environ, "PG_CONFIG": PG_CONFIG})
    if r.returncode == 3:
        return None
    if r.returncode != 0:
        raise SystemExit("scripts/citus.sh failed: " + r.stderr)
    nodes = []
    try:
        for i in range(3):
            n = Server(port=54410 + i, conf=f"""shared_preload_libraries = 'citus,snowflake'
shared_buffers = 256MB
max_connections = 200
citus.shard_count = 8
snowflake.pair_source = 'citus'
snowflake.citus_database = 'postgres'""")
            with open(os.path.join(n.data, "postgresql.conf"), "a") as f:
                f.write(f"citus.local_hostname = '{n.dir}'\n")
            n.start()
            n.psql("CREATE EXTENSION citus;")
            nodes.append(n)
        coord = nodes[0]
        note_settings("part 6 (Citus), the coordinator; each worker differs only in port and socket directory", coord)
        coord.psql(f"SELECT citus_set_coordinator_host('{coord.dir}', {coord.port});" +
                   "".join(f"SELECT citus_add_node('{w.dir}', {w.port});" for w in nodes[1:]) +
                   "CREATE EXTENSION snowflake;")
        # Each node's pair is its Citus group: it issues once its lease worker has read it.
        for n in nodes:
            deadline = time.time() + 60
            while subprocess.run([f"{BIN}/psql", "-X", "-h", n.dir, "-p", str(n.port), "-U", "postgres",
                                  "-qAtc", "SELECT snowflake_nextval()", "postgres"],
                                 capture_output=True).returncode != 0:
                if time.time() > deadline:
                    raise SystemExit(f"Citus node {n.port} has no pair from its group after 60 s")
                time.sleep(0.5)
        for kind, col in CITUS_KINDS.items():
            coord.psql(f"CREATE TABLE c_{kind} ({col}, payload text NOT NULL); "
                       f"SELECT create_distributed_table('c_{kind}', 'id');")
        runs = {}
        routes = {"coordinator": [(coord, CITUS_CLIENTS)],
                  "every node": [(n, CITUS_CLIENTS // len(nodes)) for n in nodes]}
        for rnd in range(PGBENCH_ROUNDS):
            for route, targets in routes.items():
                for kind in CITUS_KINDS:
                    coord.psql(f"TRUNCATE c_{kind};")
                    script = os.path.join(coord.dir, f"c_{kind}.sql")
                    with open(script, "w") as f:
                        f.write(f"INSERT INTO c_{kind} (payload) VALUES ('payload');\n")
                    procs = [subprocess.Popen([f"{BIN}/pgbench", "-n", "-h", n.dir, "-p", str(n.port), "-U", "postgres",
                                               "-c", str(c), "-j", str(min(c, os.cpu_count() or 1)), "-T", str(DURATION),
                                               "-f", script, "postgres"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True) for n, c in targets]
                    tps = 0.0
                    for p in procs:
                        out, err = p.communicate()
                        m = re.search(r"tps = ([0-9.]+)", out)
                        if p.returncode != 0 or not m:
                            raise SystemExit(f"pgbench on Citus failed: {err}")
                        tps += float(m.group(1))
                    runs.setdefault((route, kind), []).append(tps)
                    print(f"  round {rnd + 1} citus via {route:11s} {kind:10s} {tps:10.0f} tps", flush=True)
        dup = coord.psql("SELECT " + " + ".join(f"(SELECT count(*) - count(DISTINCT id) FROM c_{k})" for k in CITUS_KINDS))
        if dup != "0":
            raise SystemExit(f"duplicate keys on Citus: {dup}")
        return {f"{route}|{kind}": statistics.median(v) for (route, kind), v in runs.items()}
    finally:
        for n in nodes:
            if n.proc and n.proc.poll() is None:
                n.stop()
            n.cleanup()



def markdown(r):
    """The result file for people: every figure of this run with its spread."""
    md = [f"# snowflake benchmark, PostgreSQL {MAJOR}, {r['date']}", "",
          f"- Machine: {r['machine']}.", f"- Commit measured: `{r['commit']}`.",
          f"- Parts: {', '.join(PARTS)}. Parameters: " + ", ".join(f"{k} = {v}" for k, v in r["parameters"].items()) + ".",
          "", "Produced by `make bench` (bench/bench.py). Every figure below comes from this run; each server's settings "
          "that differ from PostgreSQL's defaults are listed at the end.", ""]
    md += ["## Hypotheses", "", "Stated in bench/bench.py before the run (`HYPOTHESES`); the verdicts are computed from "
           "this run's numbers.", "", "| | hypothesis | threshold | measured | verdict |", "|---|---|---:|---:|---|"]
    for v in r["verdicts"]:
        thr = threshold_text(v)
        val = "—" if v["value"] is None else f"{v['value']:.3f}"
        md.append(f"| {v['id']} | {v['text']} | {thr} | {val} | {v['verdict']} |")
    md.append("")
    if "calls" in r:
        c = r["calls"]
        md += ["## 1. Cost per call, one session", "",
               f"`SELECT count(f) FROM generate_series(1, {CALLS})` with `work_mem = 1GB` (the series stays in memory), "
               f"{ROUNDS} interleaved rounds after a warm-up, each round starting one function later. In each round, f's per-call time is (its time − the time of `count(*)`, which evaluates nothing per row, in the "
               "same round) / calls: median (min–max) over the rounds. The floor is `count(*)`'s own time per row; "
               "a figure is reported only with at least 3 rounds, every round's difference positive and the median "
               "above the floor's spread (max − min over the rounds); otherwise it says so.", "",
               f"Floor: {c[FLOOR]['median']:.1f} ns per row ({c[FLOOR]['min']:.1f}–{c[FLOOR]['max']:.1f}).", "",
               "| f | ns per call, median (min–max) | signal / floor | snowflake_nextval() as a fraction of it |",
               "|---|---:|---:|---:|"]
        sf = c["snowflake_nextval()"]["median"]
        for name, _ in FUNCS:
            if name == FLOOR:
                continue
            frac = (f"{sf / c[name]['median']:.2f}" if name != "snowflake_nextval()" and c[name]["resolved"]
                    and c["snowflake_nextval()"]["resolved"] else "—")
            md.append(f"| `{name}` | {signal_text(c[name])} | {c[name]['share']:.2f} | {frac} |")
        md.append("")
    if "concurrency" in r:
        md += ["## 1b. One and two backends at once", "",
               f"pgbench runs `SELECT count(f) FROM generate_series(1, {CONC_BATCH})` as its transaction for {CONC_DURATION} s "
               f"with 1 and with 2 clients (this machine has {os.cpu_count()} cores), {CONC_ROUNDS} interleaved rounds; "
               "pgbench's TPS excludes connection set-up. Per call and backend = (clients / TPS) / rows, minus "
               "`count(*)`'s in the same round; calls per second = TPS × rows, the loop's own cost included.", "",
               "| f | backends | ns per call and backend, median (min–max) | calls per second, all backends, median (min–max) |",
               "|---|---:|---:|---:|"]
        for key, v in r["concurrency"].items():
            name, b = key.split("|")
            cps = v["calls_per_s"]
            md.append(f"| `{name}` | {b} | {signal_text(v['per_call'])} | {cps['median']:,.0f} ({cps['min']:,.0f}–{cps['max']:,.0f}) |")
        md.append("")
    if "pgbench" in r:
        for sync in ("on", "off"):
            md += [f"## 2. pgbench INSERT, synchronous_commit = {sync}", "",
                   f"`INSERT INTO t (payload) VALUES ('payload')`, {DURATION} s per run, table truncated and a checkpoint "
                   f"before each; TPS, median of {PGBENCH_ROUNDS} interleaved rounds (ratio to bigserial) [min–max].", "",
                   "| clients | " + " | ".join(KINDS) + " |", "|---:|" + "---:|" * len(KINDS)]
            for cell in r["pgbench"]["cells"]:
                if cell["sync"] != sync:
                    continue
                base = cell["bigserial"] or 1
                md.append(f"| {cell['clients']} | " + " | ".join(
                    f"{cell[k]:.0f} ({cell[k] / base:.2f}) [{cell['spread'][k]['min']:.0f}–{cell['spread'][k]['max']:.0f}]"
                    for k in KINDS) + " |")
            md.append("")
        md += [f"![TPS against clients](tps-{STEM}.png)", ""]
    if "sizes" in r:
        md += ["## 3. Size after 1,000,000 rows", "", "| key | table | primary-key index |", "|---|---:|---:|"]
        for k, v in r["sizes"].items():
            md.append(f"| {k} | {v['table_mib']:.1f} MiB | {v['index_mib']:.1f} MiB |")
        md.append("")
    if "instructions" in r:
        ins = r["instructions"]
        md += ["## 4. Instructions per call (callgrind)", "",
               f"A server under `valgrind --tool=callgrind`; for each f two new backends run `count(f)` over {VG_CALLS} and "
               f"{3 * VG_CALLS} rows; (difference of their instruction totals) / {2 * VG_CALLS} is the cost per row, and the "
               "floor of `count(*)` is subtracted. Repeatable, unlike times.", "",
               "| f | instructions per call |", "|---|---:|"]
        for name, _ in FUNCS:
            if name != FLOOR:
                md.append(f"| `{name}` | {ins['per_call'][name]:.0f} |")
        md += ["", "Where `snowflake_nextval()`'s instructions go (self cost per call, from `callgrind_annotate`):", "",
               "| function | what it is | instructions per call |", "|---|---|---:|"]
        for key, what in BREAKDOWN:
            if key in ins["breakdown"]:
                md.append(f"| `{key}` | {what} | {ins['breakdown'][key]:.0f} |")
        md.append("")
    if "scale" in r:
        md += ["## 5. Growing past memory", "",
               f"A server with `shared_buffers = {SCALE_SHARED_BUFFERS_MB}MB`; one table per key (autovacuum off for them), "
               f"all empty right after a checkpoint, grown in turns: a step of {SCALE_STEP_ROWS:,} rows for each key in "
               f"rotating order, {SCALE_CLIENTS} pgbench clients each inserting batches of {SCALE_BATCH} rows, until each "
               f"key's primary-key index is at least {SCALE_FACTOR:g}x shared_buffers. Checkpoints come as the settings and "
               "the WAL of all the tables make them. "
               "Run once per checkpoint profile: " + "; ".join(
                   f"**{p}**: " + ", ".join(f"`{k} = {v}`" for k, v in conf.items()) for p, conf in SCALE_PROFILES.items()) +
               ". Per step: rows per second (pgbench's TPS × batch), WAL bytes per row (the WAL insert position's "
               "advance) and full-page images per 1000 rows (`pg_stat_wal`), checkpoints timed and requested during the "
               "step, index and table size, shared-buffer hit ratio of the table and its indexes (reads may still come "
               "from the kernel's page cache).",
               "", ("" if MAJOR >= 18 else f"UUIDv7 is absent: `uuidv7()` is native from PostgreSQL 18, and this is {MAJOR}."),
               "", "Final step:", "",
               "| profile | key | rows | rows/s | WAL B/row | FPI/1000 rows | checkpoints timed + requested (all steps) | PK index MiB | table MiB | hit ratio |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for profile, series in r["scale"].items():
            for kind, points in series.items():
                p = points[-1]
                md.append(f"| {profile} | {kind} | {p['rows']:,} | {p['rows_per_s']:,.0f} | {p['wal_per_row']:.0f} | "
                          f"{p['fpi_per_1000']:.1f} | {sum(q['checkpoints_timed'] for q in points)} + "
                          f"{sum(q['checkpoints_requested'] for q in points)} | {p['index_mib']:.1f} | "
                          f"{p['table_mib']:.1f} | {p['hit_ratio']:.3f} |")
        md.append("")
        for profile, series in r["scale"].items():
            md += [f"Every step, {profile} (thousands of rows: rows/s, WAL B/row, FPI/1000, checkpoints, index MiB, hit ratio):", ""]
            for kind, points in series.items():
                md.append(f"- {kind}: " + "; ".join(
                    f"{p['rows'] // 1000}k: {p['rows_per_s']:,.0f}, {p['wal_per_row']:.0f}, {p['fpi_per_1000']:.1f}, "
                    f"{p['checkpoints_timed']}+{p['checkpoints_requested']}, {p['index_mib']:.1f}, {p['hit_ratio']:.3f}"
                    for p in points))
            md.append("")
        for title, name in r.get("scale_charts", []):
            md += [f"![{title}]({name})", ""]
    if "citus" in r:
        ct = r["citus"]
        md += ["## 6. INSERT on Citus", ""]
        if ct is None:
            md += [f"Not run: Citus 14.0.1 supports PostgreSQL 16, 17 and 18, and this is {MAJOR}.", ""]
        else:
            md += [f"A Citus 14.0.1 cluster on this machine: a coordinator and two workers (each its own server, each "
                   f"preloading `citus,snowflake`, its pair its Citus group, `snowflake.pair_source = 'citus'`), every table distributed by its key over 8 shards. "
                   f"`INSERT INTO t (payload) VALUES ('payload')`, {CITUS_CLIENTS} pgbench clients in all, {DURATION} s per "
                   f"run, median TPS of {PGBENCH_ROUNDS} interleaved rounds (ratio to bigserial). Through the coordinator: "
                   f"every client connects to it; through every node: {CITUS_CLIENTS // 3} clients on each of the three "
                   "nodes. Every key was unique at the end.", "",
                   "| route | " + " | ".join(CITUS_KINDS) + " |", "|---|" + "---:|" * len(CITUS_KINDS)]
            for route in ("coordinator", "every node"):
                base = ct[f"{route}|bigserial"] or 1
                md.append(f"| {route} | " + " | ".join(f"{ct[f'{route}|{k}']:.0f} ({ct[f'{route}|{k}'] / base:.2f})"
                                                      for k in CITUS_KINDS) + " |")
            md.append("")
    if "horizon" in r:
        h = r["horizon"]
        md += ["## 7. What the read horizon costs", "",
               "One server restarted with `snowflake.track_horizon` on and off in alternating rounds "
               f"({HORIZON_ROUNDS} after a warm-up; median (min–max)): `snowflake_nextval()` per call ({CALLS} calls; in each "
               f"round the best of two, minus the best of two `count(*)` of that round), pgbench `INSERT INTO t (payload) VALUES ('payload')` with 1 "
               f"client for {DURATION} s and `synchronous_commit = off` (one transaction per ID), and instructions per "
               "call under callgrind. PostgreSQL's own sequence (`nextval('s')`, and a `bigserial` table for the "
               "INSERTs) is measured in every round of both modes.", "",
               "| | track_horizon = on | off | sequence |", "|---|---:|---:|---:|"]
        md.append("| `snowflake_nextval()`, ns per call | " + " | ".join(signal_text(h["ns"][k]) for k in ("on", "off", "seq")) + " |")
        md.append("| INSERT transactions per second | " + " | ".join(
            f"{h['tps'][k]['median']:.0f} ({h['tps'][k]['min']:.0f}–{h['tps'][k]['max']:.0f})" for k in ("on", "off", "seq")) + " |")
        md.append("| `snowflake_nextval()`, instructions per call | " +
                  " | ".join(f"{h['instructions'][k]:.0f}" for k in ("on", "off", "seq")) + " |")
        md += ["", f"`snowflake_horizon()` itself: {h['horizon_us']:.1f} µs per call (max_connections = 64).", ""]
    if "guard" in r:
        g = r["guard"]
        md += ["## 8. What the key guard costs", "",
               f"`INSERT INTO t (payload) SELECT 'payload' FROM generate_series(1, {GUARD_ROWS})` in one session, the "
               f"key `DEFAULT snowflake_nextval()`, into a table without a trigger (none), with the key guard "
               "(`BEFORE INSERT OR UPDATE OF id ... snowflake_guard('id')`), with its `'always'` mode, and with a PL/pgSQL "
               "trigger that only returns NEW; `bigserial` and identity (`GENERATED ALWAYS`) beside them. Each table "
               f"emptied and checkpointed before its statement; {GUARD_ROUNDS} interleaved rounds after a warm-up. "
               "Extra over none: paired by round, as part 1 subtracts its floor. Instructions per row under callgrind: "
               f"a fresh backend inserts {GUARD_VG_ROWS} rows, another {3 * GUARD_VG_ROWS} (the table emptied before "
               "each), and the difference of their totals is divided by the rows between them.", "",
               "| table | ns per row, median (min–max) | extra over none, ns per row | time ratio to none | "
               "instructions per row | instruction ratio to none |",
               "|---|---:|---:|---:|---:|---:|"]
        for name, _, _ in GUARD_TABLES:
            n = g["ns"][name]
            md.append(f"| {name} | {n['median']:.1f} ({n['min']:.1f}–{n['max']:.1f}) | "
                      f"{'—' if name == 'none' else signal_text(g['extra'][name])} | {g['ratio'][name]:.3f} | "
                      f"{g['instructions'][name]:.0f} | {g['instructions'][name] / g['instructions']['none']:.3f} |")
        md.append("")
    md += ["## Server settings", "", "Every setting that differs from PostgreSQL's built-in default "
           "(`pg_settings.boot_val`), per server:", ""]
    for role, lines in r["settings"].items():
        md += [f"- {role}: " + ", ".join(f"`{line}`" for line in lines)]
    md.append("")
    return "\n".join(md)


# A run of every part is the one the docs render from; a run of some parts is kept apart, its
# charts included.
STEM = f"pg{MAJOR}" if ",".join(PARTS) == DEFAULT_PARTS else f"pg{MAJOR}-" + "-".join(PARTS)


def main():
    os.makedirs(OUT, exist_ok=True)
    r = {"major": MAJOR, "date": datetime.date.today().isoformat(), "machine": machine(), "commit": commit(),
         "parts": PARTS, "parameters": {
             "calls": CALLS, "rounds": ROUNDS, "pgbench_duration_s": DURATION, "pgbench_rounds": PGBENCH_ROUNDS,
             "clients": CLIENTS, "conc_batch": CONC_BATCH, "conc_duration_s": CONC_DURATION, "conc_rounds": CONC_ROUNDS,
             "scale_shared_buffers_mb": SCALE_SHARED_BUFFERS_MB, "scale_factor": SCALE_FACTOR,
             "scale_step_rows": SCALE_STEP_ROWS, "scale_clients": SCALE_CLIENTS, "scale_batch": SCALE_BATCH,
             "scale_max_rows": SCALE_MAX_ROWS, "scale_profiles": SCALE_PROFILES, "horizon_rounds": HORIZON_ROUNDS,
             "vg_calls": VG_CALLS, "citus_clients": CITUS_CLIENTS, "guard_rows": GUARD_ROWS,
             "guard_rounds": GUARD_ROUNDS, "guard_vg_rows": GUARD_VG_ROWS}}
    print("Hypotheses (bench/bench.py, before the run):")
    for hid, text, _, how, threshold in HYPOTHESES:
        print(f"  {hid}: {text} ({threshold_text({'how': how, 'threshold': threshold})})")
    s = Server()
    s.start()
    try:
        s.psql("CREATE EXTENSION snowflake;")
        note_settings("parts 1 to 3", s)
        if "calls" in PARTS:
            print("1. cost per call ...", flush=True)
            r["calls"] = bench_calls(s)
        if "concurrency" in PARTS:
            print("1b. concurrency ...", flush=True)
            r["concurrency"] = bench_concurrency(s)
        if "pgbench" in PARTS:
            print("2. pgbench ...", flush=True)
            r["pgbench"] = bench_pgbench(s)
            chart(r["pgbench"], os.path.join(OUT, f"tps-{STEM}.png"))
        if "sizes" in PARTS:
            print("3. sizes ...", flush=True)
            r["sizes"] = bench_sizes(s)
    finally:
        s.stop()
        s.cleanup()
    if "instructions" in PARTS:
        print("4. instructions (valgrind) ...", flush=True)
        r["instructions"] = bench_instructions()
    if "scale" in PARTS:
        print("5. scale ...", flush=True)
        r["scale"] = {profile: bench_scale(profile) for profile in SCALE_PROFILES}
        r["scale_charts"] = scale_charts(r["scale"])
    if "citus" in PARTS:
        print("6. Citus ...", flush=True)
        r["citus"] = bench_citus()
    if "horizon" in PARTS:
        print("7. the read horizon ...", flush=True)
        r["horizon"] = bench_horizon()
    if "guard" in PARTS:
        print("8. the key guard ...", flush=True)
        s = Server(port=54403)
        s.start()
        try:
            s.psql("CREATE EXTENSION snowflake;")
            note_settings("part 8 (the key guard)", s)
            r["guard"] = bench_guard(s)
        finally:
            s.stop()
            s.cleanup()
    if "scale" in r:
        # snowflake against each random or 16-byte key over the steps where that key's index
        # exceeds shared_buffers (the same rows for both): WAL per row, and insert rate.
        r["scale_compare"] = {profile: {kind: {"steps": len(past_memory(r, profile, kind)),
                                               "wal_per_row": over_steps(r, profile, kind, "wal_per_row",
                                                                         past_memory(r, profile, kind)),
                                               "rows_per_s": over_steps(r, profile, kind, "rows_per_s",
                                                                        past_memory(r, profile, kind))}
                                        for kind in ("bigserial", "uuid", "uuidv7") if kind in r["scale"][profile]}
                              for profile in r["scale"]}
    r["settings"] = SETTINGS
    r["verdicts"] = verdicts(r)
    text = markdown(r)
    with open(os.path.join(OUT, STEM + ".md"), "w") as f:
        f.write(text)
    with open(os.path.join(OUT, STEM + ".json"), "w") as f:
        json.dump(r, f, indent=1, sort_keys=True)
        f.write("\n")
    print(text)
    print("Verdicts:")
    for v in r["verdicts"]:
        val = "—" if v["value"] is None else f"{v['value']:.3f}"
        print(f"  {v['id']}: {v['verdict']} ({val}; {threshold_text(v)})")


if __name__ == "__main__":
    sys.exit(main())
