#!/usr/bin/env python3
"""make bench: snowflake_nextval() against PostgreSQL's own sequences, identity and UUIDs.

Everything is measured in one run on one throwaway server, so the ratios compare like with like:
  1. cost per call in one session (median of several interleaved rounds, minus the shared floor),
  2. pgbench INSERT throughput at 1..16 clients, with synchronous_commit on and off,
  3. table and primary-key index size after 1,000,000 rows,
  4. instructions per call counted by valgrind (callgrind), which machine noise does not move.
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

PG_CONFIG = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")
BIN = subprocess.run([PG_CONFIG, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
MAJOR = int(re.match(r"PostgreSQL (\d+)", subprocess.run([PG_CONFIG, "--version"], capture_output=True, text=True,
                                                          check=True).stdout).group(1))
CALLS = int(os.environ.get("BENCH_CALLS", "3000000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
DURATION = int(os.environ.get("BENCH_DURATION", "5"))
PGBENCH_ROUNDS = int(os.environ.get("BENCH_PGBENCH_ROUNDS", "3"))
CLIENTS = [int(c) for c in os.environ.get("BENCH_CLIENTS", "1,2,4,8,16").split(",")]
PARTS = os.environ.get("BENCH_PARTS", "calls,pgbench,sizes,instructions").split(",")
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
    def __init__(self, port=54400):
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
    text = "\n".join(md)
    for name in (f"{today}-pg{MAJOR}.md", f"latest-pg{MAJOR}.md"):
        with open(os.path.join(OUT, name), "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
