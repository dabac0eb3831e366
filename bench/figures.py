"""How a figure is written, in bench.py's result files and in the tables bench/render.py renders
from them: one wording for both."""


def signal_text(s, digits=1):
    """A per-call figure (bench.py's `signal`): median (min–max), or, when it does not stand out
    of the floor's spread, that spread instead of a number."""
    if s is None:
        return "—"
    if not s["resolved"]:
        return f"within the floor's spread (±{s['floor_spread']:.{digits}f})"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def threshold_text(v):
    """A hypothesis's threshold, from its verdict: `<= 1`, `>= 2`, `0.9 to 1.1`."""
    return (f"{v['threshold'][0]:g} to {v['threshold'][1]:g}" if v["how"] == "within"
            else f"{v['how']} {v['threshold']:.3g}")
