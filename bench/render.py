#!/usr/bin/env python3
"""Renders docs/performance.md's tables from bench/results/pgNN.json (written by bench.py).

Each table sits between `<!-- rendered: NAME -->` and `<!-- end rendered -->` in the page; the
words around them are written by hand and quote no figure. `render.py` rewrites the tables in
place; `render.py --check` changes nothing and exits 1 when the page differs from what the results
give (tests/docs.rs runs it, so a figure in the docs cannot drift from the results).
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(HERE, "..", "docs", "performance.md")
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


def sig(s, digits=1):
    """A per-call figure: median (min–max), or why there is none."""
    if not s["resolved"]:
        return f"noise (±{s['floor_spread']:.{digits}f})"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def span(values, fmt=".2f"):
    values = sorted(values)
    mid = values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
    return f"{mid:{fmt}} ({values[0]:{fmt}}–{values[-1]:{fmt}})"


def majors_header(runs, first):
    return [first] + [str(m) for m in runs]


def runs_block(runs):
    lines = "".join(f"- {m}: `bench/results/pg{m}.md` ({r['date']}, commit `{r['commit']}`)\n" for m, r in runs.items())
    params = {json.dumps(r["parameters"], sort_keys=True) for r in runs.values()}
    if len(params) == 1:
        p = next(iter(runs.values()))["parameters"]
        return lines + "\nParameters of every run: " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in p.items()) + ".\n"
    return lines + "".join(f"\nParameters of the {m} run: " + ", ".join(
        f"{k} = {json.dumps(v)}" for k, v in r["parameters"].items()) + ".\n" for m, r in runs.items())


def verdicts_block(runs):
    ids = []
    for r in runs.values():
        for v in r["verdicts"]:
            if v["id"] not in [i for i, _ in ids]:
                ids.append((v["id"], v["text"]))
    rows = []
    for hid, text in ids:
        row = [hid, text]
        for r in runs.values():
            v = next((v for v in r["verdicts"] if v["id"] == hid), None)
            if v is None or v["value"] is None:
                row.append("—")
            else:
                row.append(f"{v['verdict']} ({v['value']:.2f})")
        rows.append(row)
    first = next(iter(runs.values()))
    thresholds = {v["id"]: (f"{v['threshold'][0]:g} to {v['threshold'][1]:g}" if v["how"] == "within"
                            else f"{v['how']} {v['threshold']:.3g}") for v in first["verdicts"]}
    rows = [[r[0], r[1], thresholds.get(r[0], "")] + r[2:] for r in rows]
    return table(["", "hypothesis", "threshold"] + [str(m) for m in runs], rows,
                 ["---", "---", "---:"] + ["---"] * len(runs))


FUNC_LABELS = [("snowflake_nextval()", "`snowflake_nextval()`"), ("nextval CACHE 1", "`nextval()`, CACHE 1"),
               ("nextval CACHE 1000", "`nextval()`, CACHE 1000"), ("gen_random_uuid()", "`gen_random_uuid()`"),
               ("uuidv7()", "`uuidv7()`"), ("clock_timestamp()", "`clock_timestamp()`")]


def per_call_block(runs):
    rows = []
    for key, label in FUNC_LABELS:
        rows.append([label] + [sig(r["calls"][key]) if key in r["calls"] else "—" for r in runs.values()])
    rows.append(["floor: `count(*)` per row"] + [
        f"{r['calls']['count(*)']['median']:.1f} ({r['calls']['count(*)']['min']:.1f}–{r['calls']['count(*)']['max']:.1f})"
        for r in runs.values()])
    return table(majors_header(runs, "ns per call, median (min–max)"), rows)


def instructions_block(runs):
    rows = [[label] + [f"{r['instructions']['per_call'][key]:.0f}" if key in r["instructions"]["per_call"] else "—"
                       for r in runs.values()] for key, label in FUNC_LABELS]
    return table(majors_header(runs, "instructions per call"), rows)


def fractions_block(runs):
    rows = []
    for key, label in FUNC_LABELS[1:]:
        row = [label]
        for r in runs.values():
            c, ins = r["calls"], r["instructions"]["per_call"]
            if key not in c:
                row.append("—")
                continue
            t = f"{c['snowflake_nextval()']['median'] / c[key]['median']:.2f}" if c[key]["resolved"] else "noise"
            row.append(f"{t} / {ins['snowflake_nextval()'] / ins[key]:.2f}")
        rows.append(row)
    return table(majors_header(runs, "`snowflake_nextval()` as a fraction of (time / instructions)"), rows)


BREAKDOWN = [("snowflake_nextval_wrapper", "the V1 function with the generator policy inlined"),
             ("State::next", "the generator policy, where not inlined"),
             ("LWLockAcquire", "PostgreSQL's LWLock, acquire"), ("LWLockRelease", "PostgreSQL's LWLock, release"),
             ("clock_gettime", "the clock read (libc; the vDSO part is not counted)")]


def breakdown_block(runs):
    rows = []
    for key, what in BREAKDOWN:
        cells = [f"{r['instructions']['breakdown'][key]:.0f}" if key in r["instructions"]["breakdown"] else "—"
                 for r in runs.values()]
        if any(c != "—" for c in cells):
            rows.append([f"`{key}`: {what}"] + cells)
    return table(majors_header(runs, "self instructions per call"), rows)


def concurrency_block(runs):
    rows = []
    for key, label in (("snowflake_nextval()", "`snowflake_nextval()`"), ("nextval CACHE 1", "`nextval()`, CACHE 1")):
        for b in (1, 2):
            rows.append([f"{label}, {b} backend{'s' if b > 1 else ''}: ns per call and backend"] +
                        [sig(r["concurrency"][f"{key}|{b}"]["per_call"]) for r in runs.values()])
        for b in (1, 2):
            rows.append([f"{label}, {b} backend{'s' if b > 1 else ''}: million calls per second, all backends"] +
                        [f"{r['concurrency'][f'{key}|{b}']['calls_per_s']['median'] / 1e6:.1f} "
                         f"({r['concurrency'][f'{key}|{b}']['calls_per_s']['min'] / 1e6:.1f}–"
                         f"{r['concurrency'][f'{key}|{b}']['calls_per_s']['max'] / 1e6:.1f})" for r in runs.values()])
    return table(majors_header(runs, "median (min–max) over the rounds"), rows)


def pgbench_block(runs):
    rows = []
    for kind, label in (("snowflake", "snowflake"), ("identity", "identity"), ("uuid", "UUID v4"), ("uuidv7", "UUIDv7")):
        row = [label]
        for r in runs.values():
            cells = r["pgbench"]["cells"]
            row.append(span([c[kind] / c["bigserial"] for c in cells]) if kind in cells[0] else "—")
        rows.append(row)
    return table(majors_header(runs, "TPS as a fraction of bigserial's: median (min–max) over the cells"), rows)


SCALE_KINDS = [("snowflake", "snowflake"), ("bigserial", "bigserial"), ("uuid", "UUID v4"), ("uuidv7", "UUIDv7")]


def scale_block(runs, profile):
    rows = []
    for kind, label in SCALE_KINDS:
        for m, r in runs.items():
            series = r["scale"][profile]
            if kind not in series:
                continue
            p = series[kind][-1]
            rows.append([label, m, f"{p['rows']:,}", f"{p['rows_per_s']:,.0f}", f"{p['wal_per_row']:.0f}",
                         f"{p['fpi_per_1000']:.1f}", sum(q["checkpoints"] for q in series[kind]),
                         f"{p['index_mib']:.1f} MiB", f"{p['hit_ratio']:.3f}"])
    return table(["key", "major", "rows", "rows/s", "WAL bytes/row", "FPI per 1000 rows", "checkpoints", "PK index",
                  "hit ratio"], rows, ["---", "---"] + ["---:"] * 7)


def scale_ratios_block(runs):
    rows = []
    for profile in ("defaults", "busy"):
        for metric, label in (("rows_per_s", "rows per second"), ("wal_per_row", "WAL bytes per row")):
            row = [f"{profile}: snowflake's {label} over UUID v4's"]
            for r in runs.values():
                s = r["scale"][profile]
                row.append(f"{s['snowflake'][-1][metric] / s['uuid'][-1][metric]:.2f}")
            rows.append(row)
    return table(majors_header(runs, "final step"), rows)


def citus_block(runs):
    citus = {m: r["citus"] for m, r in runs.items() if r.get("citus")}
    if not citus:
        return "No run had Citus.\n"
    header = ["route"]
    keys = []
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
            row.append(f"{v:.0f}" if kind == "bigserial" else f"{v:.0f} ({v / base:.2f})")
        rows.append(row)
    return table(header, rows)


def horizon_block(runs):
    def three(v, fmt):
        return " / ".join(f"{v[k]['median']:{fmt}}" for k in ("on", "off", "seq"))
    rows = [["`snowflake_nextval()`, instructions per call"] +
            [" / ".join(f"{r['horizon']['instructions'][k]:.0f}" for k in ("on", "off", "seq")) for r in runs.values()],
            ["`snowflake_nextval()`, ns per call (median)"] + [three(r["horizon"]["ns"], ".1f") for r in runs.values()],
            ["INSERT transactions per second (median; 1 client, `synchronous_commit = off`)"] +
            [three(r["horizon"]["tps"], ".0f") for r in runs.values()],
            ["`snowflake_horizon()`, µs per call"] + [f"{r['horizon']['horizon_us']:.1f}" for r in runs.values()]]
    return table(majors_header(runs, "on / off / sequence"), rows)


def blocks(runs):
    return {
        "runs": runs_block(runs), "verdicts": verdicts_block(runs), "per-call": per_call_block(runs),
        "instructions": instructions_block(runs), "fractions": fractions_block(runs),
        "breakdown": breakdown_block(runs), "concurrency": concurrency_block(runs), "pgbench": pgbench_block(runs),
        "scale-defaults": scale_block(runs, "defaults"), "scale-busy": scale_block(runs, "busy"),
        "scale-ratios": scale_ratios_block(runs), "citus": citus_block(runs), "horizon": horizon_block(runs),
    }


def render(text, rendered):
    seen = set()

    def one(m):
        name = m.group(2)
        if name not in rendered:
            raise SystemExit(f"render.py: docs/performance.md has a block {name!r} that render.py does not know")
        seen.add(name)
        return m.group(1) + rendered[name] + m.group(4)
    out = BLOCK.sub(one, text)
    missing = set(rendered) - seen
    if missing:
        raise SystemExit(f"render.py: docs/performance.md lacks the blocks {sorted(missing)}")
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
                                                       "docs/performance.md", "rendered from bench/results"))
            print("render.py: docs/performance.md differs from bench/results: run python3 bench/render.py")
            return 1
        return 0
    if new != text:
        with open(PAGE, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
