#!/usr/bin/env python3
"""Renders bench/README.md's tables from bench/results/pgNN.json (written by bench.py).

Each table sits between `<!-- rendered: NAME -->` and `<!-- end rendered -->` in the page; the
words around them are written by hand and quote no figure. `render.py` rewrites the tables in
place; `render.py --check` changes nothing and exits 1 when the page differs from what the results
give (tests/docs.rs runs it, so a figure in the docs cannot drift from the results).
"""
import glob
import json
import os
import re
import statistics
import sys

from figures import signal_text, threshold_text

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(HERE, "..", "bench", "README.md")
BLOCK = re.compile(r"(<!-- rendered: ([a-z-]+) -->\n)(.*?)(<!-- end rendered -->)", re.S)


def load():
    runs = {}
    for path in glob.glob(os.path.join(HERE, "results", "pg*.json")):
        m = re.fullmatch(r"pg(\d+)\.json", os.path.basename(path))
        if m:
            with open(path) as f:
                runs[int(m.group(1))] = json.load(f)
    return dict(sorted(runs.items()))


def table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"] +
                      ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]) + "\n"


def get(r, *path):
    """r[path[0]][path[1]]..., or None where a run lacks the part or the key (an older run, a
    major without it)."""
    for key in path:
        if not isinstance(r, dict) or key not in r or r[key] is None:
            return None
        r = r[key]
    return r


def spread(s, fmt):
    return "—" if s is None else f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def num(v, fmt):
    return "—" if v is None else f"{v:{fmt}}"


def median_span(values, fmt=".2f"):
    if not values:
        return "—"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def majors_header(runs, first):
    return [first] + [str(m) for m in runs]


PARAMETERS = [("calls", "calls per loop (part 1 and 7)"), ("rounds", "rounds (part 1)"),
              ("conc_batch", "rows per pgbench transaction (part 1b)"), ("conc_duration_s", "seconds per run (1b)"),
              ("conc_rounds", "rounds (1b)"), ("clients", "pgbench clients (part 2)"),
              ("pgbench_duration_s", "seconds per pgbench run (parts 2, 6 and 7)"),
              ("pgbench_rounds", "rounds (parts 2 and 6)"), ("vg_calls", "rows N of the N and 3N callgrind loops (4, 7)"),
              ("scale_shared_buffers_mb", "shared_buffers in MB (part 5)"),
              ("scale_factor", "index size to reach, times shared_buffers (5)"), ("scale_step_rows", "rows per step (5)"),
              ("scale_clients", "pgbench clients (5)"), ("scale_batch", "rows per INSERT (5)"),
              ("citus_clients", "pgbench clients in all (part 6)"), ("horizon_rounds", "rounds (part 7)"),
              ("guard_rows", "rows per INSERT (part 8)"), ("guard_rounds", "rounds (8)"),
              ("guard_vg_rows", "rows N of the N and 3N callgrind INSERTs (8)")]


def runs_block(runs):
    out = "".join(f"- {m}: [`bench/results/pg{m}.md`](../bench/results/pg{m}.md), {r['date']}, commit `{r['commit']}`; "
                  f"{r['machine']}\n" for m, r in runs.items())
    rows = [[label] + ["—" if get(r, "parameters", key) is None else
                       (", ".join(str(c) for c in r["parameters"][key]) if isinstance(r["parameters"][key], list)
                        else f"{r['parameters'][key]:,}" if isinstance(r["parameters"][key], int)
                        else f"{r['parameters'][key]:g}") for r in runs.values()] for key, label in PARAMETERS]
    return out + "\n" + table(majors_header(runs, "parameter"), rows)


def verdicts_block(runs):
    stated = {}
    for m, r in runs.items():
        for v in r["verdicts"]:
            if v["id"] in stated and stated[v["id"]] != (v["text"], threshold_text(v)):
                raise SystemExit(f"render.py: hypothesis {v['id']} differs between the runs (pg{m}): re-run them all")
            stated[v["id"]] = (v["text"], threshold_text(v))
    rows = []
    for hid, (text, thr) in stated.items():
        row = [hid, text, thr]
        for r in runs.values():
            v = next((v for v in r["verdicts"] if v["id"] == hid), None)
            row.append("—" if v is None or v["value"] is None else f"{v['verdict']} ({v['value']:.3f})")
        rows.append(row)
    return table(["", "hypothesis", "threshold"] + [str(m) for m in runs], rows,
                 ["---", "---", "---:"] + ["---"] * len(runs))


FUNC_LABELS = [("snowflake_nextval()", "`snowflake_nextval()`"), ("nextval CACHE 1", "`nextval()`, CACHE 1"),
               ("nextval CACHE 1000", "`nextval()`, CACHE 1000"), ("gen_random_uuid()", "`gen_random_uuid()`"),
               ("uuidv7()", "`uuidv7()`"), ("clock_timestamp()", "`clock_timestamp()`")]


def per_call_block(runs):
    rows = [[label] + [signal_text(get(r, "calls", key)) for r in runs.values()] for key, label in FUNC_LABELS]
    rows.append(["floor: `count(*)`, ns per row"] + [spread(get(r, "calls", "count(*)"), ".1f") for r in runs.values()])
    return table(majors_header(runs, "ns per call, median (min–max)"), rows)


def instructions_block(runs):
    rows = [[label] + [num(get(r, "instructions", "per_call", key), ".0f") for r in runs.values()]
            for key, label in FUNC_LABELS]
    return table(majors_header(runs, "instructions per call"), rows)


def fraction(r, key):
    sf, other = get(r, "calls", "snowflake_nextval()"), get(r, "calls", key)
    t = (f"{sf['median'] / other['median']:.2f}" if sf and other and sf["resolved"] and other["resolved"]
         else "—" if other is None else "noise")
    a, b = get(r, "instructions", "per_call", "snowflake_nextval()"), get(r, "instructions", "per_call", key)
    i = f"{a / b:.2f}" if a is not None and b else "—"
    return f"{t} / {i}"


def fractions_block(runs):
    rows = [[label] + [fraction(r, key) for r in runs.values()] for key, label in FUNC_LABELS[1:]]
    return table(majors_header(runs, "`snowflake_nextval()` as a fraction of (time / instructions)"), rows)


BREAKDOWN = [("snowflake_nextval_wrapper", "the V1 function, with what the compiler inlined into it"),
             ("State::next", "the generator policy, where not inlined"),
             ("LWLockAcquire", "PostgreSQL's LWLock, acquire"), ("LWLockRelease", "PostgreSQL's LWLock, release"),
             ("clock_gettime", "the clock read (libc; the vDSO part is not counted)")]


def breakdown_block(runs):
    rows = []
    for key, what in BREAKDOWN:
        cells = [num(get(r, "instructions", "breakdown", key), ".0f") for r in runs.values()]
        if any(c != "—" for c in cells):
            rows.append([f"`{key}`: {what}"] + cells)
    return table(majors_header(runs, "self instructions per call"), rows)


def concurrency_block(runs):
    rows = []
    for key, label in (("snowflake_nextval()", "`snowflake_nextval()`"), ("nextval CACHE 1", "`nextval()`, CACHE 1")):
        for b in (1, 2):
            rows.append([f"{label}, {b} backend{'s' if b > 1 else ''}: ns per call and backend"] +
                        [signal_text(get(r, "concurrency", f"{key}|{b}", "per_call")) for r in runs.values()])
        for b in (1, 2):
            cells = []
            for r in runs.values():
                c = get(r, "concurrency", f"{key}|{b}", "calls_per_s")
                cells.append("—" if c is None else
                             f"{c['median'] / 1e6:.2f} ({c['min'] / 1e6:.2f}–{c['max'] / 1e6:.2f})")
            rows.append([f"{label}, {b} backend{'s' if b > 1 else ''}: million calls per second, all backends"] + cells)
    return table(majors_header(runs, "median (min–max) over the rounds"), rows)


def pgbench_block(runs):
    rows = []
    for sync in ("off", "on"):
        for kind, label in (("snowflake", "snowflake"), ("identity", "identity"), ("uuid", "UUID v4"),
                            ("uuidv7", "UUIDv7")):
            row = [f"{label}, `synchronous_commit = {sync}`"]
            for r in runs.values():
                cells = [c for c in get(r, "pgbench", "cells") or [] if c["sync"] == sync and kind in c]
                row.append(median_span([c[kind] / c["bigserial"] for c in cells if c["bigserial"] > 0]))
            rows.append(row)
    return table(majors_header(runs, "TPS as a fraction of bigserial's: median (min–max) over the client counts"), rows)


def sizes_block(runs):
    rows = []
    for kind, label in (("snowflake", "snowflake"), ("bigserial", "bigserial"), ("identity", "identity"),
                        ("uuid", "UUID v4"), ("uuidv7", "UUIDv7")):
        rows.append([label] + [("—" if get(r, "sizes", kind) is None else
                                f"{r['sizes'][kind]['table_mib']:.1f} / {r['sizes'][kind]['index_mib']:.1f}")
                               for r in runs.values()])
    return table(majors_header(runs, "after 1,000,000 rows: table / primary-key index, MiB"), rows)


SCALE_KINDS = [("snowflake", "snowflake"), ("bigserial", "bigserial"), ("uuid", "UUID v4"), ("uuidv7", "UUIDv7")]


def scale_block(runs, profile):
    rows = []
    for kind, label in SCALE_KINDS:
        for m, r in runs.items():
            points = get(r, "scale", profile, kind)
            if not points:
                continue
            p = points[-1]
            rows.append([label, m, f"{p['rows']:,}", f"{p['rows_per_s']:,.0f}", f"{p['wal_per_row']:.0f}",
                         f"{p['fpi_per_1000']:.1f}",
                         f"{sum(q['checkpoints_timed'] for q in points)} + "
                         f"{sum(q['checkpoints_requested'] for q in points)}",
                         f"{p['index_mib']:.1f} MiB", f"{p['hit_ratio']:.3f}"])
    return table(["key", "major", "rows", "rows/s", "WAL bytes/row", "FPI per 1000 rows",
                  "checkpoints, timed + requested", "PK index", "hit ratio"], rows, ["---", "---"] + ["---:"] * 7)


def scale_ratios_block(runs):
    rows = []
    for profile in ("defaults", "busy"):
        for kind, label in (("uuid", "UUID v4"), ("uuidv7", "UUIDv7")):
            for metric, what in (("wal_per_row", "WAL bytes per row"), ("rows_per_s", "rows per second")):
                cells = [num(get(r, "scale_compare", profile, kind, metric), ".2f") for r in runs.values()]
                if any(c != "—" for c in cells):
                    rows.append([f"{profile}: snowflake's {what} over {label}'s"] + cells)
    return table(majors_header(runs, f"over the steps where the other key's index exceeds shared_buffers"), rows)


def citus_block(runs):
    citus = {m: r["citus"] for m, r in runs.items() if r.get("citus")}
    if not citus:
        return "No run had Citus.\n"
    header, keys = ["route"], []
    for m, c in citus.items():
        for kind in ("snowflake", "bigserial", "uuidv7"):
            if f"coordinator|{kind}" in c:
                header.append(f"{m}: {kind}")
                keys.append((m, kind))
    rows = []
    for route in ("coordinator", "every node"):
        row = [f"through {'the coordinator' if route == 'coordinator' else 'every node'}"]
        for m, kind in keys:
            v, base = citus[m][f"{route}|{kind}"], citus[m][f"{route}|bigserial"]
            row.append(f"{v:.0f}" if kind == "bigserial" or not base else f"{v:.0f} ({v / base:.2f})")
        rows.append(row)
    return table(header, rows)


def horizon_block(runs):
    rows = []
    for k, label in (("on", "on"), ("off", "off"), ("seq", "sequence (`nextval('s')`, `bigserial`)")):
        rows.append([f"{label}: ns per call"] + [signal_text(get(r, "horizon", "ns", k)) for r in runs.values()])
        rows.append([f"{label}: INSERT transactions per second"] + [spread(get(r, "horizon", "tps", k), ".0f")
                                                                   for r in runs.values()])
        rows.append([f"{label}: instructions per call"] + [num(get(r, "horizon", "instructions", k), ".0f")
                                                           for r in runs.values()])
    rows.append(["`snowflake_horizon()`, µs per call"] + [num(get(r, "horizon", "horizon_us"), ".2f")
                                                        for r in runs.values()])
    return table(majors_header(runs, "track_horizon, median (min–max)"), rows)


GUARD_LABELS = [("none", "no trigger"), ("guard", "`snowflake_guard('id')`"),
                ("always", "`snowflake_guard('id', 'always')`"), ("plpgsql", "a PL/pgSQL trigger that returns NEW"),
                ("bigserial", "`bigserial`, no trigger"), ("identity", "identity (`GENERATED ALWAYS`), no trigger")]


def guard_block(runs):
    rows = []
    for key, label in GUARD_LABELS:
        cells = []
        for r in runs.values():
            n, t = get(r, "guard", "ns", key), get(r, "guard", "ratio", key)
            cells.append("—" if n is None else f"{spread(n, '.0f')} ({t:.2f})")
        rows.append([f"{label}: ns per row (time ratio)"] + cells)
        cells = []
        for r in runs.values():
            i, base = get(r, "guard", "instructions", key), get(r, "guard", "instructions", "none")
            cells.append("—" if i is None else f"{i:.0f} ({i / base:.2f})")
        rows.append([f"{label}: instructions per row (ratio)"] + cells)
    return table(majors_header(runs, "INSERT ... SELECT, median (min–max)"), rows)


def blocks(runs):
    return {
        "runs": runs_block(runs), "verdicts": verdicts_block(runs), "per-call": per_call_block(runs),
        "instructions": instructions_block(runs), "fractions": fractions_block(runs),
        "breakdown": breakdown_block(runs), "concurrency": concurrency_block(runs), "pgbench": pgbench_block(runs),
        "sizes": sizes_block(runs), "scale-defaults": scale_block(runs, "defaults"),
        "scale-busy": scale_block(runs, "busy"), "scale-ratios": scale_ratios_block(runs),
        "citus": citus_block(runs), "horizon": horizon_block(runs), "guard": guard_block(runs),
    }


def render(text, rendered):
    seen = set()

    def one(m):
        name = m.group(2)
        if name not in rendered:
            raise SystemExit(f"render.py: bench/README.md has a block {name!r} that render.py does not know")
        seen.add(name)
        return m.group(1) + rendered[name] + m.group(4)
    out = BLOCK.sub(one, text)
    missing = set(rendered) - seen
    if missing:
        raise SystemExit(f"render.py: bench/README.md lacks the blocks {sorted(missing)}")
    return out


def main():
    runs = load()
    if not runs:
        raise SystemExit("render.py: no bench/results/pgNN.json")
    with open(PAGE) as f:
        text = f.read()
    new = render(text, blocks(runs))
    if "--check" in sys.argv[1:]:
        if new != text:
            import difflib
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                       "bench/README.md", "rendered from bench/results"))
            print("render.py: bench/README.md differs from bench/results: run python3 bench/render.py")
            return 1
        return 0
    if new != text:
        with open(PAGE, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
