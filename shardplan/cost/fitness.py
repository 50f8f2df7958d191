"""Is the machine fit to measure plans? Re-time stored ranks and compare with their labels.

Every measurement is divided by the slowdown of a small reference workload,
and on this shared VM that reference does not always slow like real ranks do:
``bench/drift_probe.py`` caught TorchRec's ranks of ``unseen-a-10`` dividing to
1.3x their quiet-machine time while the reference read 1.1x, and an hour later
to 0.55x while it read 4-5x. Whether the machine is in the state its cost
data was labelled in is best asked of the labels themselves: a few whole ranks
of real plans from the profile's ``compute-ranks.parquet`` (timed when the
reference read within ``kernel.QUIET_TOLERANCE`` of quiet) are timed again,
divided as a plan measurement is (by the median of all the probe's reference
readings), and compared with the stored ones. Two
quiet timings of the same set differ by a median 3.2%
(``data/profiles/cpu-2c/label-repeatability.md``), so a median ratio within
:data:`LABEL_TOLERANCE` of 1 says the machine reproduces its labels, dividing
included; the reference itself need only stay within the plan measurements'
``MEASURE_SLOW_LIMIT`` (on 2026-11-21 evening the labels came back within
1.10x with the reference at 1.5-1.9x, and 1.29x with it at 1.29x).

A busy neighbour does not slow every rank alike, though. On 2026-11-22, with
the reference at 3.9x quiet, stored ranks of 1.5-5 ms re-timed (divided alike)
at 0.66x their labels, 4-12 ms ones at 0.53x and 20-45 ms ones at 0.38x: the
short ranks, whose data sit in the shared cache on a quiet host, lose the most.
Nor is it only a matter of level: at 10:10 UTC that day, with the reference at
1.1-1.3x, every probe still found the long ranks at 0.71-0.83x the short ones'
ratio. Such a machine measures a plan's small ranks too slow against its big ones,
whatever the level. So the probe also re-times a few long stored ranks, and
its ``tilt`` (their ratio over the short ones') must be within
:data:`TILT_TOLERANCE` of 1 too.

``shardplan bench --wait-fit MINUTES`` probes before every task and waits for
a fit machine; every results file records the probe.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..errors import MachineUnfitError
from .collect import row_id_seed  # the collector's id-seed rule, so the ids match the label's
from .kernel import MEASURE_SLOW_LIMIT, QUIET_TOLERANCE, disturbed, time_specs_bracketed
from .labels import label_slowdowns
from .profiles import Profile, reference_ms
from .specs import ShardSpec, specs_from_json

PROBE_RANKS = 6  # 3-7 s on cpu-2c: cheap enough to run before every bench task
PROBE_LABEL_MS = (4.0, 12.0)  # ranks of the size the benches measure, not dominated by fixed overheads
LABEL_TOLERANCE = 1.10  # median divided re-timing over label must lie within [1/1.10, 1.10]
TILT_RANKS = 3  # long ranks, against which the short ones' slowdown is compared
TILT_LABEL_MS = (20.0, 45.0)
TILT_TOLERANCE = 1.10  # long ranks' median ratio over the short ones' must lie within [1/1.10, 1.10]
POLL_S = 30.0  # between probes while waiting
LATENCY_BOUND_SHARE = 0.1  # the top decile of lookups per ms counts as memory-latency bound


@dataclass(frozen=True)
class Fitness:
    """One probe: ``label_ratio`` is the median of re-timed (divided) over stored fwd+bwd ms;
    ``reference_slowdown`` the median reference slowdown around the re-timings; ``tilt`` the long
    ranks' median ratio over the short ones' (``None``: not probed, as in results written before)."""

    label_ratio: float
    reference_slowdown: float
    tilt: float | None = None

    @property
    def fit(self) -> bool:
        # The labels decide. The reference only has to stay where plan measurements accept it
        # (a steady slowdown up to MEASURE_SLOW_LIMIT divides out; the probe checks that it does).
        return (1 / LABEL_TOLERANCE <= self.label_ratio <= LABEL_TOLERANCE
                and (self.tilt is None or 1 / TILT_TOLERANCE <= self.tilt <= TILT_TOLERANCE)
                and self.reference_slowdown <= MEASURE_SLOW_LIMIT)

    @staticmethod
    def column_names(prefix: str = "fit_") -> tuple[str, str, str]:
        """The results-file columns :meth:`columns` writes: label ratio, reference slowdown, tilt."""
        return f"{prefix}label_ratio", f"{prefix}reference", f"{prefix}tilt"

    def columns(self, prefix: str = "fit_") -> dict[str, float]:
        """The probe as results-file columns (``fit_*``; another ``prefix`` for a probe taken after a task)."""
        return dict(zip(self.column_names(prefix),
                        (self.label_ratio, self.reference_slowdown, float("nan") if self.tilt is None else self.tilt)))

    @classmethod
    def from_columns(cls, row: Any, prefix: str = "fit_") -> "Fitness":
        """The probe that :meth:`columns` wrote with ``prefix``."""
        ratio, reference, tilt_name = cls.column_names(prefix)
        tilt = getattr(row, tilt_name, None)
        return cls(getattr(row, ratio), getattr(row, reference), None if tilt is None or tilt != tilt else tilt)

    def describe(self) -> str:
        tilt = f", long ranks at {self.tilt:.2f}x the short ones' ratio" if self.tilt is not None else ""
        return (f"stored ranks re-timed at {self.label_ratio:.2f}x their labels{tilt}, reference "
                f"{self.reference_slowdown:.2f}x quiet ({'fit' if self.fit else 'unfit'} to measure)")


@dataclass(frozen=True)
class StoredRank:
    """A stored plan rank with its quiet-host label, ready to be timed again with the ids it was timed with."""

    specs: tuple[ShardSpec, ...]
    optimizer: str
    dtype: str
    id_seed: int
    label_ms: float  # stored fwd+bwd, divided as training divides it (labels.py)


def labelled_ranks(profile: Profile, passed_only: bool = True) -> pd.DataFrame:
    """The profile's stored plan ranks that passed the quiet gate, with ``label`` (fwd+bwd ms over
    the slowdown training divides them by: :func:`.labels.label_slowdowns`); empty where the profile has
    none or no quiet reference. ``passed_only=False`` keeps those taken under the gate that did not pass it
    (the pool as it was before 2026-11-29, for ``bench/rank_drift.py --ungated-too``).

    Passed, not only taken under it: a rank still :func:`.kernel.disturbed` after the collector's last
    retry is stored with its least disturbed timing, and its label then leans on a divisor the
    reference over-states (module docstring). On ``cpu-2c-nested`` 90 of 1,311 such ranks, all timed in
    one disturbed spell, lie under the model by a median 5% where the reference read up to 1.35x quiet,
    12% at 1.35-1.7x and 42% beyond; as calibration neighbours they pulled TorchRec's ``unseen-d-23``
    rank 2 and ``unseen-d-14`` rank 1 8% and 6% low, timed beside both sets in the same turns
    (docs/cost-model.md, session 66).
    """
    path = profile.dir / "compute-ranks.parquet"
    quiet = reference_ms(profile)
    if not path.exists() or not quiet:
        return pd.DataFrame()
    df = pd.read_parquet(path)
    df["label"] = (df.fwd_ms + df.bwd_ms) / label_slowdowns(df, quiet, profile.slowdown_window_s)  # as trained
    df = df[df.source == "plan-rank"].copy()
    df = df[taken_under_quiet_gate(df)]
    return df[passed_quiet_gate(df, quiet)] if passed_only else df


def taken_under_quiet_gate(df: pd.DataFrame) -> np.ndarray:
    """Which stored rows the collector timed under the quiet gate (``slow_limit`` at most
    ``QUIET_TOLERANCE``, or unrecorded), not under the fitness probe's looser limit."""
    if "slow_limit" not in df:
        return np.ones(len(df), dtype=bool)
    return (df.slow_limit.isna() | (df.slow_limit <= QUIET_TOLERANCE)).to_numpy()


def passed_quiet_gate(df: pd.DataFrame, quiet_ms: float) -> np.ndarray:
    """Which stored rows' reference readings, before and after, pass the quiet gate over ``quiet_ms``
    (:func:`.kernel.disturbed` is false): a row that did not was kept after the collector's last retry."""
    readings = zip(df.ref_before_ms, df.ref_after_ms)
    return np.array([not disturbed(before, after, quiet_ms) for before, after in readings], dtype=bool)


def as_stored_ranks(pick: pd.DataFrame) -> tuple[StoredRank, ...]:
    """Rows of :func:`labelled_ranks` as :class:`StoredRank` s."""
    return tuple(StoredRank(tuple(specs_from_json(r["shards"])), str(r["optimizer"]), str(r["dtype"]),
                            row_id_seed(r), float(r["label"])) for _, r in pick.iterrows())


@lru_cache(maxsize=4)
def probe_ranks(profile: Profile, n: int = PROBE_RANKS, seed: int = 0) -> tuple[StoredRank, ...]:
    """A fixed, seeded choice of ``n`` stored plan ranks (empty if the profile has none): half from the
    most memory-latency-bound decile, half from the rest."""
    df = labelled_ranks(profile)
    if df.empty:
        return ()
    lo, hi = PROBE_LABEL_MS
    pool = df[(df.label >= lo) & (df.label <= hi)].copy()
    # Half the probe from the ranks doing the most lookups per ms (small dims, many rows, low skew:
    # bound by memory latency), which a busy neighbour slows the most (unseen-a-10's ranks ran 1.3-1.5x
    # their quiet time while typical ranks reproduced their labels), half from the rest.
    pool["intensity"] = [lookups(specs_from_json(s)) for s in pool["shards"]] / pool["label"]
    heavy = pool.intensity >= pool.intensity.quantile(1 - LATENCY_BOUND_SHARE)
    k = min(n // 2, int(heavy.sum()))
    return as_stored_ranks(pd.concat([pool[heavy].sample(k, random_state=seed),
                                      pool[~heavy].sample(min(n - k, int((~heavy).sum())), random_state=seed)]))


@lru_cache(maxsize=4)
def tilt_ranks(profile: Profile, n: int = TILT_RANKS, seed: int = 0) -> tuple[StoredRank, ...]:
    """A fixed, seeded choice of ``n`` long stored plan ranks (labels in :data:`TILT_LABEL_MS`)."""
    df = labelled_ranks(profile)
    if df.empty:
        return ()
    lo, hi = TILT_LABEL_MS
    pool = df[(df.label >= lo) & (df.label <= hi)]
    return as_stored_ranks(pool.sample(min(n, len(pool)), random_state=seed))


def lookups(specs: list[ShardSpec]) -> float:
    """Ids a rank looks up per batch (each row-wise shard its share of the table's rows)."""
    return sum(s.batch_size * s.pooling_factor * s.rows / s.table_rows for s in specs)


def probe(profile: Profile) -> Fitness | None:
    """Time the probe ranks now; ``None`` where the profile has no stored ranks or quiet reference."""
    ranks, long_ranks, quiet = probe_ranks(profile), tilt_ranks(profile), reference_ms(profile)
    if not ranks or not quiet:
        return None
    profile.use_threads()
    readings: list[float] = []

    def retimed(r: StoredRank) -> float:  # raw re-timing over label
        b = time_specs_bracketed(list(r.specs), r.optimizer, r.dtype, profile.device, r.id_seed,
                                 profile.warmup, profile.repeats)  # one attempt: the probe must see disturbance
        readings.extend([b.ref_before_ms, b.ref_after_ms])
        return (b.timing.fwd_ms + b.timing.bwd_ms) / r.label_ms

    # The median ratio in log space (with 6, the geometric mean of the middle two): symmetric in
    # fast and slow.
    middle = lambda xs: float(np.exp(statistics.median(np.log(xs))))  # noqa: E731
    short = middle([retimed(r) for r in ranks])
    tilt = middle([retimed(r) for r in long_ranks]) / short if long_ranks else None
    # Divided once, by the median of all readings, as plan measurements are (execute/measure.py: the
    # reference reads bursts the ranks do not share); the tilt is a ratio of ratios, free of it.
    factor = statistics.median(readings) / quiet
    return Fitness(short / factor, factor, tilt)


def wait_until_fit(profile: Profile, max_wait_s: float, poll_s: float = POLL_S, streak: int = 1,
                   carried: int = 0) -> Fitness | None:
    """Probe until ``streak`` probes in a row (``poll_s`` apart) find the machine fit, for up to ``max_wait_s``.
    ``carried`` fit probes were taken just before the call with nothing measured since (a task's probe after
    it): they start the row, so the first probe here may complete it.

    A streak above 1 waits for a spell rather than a blip: on 2026-11-29 the ``cpu-2c-nested`` guest passed
    single probes between unfit ones, and the tasks measured after such a pass were calibrated with the
    reference back at about 2x quiet, twice as far from the fit runs as those runs lie from each other
    (docs/cost-model.md, session 67). Returns the last probe (fit, or whatever it found when ``max_wait_s``
    is 0: the caller measures anyway and records it). Raises :class:`MachineUnfitError` when a positive wait
    runs out.
    """
    f = probe(profile)
    if f is None or max_wait_s <= 0:
        return f
    fits = carried + 1 if f.fit else 0  # fit probes in a row so far
    if fits >= streak:
        return f
    waited = 0.0  # time slept between probes (each probe adds a few seconds more)
    with tqdm(desc="waiting for a fit machine", unit="probe", leave=False) as bar:
        while fits < streak:
            tqdm.write(f"{time.strftime('%H:%M:%S')} {f.describe()}")  # the machine's history, in the log
            if waited + poll_s > max_wait_s:
                raise MachineUnfitError(
                    f"machine not fit to measure for {streak} probe(s) in a row after waiting "
                    f"{max_wait_s / 60:.0f} min: {f.describe()}; "
                    "run the same command again later (a bench resumes where it stopped)")
            time.sleep(poll_s)
            waited += poll_s
            f = probe(profile)
            fits = fits + 1 if f.fit else 0
            bar.update()
    tqdm.write(f"{time.strftime('%H:%M:%S')} {f.describe()}")
    return f
