#!/usr/bin/env python3
"""make bench: snowflake_nextval() against PostgreSQL's own sequences, identity and UUIDs.

Everything is measured in one run on one throwaway server, so the ratios compare like with like:
  1. cost per call in one session (median of several interleaved rounds, minus the shared floor),
  2. pgbench INSERT throughput at 1..16 clients, with synchronous_commit on and off,
  3. table and primary-key index size after 1,000,000 rows,
  4. instructions per call counted by valgrind (callgrind), which machine noise does not move,
  5. each key's table grown past memory (WAL, full-page images, index size),
  6. on PostgreSQL 16 to 18, INSERT throughput on a Citus cluster (a coordinator and two workers),
     through the coordinator and through every node (scripts/citus.sh builds Citus).
Writes bench/results/<date>-pgNN.md, latest-pgNN.md and tps-pgNN.png for the server's major NN.
On PostgreSQL 18 and later, the native uuidv7() joins gen_random_uuid() in every part.
This is a benchmark, not a test: it never fails on a time.
"""
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PG_CONFIG = os.environ.get("PG_CONFIG") or sys.exit("bench.py: set PG_CONFIG (make bench PG_MAJOR=NN does)")
BIN = subprocess.run([PG_CONFIG, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
MAJOR = int(re.match(r"PostgreSQL (\d+)", subprocess.run([PG_CONFIG, "--version"], capture_output=True, text=True,
                                                          check=True).stdout).group(1))
CALLS = int(os.environ.get("BENCH_CALLS", "3000000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
DURATION = int(os.environ.get("BENCH_DURATION", "5"))
PGBENCH_ROUNDS = int(os.environ.get("BENCH_PGBENCH_ROUNDS", "3"))
CLIENTS = [int(c) for c in os.environ.get("BENCH_CLIENTS", "1,2,4,8,16").split(",")]
DEFAULT_PARTS = "calls,concurrency,pgbench,sizes,instructions,scale,citus,horizon"
PARTS = os.environ.get("BENCH_PARTS", DEFAULT_PARTS).split(",")
# The Citus part: total pgbench clients, spread evenly over the nodes in the "every node" runs.
CITUS_CLIENTS = int(os.environ.get("BENCH_CITUS_CLIENTS", "6"))
# The scale part: a server with small shared buffers, each key's table grown in steps until its
# primary-key index is SCALE_FACTOR times shared_buffers (or SCALE_MAX_ROWS).
SCALE_SHARED_BUFFERS_MB = int(os.environ.get("BENCH_SCALE_SHARED_BUFFERS_MB", "64"))
SCALE_FACTOR = float(os.environ.get("BENCH_SCALE_FACTOR", "4"))
SCALE_STEP_ROWS = int(os.environ.get("BENCH_SCALE_STEP_ROWS", "500000"))
SCALE_MAX_ROWS = int(os.environ.get("BENCH_SCALE_MAX_ROWS", "20000000"))
# A checkpoint before every step: these inserts are fast enough that a timed checkpoint would
# rarely fall inside a run, while a production server checkpoints every few minutes under a
# steady load. Each step then pays the full-page images that follow a checkpoint once.
SCALE_CHECKPOINT_EACH_STEP = os.environ.get("BENCH_SCALE_CHECKPOINT_EACH_STEP", "1") == "1"
SCALE_CLIENTS = int(os.environ.get("BENCH_SCALE_CLIENTS", "4"))
SCALE_BATCH = int(os.environ.get("BENCH_SCALE_BATCH", "500"))
SCALE_CHECKPOINT = os.environ.get("BENCH_SCALE_CHECKPOINT_TIMEOUT", "30s")
CONC_CALLS = int(os.environ.get("BENCH_CONC_CALLS", "2000000"))
VG_CALLS = int(os.environ.get("BENCH_VG_CALLS", "100000"))
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
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
KINDS = {
    "snowflake": "id bigint PRIMARY KEY DEFAULT snowflake_nextval()",
    "bigserial": "id bigserial PRIMARY KEY",
    "identity": "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    "uuid": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
}
if MAJOR >= 18:
    KINDS["uuidv7"] = "id uuid PRIMARY KEY DEFAULT uuidv7()"


def as_owner(cmd):
    return ["runuser", "-u", "postgres", "--"] + cmd if ROOT else cmd


class Server:
    def __init__(self, port=54400, conf=""):
        self.dir = tempfile.mkdtemp(prefix="snowflake-bench.")
        if ROOT:
            shutil.chown(self.dir, "postgres")
        self.data = os.path.join(self.dir, "data")
        self.port = port
        subprocess.run(as_owner([f"{BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync"]),
                       check=True, capture_output=True)
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
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB RAM, {platform.system()} {platform.release()}, {pg}"


def bench_calls(s):
    s.psql("CREATE SEQUENCE IF NOT EXISTS seq_cache1 CACHE 1; CREATE SEQUENCE IF NOT EXISTS seq_cache1000 CACHE 1000;")
    lines = ["\\timing on"]
    order = []
    for r in range(ROUNDS + 1):  # round 0 warms up and is discarded
        for name, expr in FUNCS:
            lines.append(f"SELECT count({expr}) FROM generate_series(1, {CALLS}) x;")
            order.append((r, name))
    out = s.psql("\n".join(lines) + "\n")
    times = [float(m) for m in re.findall(r"Time: ([0-9.]+) ms", out)]
    assert len(times) == len(order), out
    per = {name: [] for name, _ in FUNCS}
    for (r, name), t in zip(order, times):
        if r > 0:
            per[name].append(t)
    med = {name: statistics.median(v) for name, v in per.items()}
    floor = med["count(*)"]
    ns = {name: max(med[name] - floor, 0.0) * 1e6 / CALLS for name in med}
    return med, ns


def bench_pgbench(s):
    for kind, col in KINDS.items():
        s.psql(f"DROP TABLE IF EXISTS t_{kind}; CREATE TABLE t_{kind} ({col}, payload text NOT NULL);")
    runs = {}
    for sync in ("on", "off"):
        s.psql(f"ALTER SYSTEM SET synchronous_commit = {sync}; SELECT pg_reload_conf();")
        # Rounds interleave the key kinds, so a slow moment of the machine hits all of them.
        for r in range(PGBENCH_ROUNDS):
            for c in CLIENTS:
                for kind in KINDS:
                    s.psql(f"TRUNCATE t_{kind}; CHECKPOINT;")
                    script = os.path.join(s.dir, f"{kind}.sql")
                    with open(script, "w") as f:
                        f.write(f"INSERT INTO t_{kind} (payload) VALUES ('payload');\n")
                    r_ = subprocess.run([f"{BIN}/pgbench", "-n", "-h", s.dir, "-p", str(s.port), "-U", "postgres",
                                         "-c", str(c), "-j", str(min(c, os.cpu_count() or 1)), "-T", str(DURATION),
                                         "-f", script, "postgres"], capture_output=True, text=True)
                    m = re.search(r"tps = ([0-9.]+)", r_.stdout)
                    tps = float(m.group(1)) if m else 0.0
                    runs.setdefault((sync, c, kind), []).append(tps)
                    print(f"  round {r + 1} synchronous_commit={sync} clients={c:2d} {kind:10s} {tps:10.0f} tps", flush=True)
    results = {k: statistics.median(v) for k, v in runs.items()}
    return results


def bench_sizes(s):
    sizes = {}
    for kind, col in KINDS.items():
        s.psql(f"DROP TABLE IF EXISTS t_{kind}; CREATE TABLE t_{kind} ({col}, payload text NOT NULL);"
               f"INSERT INTO t_{kind} (payload) SELECT 'payload' FROM generate_series(1, 1000000); VACUUM ANALYZE t_{kind};")
        out = s.psql(f"SELECT pg_table_size('t_{kind}'), pg_relation_size('t_{kind}_pkey')")
        t, i = out.split("|")
        sizes[kind] = (int(t), int(i))
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
    tps = {k: [] for k in kinds}
    scripts = {}
    for table in ("t", "ts"):
        scripts[table] = os.path.join(s.dir, f"insert_{table}.sql")
        with open(scripts[table], "w") as f:
            f.write(f"INSERT INTO {table} (payload) VALUES ('payload');\n")
    per_call = {"snowflake": "snowflake_nextval()", "seq": "nextval('s')"}

    def ns_per_call(expr, calls=CALLS):
        out = s.psql("\\timing on\n" + "".join(
            f"SELECT count({e}) FROM generate_series(1, {calls}) x;\n" for e in ("*", expr) * 2))
        t = [float(m) for m in re.findall(r"Time: ([0-9.]+) ms", out)]
        return (min(t[1], t[3]) - min(t[0], t[2])) * 1e6 / calls

    def insert_tps(table):
        r_ = subprocess.run([f"{BIN}/pgbench", "-n", "-h", s.dir, "-p", str(s.port), "-U", "postgres", "-c", "1",
                             "-T", str(DURATION), "-f", scripts[table], "postgres"], capture_output=True, text=True)
        m = re.search(r"tps = ([0-9.]+)", r_.stdout)
        return float(m.group(1)) if m else 0.0

    try:
        s.start()
        s.psql("CREATE EXTENSION snowflake; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), payload text NOT NULL);"
               "CREATE TABLE ts (id bigserial PRIMARY KEY, payload text NOT NULL); CREATE SEQUENCE s;"
               "ALTER SYSTEM SET synchronous_commit = off;")
        for r in range(ROUNDS + 1):  # round 0 warms up and is discarded
            for mode in ("on", "off"):
                s.psql(f"ALTER SYSTEM SET snowflake.track_horizon = {mode};")
                s.stop()
                s.start()
                s.psql("SELECT snowflake_nextval(); TRUNCATE t, ts; CHECKPOINT;")
                got = {mode: (ns_per_call(per_call["snowflake"]), insert_tps("t")),
                       "seq": (ns_per_call(per_call["seq"]), insert_tps("ts"))}
                if r > 0:
                    for k, (n, t) in got.items():
                        ns[k].append(n)
                        tps[k].append(t)
        s.psql("ALTER SYSTEM SET snowflake.track_horizon = on;")
        s.stop()
        s.start()
        horizon_ns = ns_per_call("snowflake_horizon()", 200000)
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
        return ({k: statistics.median(v) for k, v in ns.items()}, {k: statistics.median(v) for k, v in tps.items()},
                horizon_ns, ins)
    finally:
        if s.proc and s.proc.poll() is None:
            s.stop()
        s.cleanup()


def bench_instructions():
    """Instructions per call: a server under callgrind, one backend per expression."""
    s = Server(port=54401)
    try:
        s.start(wrapper=["valgrind", "--tool=callgrind", "--trace-children=yes",
                         f"--callgrind-out-file={s.dir}/cg.%p"])
        s.psql("CREATE EXTENSION snowflake; CREATE SEQUENCE seq_cache1 CACHE 1; CREATE SEQUENCE seq_cache1000 CACHE 1000;")
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
        floor = slope["count(*)"]
        return {name: v - floor for name, v in slope.items()}, breakdown
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


def chart(pg, path):
    if not shutil.which("gnuplot"):
        print("gnuplot is missing: no chart")
        return
    data = os.path.join(tempfile.mkdtemp(), "tps.dat")
    with open(data, "w") as f:
        for sync in ("on", "off"):
            f.write(f"# synchronous_commit={sync}\n")
            for c in CLIENTS:
                f.write(f"{c} " + " ".join(str(pg[(sync, c, k)]) for k in KINDS) + "\n")
            f.write("\n\n")
    plots = ", ".join(f"'{data}' index IDX using 1:{i + 2} with linespoints lw 2 title '{k}'" for i, k in enumerate(KINDS))
    script = f"""
set terminal pngcairo size 1200,500 font 'sans,10' noenhanced
set output '{path}'
set xrange [0.9:18]
set multiplot layout 1,2 title 'pgbench INSERT throughput by key kind (higher is better)'
set logscale x 2
set xtics (1,2,4,8,16)
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


def bench_concurrency(s):
    """Per-call cost with 1 and with 2 backends calling in tight loops at the same time."""
    s.psql("CREATE SEQUENCE IF NOT EXISTS seq_cache1 CACHE 1;")
    out = {}
    for name, expr in [("snowflake_nextval()", "snowflake_nextval()"), ("nextval CACHE 1", "nextval('seq_cache1')"),
                       ("count(*)", "*")]:
        sql = f"SELECT count({expr}) FROM generate_series(1, {CONC_CALLS}) x;"
        for backends in (1, 2):
            best = None
            for _ in range(3):
                t0 = time.monotonic()
                procs = [subprocess.Popen([f"{BIN}/psql", "-X", "-q", "-h", s.dir, "-p", str(s.port), "-U", "postgres",
                                           "-d", "postgres", "-c", sql], stdout=subprocess.DEVNULL) for _ in range(backends)]
                for p in procs:
                    p.wait()
                wall = time.monotonic() - t0
                best = wall if best is None else min(best, wall)
            out[(name, backends)] = best
    res = {}
    for name in ("snowflake_nextval()", "nextval CACHE 1"):
        for b in (1, 2):
            # Each backend made CONC_CALLS calls in `wall` seconds; the floor is count(*) alone.
            per_call = max(out[(name, b)] - out[("count(*)", b)], 0.0) * 1e9 / CONC_CALLS
            res[(name, b)] = (per_call, b * CONC_CALLS / out[(name, b)])
    return res


def wal_counters(s):
    b, f = s.psql("SELECT wal_bytes, wal_fpi FROM pg_stat_wal").split("|")
    return float(b), int(f)


def block_counters(s, table):
    """(hits, reads) of shared buffers for a table and its indexes so far."""
    h, r = s.psql(f"SELECT heap_blks_hit + idx_blks_hit, heap_blks_read + idx_blks_read "
                  f"FROM pg_statio_user_tables WHERE relname = '{table}'").split("|")
    return int(h), int(r)


def bench_scale():
    """Grows one table per key until its primary-key index is SCALE_FACTOR x shared_buffers."""
    s = Server(port=54402, conf=f"""
shared_buffers = {SCALE_SHARED_BUFFERS_MB}MB
checkpoint_timeout = {SCALE_CHECKPOINT}
max_wal_size = 256MB
""")
    s.start()
    series = {}
    try:
        s.psql("CREATE EXTENSION snowflake;")
        limit = SCALE_FACTOR * SCALE_SHARED_BUFFERS_MB * 1048576
        for kind, col in KINDS.items():
            if kind == "identity":
                continue  # the same index and WAL as bigserial
            s.psql(f"DROP TABLE IF EXISTS s_{kind}; CREATE TABLE s_{kind} ({col}, payload text NOT NULL); CHECKPOINT;")
            script = os.path.join(s.dir, f"scale_{kind}.sql")
            with open(script, "w") as f:
                f.write(f"INSERT INTO s_{kind} (payload) SELECT 'payload' FROM generate_series(1, {SCALE_BATCH});\n")
            per_client = max(SCALE_STEP_ROWS // (SCALE_CLIENTS * SCALE_BATCH), 1)
            step_rows = per_client * SCALE_CLIENTS * SCALE_BATCH
            rows, points = 0, []
            while rows < SCALE_MAX_ROWS:
                if SCALE_CHECKPOINT_EACH_STEP:
                    s.psql("CHECKPOINT;")
                wal0, fpi0 = wal_counters(s)
                io0 = block_counters(s, f"s_{kind}")
                t0 = time.monotonic()
                r = subprocess.run([f"{BIN}/pgbench", "-n", "-h", s.dir, "-p", str(s.port), "-U", "postgres",
                                    "-c", str(SCALE_CLIENTS), "-j", str(min(SCALE_CLIENTS, os.cpu_count() or 1)),
                                    "-t", str(per_client), "-f", script, "postgres"], capture_output=True, text=True)
                wall = time.monotonic() - t0
                if r.returncode != 0:
                    raise SystemExit(f"pgbench failed: {r.stderr}")
                wal1, fpi1 = wal_counters(s)
                io1 = block_counters(s, f"s_{kind}")
                rows += step_rows
                idx, tbl = (int(v) for v in s.psql(
                    f"SELECT pg_relation_size('s_{kind}_pkey'), pg_table_size('s_{kind}')").split("|"))
                hit, read = io1[0] - io0[0], io1[1] - io0[1]
                points.append({
                    "rows": rows,
                    "rows_per_s": step_rows / wall,
                    "wal_per_row": (wal1 - wal0) / step_rows,
                    "fpi_per_1000": (fpi1 - fpi0) * 1000 / step_rows,
                    "index_mib": idx / 1048576,
                    "table_mib": tbl / 1048576,
                    "hit_ratio": hit / (hit + read) if hit + read else 1.0,
                })
                p = points[-1]
                print(f"  {kind:10s} {rows:9d} rows {p['rows_per_s']:9.0f} rows/s {p['wal_per_row']:6.0f} B WAL/row "
                      f"{p['fpi_per_1000']:6.1f} FPI/1000 index {p['index_mib']:6.1f} MiB hit {p['hit_ratio']:.3f}", flush=True)
                if idx >= limit:
                    break
            series[kind] = points
            s.psql(f"DROP TABLE s_{kind}; CHECKPOINT;")
    finally:
        s.stop()
        s.cleanup()
    return series


SCALE_METRICS = [
    ("rows_per_s", "inserts per second", "rows per second (higher is better)"),
    ("wal_per_row", "WAL bytes per row", "bytes of WAL per row (lower is better)"),
    ("fpi_per_1000", "full-page images per 1000 rows", "full-page images per 1000 rows (lower is better)"),
    ("index_mib", "primary-key index size", "MiB"),
    ("table_mib", "table size", "MiB"),
    ("hit_ratio", "shared-buffer hit ratio", "hits / (hits + reads)"),
]


def scale_charts(series):
    if not shutil.which("gnuplot"):
        print("gnuplot is missing: no charts")
        return []
    tmp = tempfile.mkdtemp()
    names = []
    for key, title, ylabel in SCALE_METRICS:
        plots = []
        for kind, points in series.items():
            data = os.path.join(tmp, f"{kind}.{key}.dat")
            with open(data, "w") as f:
                for p in points:
                    f.write(f"{p['rows']} {p[key]}\n")
            plots.append(f"'{data}' using ($1/1e6):2 with linespoints lw 2 title '{kind}'")
        name = f"scale-{key}-pg{MAJOR}.png"
        subprocess.run(["gnuplot"], text=True, check=True, input=f"""
set terminal pngcairo size 900,450 font 'sans,10' noenhanced
set output '{os.path.join(OUT, name)}'
set title '{title} as the table grows (PostgreSQL {MAJOR}, shared_buffers {SCALE_SHARED_BUFFERS_MB} MB)'
set xlabel 'rows (millions)'
set ylabel '{ylabel}'
set key left top
set grid
set yrange [0:*]
plot {", ".join(plots)}
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
snowflake.datacenter_id = 1
snowflake.worker_id = {i}""")
            with open(os.path.join(n.data, "postgresql.conf"), "a") as f:
                f.write(f"citus.local_hostname = '{n.dir}'\n")
            n.start()
            n.psql("CREATE EXTENSION citus;")
            nodes.append(n)
        coord = nodes[0]
        coord.psql(f"SELECT citus_set_coordinator_host('{coord.dir}', {coord.port});" +
                   "".join(f"SELECT citus_add_node('{w.dir}', {w.port});" for w in nodes[1:]) +
                   "CREATE EXTENSION snowflake;")
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
        return {k: statistics.median(v) for k, v in runs.items()}
    finally:
        for n in nodes:
            if n.proc and n.proc.poll() is None:
                n.stop()
            n.cleanup()


def main():
    os.makedirs(OUT, exist_ok=True)
    today = datetime.date.today().isoformat()
    md = [f"# snowflake benchmark, PostgreSQL {MAJOR}, {today}", "", f"Machine: {machine()}.", "",
          "Produced by `make bench` (bench/bench.py); every figure below comes from the same run and server.", ""]
    s = Server()
    s.start()
    try:
        s.psql("CREATE EXTENSION snowflake;")
        if "calls" in PARTS:
            print("1. cost per call ...", flush=True)
            med, ns = bench_calls(s)
            sf = ns["snowflake_nextval()"]
            md += [f"## 1. Cost per call, one session", "",
                   f"`SELECT count(f) FROM generate_series(1, {CALLS})`, median of {ROUNDS} interleaved rounds after a warm-up. "
                   "Per call = (median − median of `count(*)`, which evaluates nothing per row) / calls.", "",
                   "| f | median ms | ns per call | snowflake_nextval() per call as a fraction of it |", "|---|---:|---:|---:|"]
            for name, _ in FUNCS:
                frac = f"{sf / ns[name]:.2f}" if ns[name] > 0 and name not in ("snowflake_nextval()", "count(*)") else "—"
                md.append(f"| `{name}` | {med[name]:.1f} | {ns[name]:.1f} | {frac} |")
            md.append("")
            print("\n".join(md[-len(FUNCS) - 3:]), flush=True)
        if "concurrency" in PARTS:
            print("1b. concurrency ...", flush=True)
            conc = bench_concurrency(s)
            md += ["## 1b. One and two backends calling at once", "",
                   f"Each backend runs `SELECT count(f) FROM generate_series(1, {CONC_CALLS})`; with 2 backends both run at the "
                   "same time on this 2-core machine. Best of 3; the floor (`count(*)` with the same number of backends) is "
                   "subtracted.", "",
                   "| f | backends | ns per call, each backend | calls per second, all backends |", "|---|---:|---:|---:|"]
            for (name, b), (ns_, cps) in conc.items():
                md.append(f"| `{name}` | {b} | {ns_:.1f} | {cps:,.0f} |")
            md.append("")
            print("\n".join(md[-6:]), flush=True)
        if "pgbench" in PARTS:
            print("2. pgbench ...", flush=True)
            pg = bench_pgbench(s)
            for sync in ("on", "off"):
                md += [f"## 2. pgbench INSERT, synchronous_commit = {sync}", "",
                       f"`INSERT INTO t (payload) VALUES ('payload')`, {DURATION} s per run, table truncated and a checkpoint before "
                       f"each; median TPS of {PGBENCH_ROUNDS} interleaved rounds (ratio to bigserial).", "",
                       "| clients | " + " | ".join(KINDS) + " |", "|---:|" + "---:|" * len(KINDS)]
                for c in CLIENTS:
                    base = pg[(sync, c, "bigserial")] or 1
                    md.append(f"| {c} | " + " | ".join(f"{pg[(sync, c, k)]:.0f} ({pg[(sync, c, k)] / base:.2f})" for k in KINDS) + " |")
                md.append("")
            chart(pg, os.path.join(OUT, f"tps-pg{MAJOR}.png"))
            md += [f"![TPS against clients](tps-pg{MAJOR}.png)", ""]
        if "sizes" in PARTS:
            print("3. sizes ...", flush=True)
            sizes = bench_sizes(s)
            md += ["## 3. Size after 1,000,000 rows", "", "| key | table | primary-key index |", "|---|---:|---:|"]
            for k, (t, i) in sizes.items():
                md.append(f"| {k} | {t / 1048576:.1f} MiB | {i / 1048576:.1f} MiB |")
            md.append("")
    finally:
        s.stop()
        s.cleanup()
    if "instructions" in PARTS:
        print("4. instructions (valgrind) ...", flush=True)
        ins, breakdown = bench_instructions()
        md += ["## 4. Instructions per call (callgrind)", "",
               f"A server under `valgrind --tool=callgrind`; for each f two new backends run `count(f)` over {VG_CALLS} and "
               f"{3 * VG_CALLS} rows; (difference of their instruction totals) / {2 * VG_CALLS} is the cost per row, and the "
               "floor of `count(*)` (which evaluates nothing per row) is subtracted. Repeatable, unlike times.", "",
               "| f | instructions per call |", "|---|---:|"]
        for name, _ in FUNCS:
            md.append(f"| `{name}` | {ins[name]:.0f} |")
        md += ["", "Where `snowflake_nextval()`'s instructions go (self cost per call, from `callgrind_annotate`):", "",
               "| function | what it is | instructions per call |", "|---|---|---:|"]
        for key, what in BREAKDOWN:
            if key in breakdown:
                md.append(f"| `{key}` | {what} | {breakdown[key]:.0f} |")
        md.append("")
    if "scale" in PARTS:
        print("5. scale ...", flush=True)
        series = bench_scale()
        charts = scale_charts(series)
        md += ["## 5. Growing past memory", "",
               f"A server with `shared_buffers = {SCALE_SHARED_BUFFERS_MB}MB`, `checkpoint_timeout = {SCALE_CHECKPOINT}` "
               f"and `full_page_writes = on`{', and a CHECKPOINT before every step' if SCALE_CHECKPOINT_EACH_STEP else ''}; for each key a table grows from empty in steps of {SCALE_STEP_ROWS:,} rows, "
               f"{SCALE_CLIENTS} pgbench clients each inserting batches of {SCALE_BATCH} rows, until its primary-key index "
               f"is at least {SCALE_FACTOR:g}x shared_buffers. Per step: rows per second, WAL bytes per row and full-page "
               "images per 1000 rows (`pg_stat_wal`), index and table size, shared-buffer hit ratio of the table and its "
               "indexes (`pg_statio_user_tables`).", "",
               ("" if MAJOR >= 18 else f"UUIDv7 is absent: `uuidv7()` is native from PostgreSQL 18, and this is {MAJOR}."),
               "",
               "Final step:", "",
               "| key | rows | rows/s | WAL B/row | FPI/1000 rows | PK index MiB | table MiB | hit ratio |",
               "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for kind, points in series.items():
            p = points[-1]
            md.append(f"| {kind} | {p['rows']:,} | {p['rows_per_s']:,.0f} | {p['wal_per_row']:.0f} | {p['fpi_per_1000']:.1f} | "
                      f"{p['index_mib']:.1f} | {p['table_mib']:.1f} | {p['hit_ratio']:.3f} |")
        md.append("")
        md += ["Every step (rows: rows/s, WAL B/row, FPI/1000, index MiB, hit ratio):", ""]
        for kind, points in series.items():
            md.append(f"- {kind}: " + "; ".join(f"{p['rows'] // 1000}k: {p['rows_per_s']:,.0f}, {p['wal_per_row']:.0f}, "
                                               f"{p['fpi_per_1000']:.1f}, {p['index_mib']:.1f}, {p['hit_ratio']:.3f}" for p in points))
        md.append("")
        for title, name in charts:
            md += [f"![{title}]({name})", ""]
    if "citus" in PARTS:
        print("6. Citus ...", flush=True)
        ct = bench_citus()
        md += ["## 6. INSERT on Citus", ""]
        if ct is None:
            md += [f"Not run: Citus 14.0.1 supports PostgreSQL 16, 17 and 18, and this is {MAJOR}.", ""]
        else:
            md += [f"A Citus 14.0.1 cluster on this machine: a coordinator and two workers (each its own server, each "
                   f"preloading `citus,snowflake` with its own pair), every table distributed by its key over 8 shards. "
                   f"`INSERT INTO t (payload) VALUES ('payload')`, {CITUS_CLIENTS} pgbench clients in all, {DURATION} s per "
                   f"run, median TPS of {PGBENCH_ROUNDS} interleaved rounds (ratio to bigserial, whose values Citus takes "
                   "from a range per node group). Through the coordinator: every client connects to it; through every "
                   f"node: {CITUS_CLIENTS // 3} clients on each of the three nodes, each node generating the keys of the "
                   "rows it receives. Every key was unique at the end.", "",
                   "| route | " + " | ".join(CITUS_KINDS) + " |", "|---|" + "---:|" * len(CITUS_KINDS)]
            for route in ("coordinator", "every node"):
                base = ct[(route, "bigserial")] or 1
                md.append(f"| {route} | " + " | ".join(f"{ct[(route, k)]:.0f} ({ct[(route, k)] / base:.2f})"
                                                      for k in CITUS_KINDS) + " |")
            md.append("")
    if "horizon" in PARTS:
        print("7. the read horizon ...", flush=True)
        ns, tps, horizon_ns, ins = bench_horizon()
        md += ["## 7. What the read horizon costs", "",
               "One server restarted with `snowflake.track_horizon` on and off in alternating rounds (median of "
               f"{ROUNDS} after a warm-up): `snowflake_nextval()` per call ({CALLS} calls, floor subtracted), pgbench "
               f"`INSERT INTO t (payload) VALUES ('payload')` with 1 client for {DURATION} s and `synchronous_commit = off` "
               "(one transaction per ID: the end-of-transaction store at its most frequent), and instructions per call "
               "under callgrind (the floor of `count(*)` subtracted, as in part 4). PostgreSQL's own sequence "
               "(`nextval('s')`, and a `bigserial` table for the INSERTs) is measured in every round of both modes "
               "on the same server; ratios are to it.", "",
               "| | track_horizon = on | off | sequence | on / off | on / sequence | off / sequence |",
               "|---|---:|---:|---:|---:|---:|---:|"]
        for label, v, fmt in (("`snowflake_nextval()`, ns per call", ns, ".1f"),
                              ("`snowflake_nextval()`, instructions per call", ins, ".0f"),
                              ("INSERT transactions per second", tps, ".0f")):
            md.append(f"| {label} | {v['on']:{fmt}} | {v['off']:{fmt}} | {v['seq']:{fmt}} | {v['on'] / v['off']:.3f} "
                      f"| {v['on'] / v['seq']:.3f} | {v['off'] / v['seq']:.3f} |")
        md += ["", f"`snowflake_horizon()` itself: {horizon_ns / 1000:.1f} µs per call (max_connections = 64).", ""]
    text = "\n".join(md)
    suffix = "" if ",".join(PARTS) == DEFAULT_PARTS else "-" + "-".join(PARTS)
    for name in (f"{today}-pg{MAJOR}{suffix}.md", f"latest-pg{MAJOR}{suffix}.md"):
        with open(os.path.join(OUT, name), "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
