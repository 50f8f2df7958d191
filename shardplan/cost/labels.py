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
"""
from __future__ import annotations

import numpy as np
import pandas as pd

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
