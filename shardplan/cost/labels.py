"""How a CPU timing becomes a label: its ms over the host's slowdown while it ran.

Each stored timing carries the reference workload's time just before and just
after it (``ref_before_ms``, ``ref_after_ms``), and by default its label is its
ms over that pair's slowdown (:func:`~.kernel.slowdown`). That is right where
the reference and the kernels slow together. On the nested AMD guest
(``cpu-2c-nested``) the reference jitters on its own: timed back to back for a
minute it read 1.55-5.29 ms while the ranks beside it held within 2-7%. Each
label then carries two draws of the reference's jitter. On 2026-11-27, 491 of
that profile's stored plan ranks timed twice more (2.5 and 3 hours after their
labels; ``data/profiles/cpu-2c-nested/label-repeatability-ranks.md``) moved
from one timing to another by a median 4.3-4.8% as labelled, by 3.1-3.9%
undivided, and by 3.2-4.5% when each was divided by the median slowdown of
the timings within 7.5-15 s either side of it (the level the host moved by
between the two timings taken out in each case); 300 random sets, 6.4%
labelled, 4.9% undivided, 4.3-4.7% so divided (``label-repeatability-sets.md``).

So a profile may set ``slowdown_window_s``: each timing is then divided by the
median of the slowdowns of the timings of the same file taken within half that
window of it, either side. That keeps the drift the reference tracks (minutes)
and drops the jitter it adds (one timing). A timing without a date keeps its
own slowdown.

Unset for every committed profile: a model trained so on the nested guest's
data priced the same held-out ranks no better than the committed one (it
learns over thousands of labels, which averages their jitter out), and no
better TorchRec's unseen ranks (``docs/cost-model.md``, "`unseen-c` and
`unseen-d` on the nested guest").

A row timed more than once (``shardplan collect retime``) may instead be
labelled by the median of its timings (:func:`repeated_labels`, ``shardplan
train --retimes``). No committed model is: on the nested guest's short ranks
that hold a large wide table, one pass of re-timings took the held-out plan
ranks' error from 6.0% to 5.2% as a truth to score against, and a model
trained on them 0.1 points lower than one trained without (the same reason).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError
from .kernel import slowdown


def label_slowdowns(df: pd.DataFrame, nominal_ms: float, window_s: float | None = None) -> np.ndarray:
    """Each row's divisor, in the frame's order: its own references' slowdown over ``nominal_ms``, or with
    ``window_s`` the median of those of the rows dated within ``window_s / 2`` of it (module docstring)."""
    own = np.asarray(slowdown(df["ref_before_ms"].to_numpy(dtype=float), df["ref_after_ms"].to_numpy(dtype=float),
                              nominal_ms), dtype=float)
    if not window_s or "date" not in df or len(df) == 0:
        return own
    when = pd.to_datetime(df["date"], errors="coerce", utc=True).to_numpy()
    dated = np.flatnonzero(~pd.isna(when))
    if len(dated) == 0:
        return own
    order = dated[np.argsort(when[dated], kind="stable")]
    series = pd.Series(own[order], index=pd.DatetimeIndex(when[order]))
    smoothed = series.rolling(pd.Timedelta(seconds=window_s), center=True, min_periods=1).median().to_numpy()
    out = own.copy()
    out[order] = smoothed
    return out


# The columns a re-timing (collect.retime) keeps from the row it re-times, by which the two pair up.
RETIME_KEYS = ("seed", "sample", "source", "task", "searcher", "rank", "round")


def repeated_labels(df: pd.DataFrame, fwd: np.ndarray, bwd: np.ndarray, retimes: list[pd.DataFrame],
                    nominal_ms: float, window_s: float | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels of ``df``'s rows that were timed again (``shardplan collect retime``) as the median of all
    their timings; return fwd, bwd and each row's count of timings.

    ``fwd``/``bwd`` are ``df``'s own labels (already divided). Each frame of ``retimes`` is divided by its own
    slowdowns (:func:`label_slowdowns`) and then moved to ``df``'s level: a pass run hours later runs at a
    level the reference does not wholly follow, and the median ratio of its paired rows to their labels
    takes that out, so only the row-to-row jitter is averaged. Rows pair by the identifying columns a
    re-timing keeps (:data:`RETIME_KEYS`, those ``df`` has); a frame lacking one of them, or pairing with no
    row, is not ``df``'s and is left out. Why: on the nested guest two timings of the same short rank that
    holds a large 128-wide table differ by a median 8-11% (other ranks 4-5%), so its one label is a noisy
    draw (``docs/cost-model.md``, "Large wide tables on the nested guest").
    """
    keys = [k for k in RETIME_KEYS if k in df.columns]
    index = {key: i for i, key in enumerate(df[keys].itertuples(index=False, name=None))}
    if len(index) != len(df):
        raise InputError("retimes", f"the cost data's rows are not told apart by {keys}, so re-timings cannot "
                         "pair with them", "re-time a file whose rows those columns tell apart")
    logs_f = [[np.log(f)] if f > 0 else [] for f in fwd]
    logs_b = [[np.log(b)] if b > 0 else [] for b in bwd]
    for rt in retimes:
        if not set(keys) <= set(rt.columns):
            continue
        rt = rt[rt["fwd_ms"].notna() & (rt["fwd_ms"] > 0) & (rt["bwd_ms"] > 0)]
        rows = np.array([index.get(key, -1) for key in rt[keys].itertuples(index=False, name=None)], dtype=int)
        ok = rows >= 0
        if not ok.any():
            continue
        rows = rows[ok]
        div = label_slowdowns(rt, nominal_ms, window_s)[ok]
        rf, rb = rt["fwd_ms"].to_numpy(float)[ok] / div, rt["bwd_ms"].to_numpy(float)[ok] / div
        paired = (fwd[rows] > 0) & (bwd[rows] > 0)
        level = np.median(np.log((rf + rb)[paired] / (fwd + bwd)[rows][paired])) if paired.any() else 0.0
        for i, f, b in zip(rows, np.log(rf) - level, np.log(rb) - level):
            logs_f[i].append(f)
            logs_b[i].append(b)

    def median(logs: list[list[float]], own: np.ndarray) -> np.ndarray:  # a row timed once keeps its label exactly
        return np.array([np.exp(np.median(v)) if len(v) > 1 else o for v, o in zip(logs, own)])

    return median(logs_f, fwd), median(logs_b, bwd), np.array([len(v) for v in logs_f])
