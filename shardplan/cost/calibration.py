"""Measuring a rank on a disturbed host against labelled ranks like it.

Plan measurements divide by the slowdown of one small reference workload.
On this shared VM a busy neighbour does not slow every rank alike: short,
memory-latency-bound ranks lose the most, long ones the least
(:mod:`shardplan.cost.fitness`), so one divisor is wrong for most ranks. On
2026-11-22 (reference at 1.2-7x quiet), stored ranks re-timed and divided by
the reference came out 19-37% (mean) from their labels.

Neighbour calibration asks the cost labels instead. The profile's stored plan
ranks were timed on the quiet host (those of ``compute-ranks.parquet`` that
passed the quiet gate: :func:`.fitness.labelled_ranks`); for a rank to be
measured, the ``k`` stored ranks most like it in quiet-host
time, bytes held and bytes of rows touched a millisecond (:data:`FEATURES`)
are timed beside it, in turn, and the rank's raw time
is divided by their raw-over-label ratio (geometric mean). Its quiet-host time is not
known in advance, so it is first estimated by dividing by the reference, and
after the first pass by the neighbours' own factor; when that estimate moves
the neighbour set, the rank is timed again beside the new set (at most
``passes`` times). Neither the cost model nor the rank's prediction is
consulted: the figure is a measurement, expressed on the labels' host.

It costs ``(k + 1) x visits x passes`` timings a rank, so it is for accuracy
checks (``bench/plan_accuracy.py --calibrate``), not for benches.
``bench/neighbour_calibration.py`` checks the instrument itself on stored
ranks whose labels are known.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .features import touched_bytes
from .fitness import StoredRank, as_stored_ranks, labelled_ranks, lookups
from .kernel import RankOp, time_reference
from .profiles import Profile, available_memory_gb, reference_ms
from ..errors import InputError
from .specs import ShardSpec

NEIGHBOURS = 6  # a few more than 4 averages out single labels (each ~3% from a re-timing) and drift
VISITS = 3
PASSES = 2
LABEL_RANGE_MS = (1.0, 50.0)  # the stored ranks used as neighbours (outside it the pool is thin)
MEMORY_SHARE = 0.8  # of the memory available, what the neighbours held at once may take
# What neighbours can be chosen by, each a log: the quiet-host ms, the bytes of weights held, the lookups
# a millisecond (memory-latency bound: high) and the bytes of rows touched a millisecond (the rate at which
# the rank draws rows through the cache: on a host whose memory bandwidth a neighbour takes, high loses most).
POINT_NAMES = ("ms", "held", "lookups_per_ms", "touched_per_ms")
# The default since 2026-11-25: against known labels on the disturbed host, adding the touched rate cut the
# mean error on cache-heavy ranks (20 MB touched a batch or more) from 8.4% to 7.1% and its bias from +5.6% to
# +2.9%, on ranks of every size from 8.6% to 7.4% (each target calibrated both ways in turn;
# bench/results/neighbour-calibration-cpu-2c-xeon-{touched,all-touched}-s37.md).
FEATURES = ("ms", "held", "touched_per_ms")
EARLIER_FEATURES = ("ms", "held")  # the default before; results written then do not record their choice


@dataclass(frozen=True)
class LabelledPool:
    """The profile's stored plan ranks that passed the quiet gate, with the features neighbours are chosen by."""

    ranks: tuple[StoredRank, ...]
    tasks: tuple[str, ...]
    features: np.ndarray  # [n, len(POINT_NAMES)]: each rank's point (:func:`rank_point`) at its label
    scale: np.ndarray  # [len(POINT_NAMES)]: the pool's standard deviation of each (distances are in these units)


def weight_bytes(specs: list[ShardSpec]) -> float:
    return float(sum(s.rows * s.cols * 4 for s in specs))


def rank_point(specs: list[ShardSpec], quiet_ms: float) -> np.ndarray:
    """A rank's coordinates among its neighbours (:data:`POINT_NAMES`), given its quiet-host ms."""
    log_ms = np.log(quiet_ms)
    return np.array([log_ms, np.log(max(weight_bytes(specs), 1.0)), np.log(max(lookups(specs), 1.0)) - log_ms,
                     np.log(max(touched_bytes(specs), 1.0)) - log_ms])


@lru_cache(maxsize=4)
def labelled_pool(profile: Profile, passed_only: bool = True) -> LabelledPool:
    """The stored ranks neighbours are chosen from (``passed_only``: :func:`.fitness.labelled_ranks`)."""
    df = labelled_ranks(profile, passed_only)
    if df.empty:
        return LabelledPool((), (), np.zeros((0, len(POINT_NAMES))), np.ones(len(POINT_NAMES)))
    lo, hi = LABEL_RANGE_MS
    df = df[(df.label >= lo) & (df.label <= hi)].reset_index(drop=True)
    ranks = as_stored_ranks(df)  # parses each rank's shards once; the features read them from here
    feats = np.stack([rank_point(list(r.specs), r.label_ms) for r in ranks])
    return LabelledPool(ranks, tuple(df.task.astype(str)), feats, feats.std(axis=0) + 1e-9)


def nearest(pool: LabelledPool, quiet_ms: float, specs: list[ShardSpec], k: int = NEIGHBOURS,
            exclude_task: str | None = None, features: tuple[str, ...] = FEATURES) -> tuple[int, ...]:
    """Indices of ``k`` pooled ranks near the rank ``specs`` of that quiet-host time (standardised distance
    over the ``features`` of :data:`POINT_NAMES`), half of them shorter than it and half longer where the
    pool has them, leaving out the ranks of ``exclude_task`` (a rank never calibrates against its own task).

    Why both sides: the host's slowdown runs with rank length, so neighbours all on one side of the
    rank would carry a factor for a shorter (or longer) rank than it.
    """
    unknown = [f for f in features if f not in POINT_NAMES]
    if unknown or not features:
        raise InputError("features", f"{unknown or 'none'} not among {POINT_NAMES}", "name one or more of them")
    log_ms = np.log(quiet_ms)
    cols = [POINT_NAMES.index(f) for f in features]
    d = ((pool.features - rank_point(specs, quiet_ms)) / pool.scale)[:, cols]
    dist = np.sqrt((d ** 2).sum(axis=1))
    if exclude_task is not None:
        dist[np.array(pool.tasks) == exclude_task] = np.inf
    order = np.argsort(dist, kind="stable")
    order = order[np.isfinite(dist[order])]
    shorter = order[pool.features[order, 0] < log_ms]
    longer = order[pool.features[order, 0] >= log_ms]
    below = min(len(shorter), max(k // 2, k - len(longer)))
    picked = list(shorter[:below]) + list(longer[:k - below])
    return tuple(int(i) for i in sorted(picked, key=lambda i: dist[i]))


@dataclass(frozen=True)
class CalibratedTiming:
    """A rank's raw fwd/bwd ms, the reference's slowdown around it, and the neighbours' factor."""

    raw_fwd_ms: float
    raw_bwd_ms: float
    reference_slowdown: float
    factor: float  # geometric mean over the neighbours of raw / label (fwd+bwd)
    neighbours: tuple[int, ...]
    passes: int

    @property
    def fwd_ms(self) -> float:
        return self.raw_fwd_ms / self.factor

    @property
    def bwd_ms(self) -> float:
        return self.raw_bwd_ms / self.factor

    @property
    def reference_divided_ms(self) -> float:
        return (self.raw_fwd_ms + self.raw_bwd_ms) / self.reference_slowdown


def neighbour_factor(raw_ms: list[float], label_ms: list[float]) -> float:
    """How much slower than their labels the neighbours run now: the geometric mean of each one's raw
    time over its label (on 2026-11-22 the median of 4, the middle two, was the noisier)."""
    return float(np.exp(np.mean(np.log(np.asarray(raw_ms) / np.asarray(label_ms)))))


def _fitting_batches(pool: LabelledPool, chosen: tuple[int, ...]) -> list[tuple[int, ...]]:
    """``chosen`` split, in order, into groups whose tables fit in :data:`MEMORY_SHARE` of the memory
    available now (the rank being measured is already built); a neighbour too big for it alone goes alone."""
    have = available_memory_gb()
    if have is None:
        return [chosen]
    budget = MEMORY_SHARE * have * 1e9
    batches: list[list[int]] = [[]]
    used = 0.0
    for i in chosen:
        need = weight_bytes(list(pool.ranks[i].specs))
        if batches[-1] and used + need > budget:
            batches.append([])
            used = 0.0
        batches[-1].append(i)
        used += need
    return [tuple(b) for b in batches]


def calibrated_timing(specs: list[ShardSpec], optimizer: str, dtype: str, id_seed: int, profile: Profile,
                      k: int = NEIGHBOURS, visits: int = VISITS, passes: int = PASSES,
                      exclude_task: str | None = None, features: tuple[str, ...] = FEATURES) -> CalibratedTiming:
    """Time ``specs`` beside their labelled neighbours and divide by the neighbours' raw-over-label ratio
    (module docstring). Raises :class:`InputError` where the profile has no labelled ranks."""
    pool = labelled_pool(profile)
    quiet = reference_ms(profile)
    if not pool.ranks or not quiet:
        raise InputError(str(profile.dir / "compute-ranks.parquet"),
                         f"profile {profile.name!r} has no quiet-gated stored ranks to calibrate against",
                         "measure without calibration, or collect them with `shardplan collect ranks` first")
    profile.use_threads()
    target = RankOp(specs, optimizer, dtype, profile.device, id_seed)
    refs = [time_reference(profile.device)]
    first = target.run(profile.warmup, profile.repeats)  # also warms the rank up for the passes
    refs.append(time_reference(profile.device))
    estimate = (first.fwd_ms + first.bwd_ms) / (statistics.median(refs) / quiet)
    repeats = max(2, -(-profile.repeats // visits))  # the profile's repeats, spread over the visits
    chosen: tuple[int, ...] = ()
    done = 0
    while done < passes:
        picked = nearest(pool, estimate, specs, k, exclude_task, features)
        if picked == chosen:  # the estimate settled
            break
        chosen, done = picked, done + 1
        own: list[tuple[float, float]] = []
        theirs: dict[int, list[float]] = {i: [] for i in chosen}
        for batch in _fitting_batches(pool, chosen):  # one batch unless the neighbours outgrow memory
            ops = {i: RankOp(list(pool.ranks[i].specs), pool.ranks[i].optimizer, pool.ranks[i].dtype,
                             profile.device, pool.ranks[i].id_seed) for i in batch}
            for v in range(visits):  # the rank and its neighbours in turn, so drift hits them alike
                t = target.run(1, repeats)
                own.extend(zip(t.fwd_samples_ms, t.bwd_samples_ms))
                for i, op in ops.items():
                    t = op.run(profile.warmup if v == 0 else 1, repeats)
                    theirs[i].extend(f + b for f, b in zip(t.fwd_samples_ms, t.bwd_samples_ms))
                refs.append(time_reference(profile.device))
            del ops  # free these neighbours' tables before others are built
        raw_f = statistics.median(f for f, _ in own)
        raw_b = statistics.median(b for _, b in own)
        factor = neighbour_factor([statistics.median(theirs[i]) for i in chosen],
                                  [pool.ranks[i].label_ms for i in chosen])
        estimate = (raw_f + raw_b) / factor
    return CalibratedTiming(raw_f, raw_b, statistics.median(refs) / quiet, factor, chosen, done)
