"""How repeatable the cost-data labels are: a cost-data file against its re-timing.

``shardplan collect retime SRC --out NEW`` times every shard set of SRC again
(same sets, same ids); this script pairs the two files row by row and reports
how far apart the labels are: fwd+bwd ms, raw and divided by each timing's
machine slowdown (the training labels), as the mean and median relative
difference, with each file's slowdown and the retimer's attempts. Pass
several NEW files to compare them with each other too. ``--window-s W ...``
adds the labels divided by the median slowdown of the timings within W/2 s
(``shardplan.cost.labels``; a profile's ``slowdown_window_s``), one row per
window, and ``--split-ms MS`` the sets labelled under MS and the rest apart.
Prints a table and writes ``<out>.md``.

    .venv/bin/python bench/label_repeatability.py OLD.parquet NEW.parquet --out data/profiles/cpu-2c/label-repeatability
"""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from shardplan.argtypes import at_least
from shardplan.cost.kernel import slowdown
from shardplan.cost.labels import label_slowdowns
from shardplan.cost.profiles import get_profile, reference_ms
from shardplan.errors import exit_status
from shardplan.formats import write_text_atomic


def _with_labels(df: pd.DataFrame, nominal: float, windows: list[float]) -> pd.DataFrame:
    """``df`` with ``raw`` and a ``label@W`` column per window (``label@0``: each timing's own slowdown),
    divided over the whole file before any rows are paired off (as training divides it)."""
    raw = (df["fwd_ms"] + df["bwd_ms"]).to_numpy()
    return df.assign(raw=raw, **{f"label@{w:g}": raw / label_slowdowns(df, nominal, w or None)
                                 for w in [0.0, *windows]})


def _rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| over their mean: symmetric, so neither file is taken as the truth."""
    return np.abs(a - b) / (0.5 * (a + b))


def _level_out(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(b / a) less its median: each set's change between two timings, with the level the host moved by
    in between (one shift for all) taken out."""
    r = np.log(b / a)
    return r - np.median(r)


def _spread(a: np.ndarray, b: np.ndarray) -> float:
    """The median of :func:`_level_out`'s distances: the noise between two timings of each set."""
    return float(np.median(np.abs(_level_out(a, b))))


def _beyond(a: np.ndarray, b: np.ndarray, tol: float) -> float:
    """The share of sets whose two timings differ by more than ``tol`` once the level is taken out."""
    return float((np.abs(np.expm1(_level_out(a, b))) > tol).mean())


def compare(files: list[Path], nominal: float, windows: list[float], split_ms: float | None = None
            ) -> tuple[list[dict], int]:
    frames = []
    for f in files:
        df = pd.read_parquet(f)
        if "src_row" not in df:  # the original file: its row numbers are what the re-timings point at
            df = df.assign(src_row=df.index)
        df = _with_labels(df[df["source"] != "plan-rank-infeasible"], nominal, windows)
        frames.append(df.set_index("src_row"))
    common = frames[0].index
    for df in frames[1:]:
        common = common.intersection(df.index)
    frames = [df.loc[common] for df in frames]
    # parts by the first file's label: short ranks are the noisy ones on the nested guest
    first = frames[0]["label@0"].to_numpy()
    parts = {"all": np.ones(len(first), bool)}
    if split_ms is not None:
        parts |= {f"labelled under {split_ms:g} ms": first < split_ms, f"{split_ms:g} ms or more": first >= split_ms}
    rows = []
    for ((fa, a_all), (fb, b_all)), (part, keep) in itertools.product(
            itertools.combinations(zip(files, frames), 2), parts.items()):
        if not keep.any():
            continue
        a, b = a_all[keep], b_all[keep]
        raw_a, raw_b = a["raw"].to_numpy(), b["raw"].to_numpy()
        r_raw = _rel(raw_a, raw_b)
        for w in [0.0, *windows]:
            lab_a, lab_b = a[f"label@{w:g}"].to_numpy(), b[f"label@{w:g}"].to_numpy()
            r_lab = _rel(lab_a, lab_b)
            rows.append({"pair": f"{fa} vs {fb}", **({"part": part} if split_ms is not None else {}),
                         "sets": int(keep.sum()),
                         "divided by": f"the median within {w / 2:g} s" if w else "its own references",
                         "labels: mean diff": f"{r_lab.mean() * 100:.1f}%",
                         "labels: median diff": f"{np.median(r_lab) * 100:.1f}%",
                         "labels: within 10%": f"{(r_lab <= 0.10).mean() * 100:.0f}%",
                         "labels: beyond 15%, shift out": f"{_beyond(lab_a, lab_b, 0.15) * 100:.0f}%",
                         "labels: median second / first": f"{np.median(lab_b / lab_a):.3f}",  # a shift, not noise
                         "labels: median diff, shift out": f"{_spread(lab_a, lab_b) * 100:.1f}%",
                         "raw: mean diff": f"{r_raw.mean() * 100:.1f}%",
                         "raw: median diff, shift out": f"{_spread(raw_a, raw_b) * 100:.1f}%"})
    return rows, len(common)


def describe(files: list[Path], nominal: float) -> list[dict]:
    out = []
    for f in files:
        df = pd.read_parquet(f)
        df = df[df["source"] != "plan-rank-infeasible"]
        s = slowdown(df["ref_before_ms"].to_numpy(), df["ref_after_ms"].to_numpy(), nominal)
        out.append({"file": str(f), "rows": len(df), "dates": f"{df['date'].min()} .. {df['date'].max()}",
                    "slowdown median": f"{np.median(s):.2f}", "slowdown p90": f"{np.percentile(s, 90):.2f}",
                    "retried": (f"{(df['attempts'] > 1).mean() * 100:.1f}%" if "attempts" in df else "(no gate)")})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="the original cost-data file first, then its re-timings")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--window-s", type=at_least(1, float), nargs="*", default=[],
                    help="also divide by the median slowdown over windows of these many seconds")
    ap.add_argument("--split-ms", type=at_least(0, float), metavar="MS",
                    help="also report the sets the first file labels under MS and those at MS or more apart")
    ap.add_argument("--out", required=True, help="report path without suffix")
    args = ap.parse_args()
    if len(args.files) < 2:
        ap.error("give a cost-data file and at least one re-timing of it")
    nominal = reference_ms(get_profile(args.profile))
    if nominal is None:
        ap.error(f"profile {args.profile} has no reference.json (run shardplan train first)")
    pairs, n = compare(args.files, nominal, args.window_s, args.split_ms)
    files = describe(args.files, nominal)
    md = "\n".join([
        f"# Label repeatability: {args.files[0].name}", "",
        f"Date {dt.date.today().isoformat()}. The same {n} shard sets (same ids) timed more than once on real "
        "FBGEMM kernels; 'labels' are fwd+bwd ms divided by the machine's slowdown during each timing "
        f"(reference workload before/after over the quiet reference, {nominal:.4f} ms), as training uses them. "
        "A difference is |a - b| over their mean.",
        f"Command: `{' '.join(shlex.quote(a) for a in ['.venv/bin/python', *sys.argv])}`", "",
        "## Files", "", tabulate(files, headers="keys", tablefmt="github"), "",
        "## Pairs", "", tabulate(pairs, headers="keys", tablefmt="github"), ""])
    print(md)
    write_text_atomic(Path(args.out).with_suffix(".md"), md)


if __name__ == "__main__":
    sys.exit(exit_status(main))
