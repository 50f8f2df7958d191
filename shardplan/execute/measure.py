"""Measuring plans on real FBGEMM kernels.

Each rank's shards are built into one table-batched op exactly as the cost
data was (:func:`shardplan.cost.kernel.time_specs`), fed the global batch with
ids drawn by DESIGN.md's recipe (another seed than the cost data's), and timed
with the profile's protocol. The fixed reference workload is timed just before
and after each rank, and the rank's times are divided by the machine's
slowdown at that moment against the profile's quiet reference
(``reference.json``, written by ``shardplan train``), as the training labels
were: this machine's speed drifts by up to 3x for seconds at a time. A rank
whose references show a burst (before and after disagree by more than
``kernel.STEADY_TOLERANCE``) or a machine more than
``MEASURE_SLOW_LIMIT`` times slower than quiet is timed again, up to
``MEASURE_ATTEMPTS`` times. The collector is stricter (it also retries a
steady 1.2x slowdown): labels bound the model, while a measurement only has to
divide a steady slowdown out.

Several plans are measured interleaved: in each round the plans take turns,
in an order rotated from round to round, so noise hits them alike. In its
turn a plan's ranks are timed one after the other, each in one go (the
collector's protocol), or, with ``visits > 1``, each built once and visited
that many times in turn with the other ranks, the profile's repeats spread
over the visits: on 2026-11-22 that halved the spread of a rank between two
measurements (15% to 7% median, ``bench/visits_noise.py``) at 2.5 times the
time. A rank's figure is its median round (every round's figure is kept in
the cost block). The fastest round was tried and rejected: dividing by the
reference errs both ways on a disturbed machine (``bench/drift_probe.py`` saw
TorchRec's ranks of ``unseen-a-10`` divide to 1.3x their quiet time while the
reference read 1.1x, and an hour later to 0.55x while it read 4-5x), so the
fastest divided round is not the least disturbed one.
Communication is not run here: it comes from the profile's comm model, and the
cost block says so.
"""
from __future__ import annotations

import math
import statistics

from ..cost.comm import rank_volumes
from ..cost.estimator import comm_model_for
from ..cost.kernel import MEASURE_SLOW_LIMIT, KernelTiming, RankOp, slowdown, time_bracketed
from ..cost.profiles import Profile, available_memory_gb, get_profile, load1, reference_ms
from ..cost.specs import ShardSpec, rank_specs
from ..domain import Plan, PlanCost, RankCost
from ..errors import InputError
from ..memory import rank_memory_gb

MEASURE_ID_SEED = 1_000_003  # ids independent of the collector's (which uses the sample index)
MEASURE_ATTEMPTS = 3  # a rank timed while the machine was disturbed is timed again (kernel.disturbed)
MEASURE_PAUSE_S = 0.5  # before a retry, times the attempt number (a bench is thousands of rank timings)
# Warm-up before every visit but a rank's first in a round: the op is built and its buffers allocated;
# one call over the same ids brings back the cache state that other ranks' visits evicted.
VISIT_WARMUP = 1


def _visit_repeats(profile: Profile, visits: int) -> int:
    """Timed iterations per visit: the profile's repeats spread over the visits (at least 2 each)."""
    return max(2, math.ceil(profile.repeats / visits))


def _time_plan(plan: Plan, specs: list[list[ShardSpec]], profile: Profile, nominal: float | None,
               visits: int) -> list[tuple[float, float, float]]:
    """One round of one plan: (fwd_ms, bwd_ms, slowdown) per rank, drift divided out when ``nominal``
    is known. Each rank is built once and visited ``visits`` times in turn; a visit is bracketed by the
    reference (and retried when disturbed), and the round's figure is the median of every divided
    iteration of the rank's visits."""
    optimizer, dtype = plan.task.optimizer, plan.task.dtype
    fwd: list[list[float]] = [[] for _ in specs]
    bwd: list[list[float]] = [[] for _ in specs]
    slow: list[list[float]] = [[] for _ in specs]

    if visits > 1:
        need, have = sum(rank_memory_gb(plan)), available_memory_gb()
        if have is not None and need > 0.9 * have:
            raise InputError("visits", f"{visits} visits per round hold the whole plan ({need:.1f} GB) in "
                             f"memory and {have:.1f} GB is available", "measure with --visits 1")
    ops: list[RankOp | None] = [None] * len(specs)

    def run(r: int, warmup: int, repeats: int) -> KernelTiming:
        # A rank is built inside its first visit's bracket, as the collector builds every sample: the
        # reference before it must not follow a build (on 2026-11-22 it read 7% slower there, median).
        if ops[r] is None:
            ops[r] = RankOp(specs[r], optimizer, dtype, profile.device, MEASURE_ID_SEED)
        return ops[r].run(warmup, repeats)

    if visits == 1:  # the collector's protocol exactly
        schedule = [(profile.warmup, profile.repeats)]
    else:  # the first visit warms each freshly built op up fully; later ones restore its cache state
        k = _visit_repeats(profile, visits)
        schedule = [(profile.warmup, k)] + [(VISIT_WARMUP, k)] * (visits - 1)
    for warmup, repeats in schedule:
        for r in range(len(specs)):
            if not specs[r]:
                continue
            if not nominal:  # no quiet reference to divide by: raw times
                t, factor = run(r, warmup, repeats), 1.0
            else:
                b = time_bracketed(lambda: run(r, warmup, repeats), profile.device, quiet_ms=nominal,
                                   max_attempts=MEASURE_ATTEMPTS, slow_limit=MEASURE_SLOW_LIMIT,
                                   pause_s=MEASURE_PAUSE_S)
                t, factor = b.timing, slowdown(b.ref_before_ms, b.ref_after_ms, nominal)
            fwd[r].extend(x / factor for x in t.fwd_samples_ms)
            bwd[r].extend(x / factor for x in t.bwd_samples_ms)
            slow[r].append(factor)
            if visits == 1:
                ops[r] = None  # one rank in memory at a time
    ops.clear()  # free the plan's tables before the next plan is built
    return [(statistics.median(f), statistics.median(b), statistics.median(s)) if f else (0.0, 0.0, 1.0)
            for f, b, s in zip(fwd, bwd, slow)]


def measure_plans(plans: list[Plan], profile_name: str = "cpu-2c", rounds: int = 1,
                  visits: int = 1) -> list[PlanCost]:
    """Measured cost of each plan (compute timed, comm from the comm model), interleaved.

    ``visits > 1`` visits each rank that many times per round, taking turns with the plan's other
    ranks (the profile's repeats spread over the visits): the ranks of a plan then see the same
    moments of a drifting machine, and each rank's figure averages over more of them.
    """
    if not plans:
        return []
    if visits < 1 or rounds < 1:
        raise InputError("rounds" if rounds < 1 else "visits", "must be at least 1")
    profile = get_profile(profile_name)
    profile.use_threads()
    nominal = reference_ms(profile)
    comm_model = comm_model_for(profile)
    load_before = load1()
    specs = [rank_specs(p) for p in plans]
    samples: list[list[list[tuple[float, float, float]]]] = [[[] for _ in s] for s in specs]
    for rnd in range(rounds):
        order = list(range(len(plans)))
        order = order[rnd % len(order):] + order[: rnd % len(order)]
        for i in order:
            for r, x in enumerate(_time_plan(plans[i], specs[i], profile, nominal, visits)):
                samples[i][r].append(x)
    if visits == 1:
        protocol = f"median of {profile.repeats} after {profile.warmup} warm-up"
    else:
        protocol = (f"median of {visits} visits x {_visit_repeats(profile, visits)} iterations, taken in "
                    f"turn with the plan's other ranks (warm-up {profile.warmup} before the first visit, "
                    f"{VISIT_WARMUP} before the others)")
    out = []
    for plan, per_rank in zip(plans, samples):
        comm = comm_model.rank_comm_ms(rank_volumes(plan), plan.task.topology)
        mem = rank_memory_gb(plan)
        ranks = tuple(RankCost(r, statistics.median(x[0] for x in s), statistics.median(x[1] for x in s),
                               comm[r][0], comm[r][1], mem[r]) for r, s in enumerate(per_rank))
        out.append(PlanCost(kind="measured", profile=profile.name, per_rank=ranks, extra={
            "compute": (f"measured: FBGEMM {profile.device} TBE fwd/bwd, {protocol}, median of {rounds} "
                        f"interleaved round(s), {profile.threads or 'default'} thread(s) per rank; "
                        + (f"divided by the machine's slowdown against the quiet reference ({nominal:.3f} ms)"
                           if nominal else "raw (no reference.json: not normalised for machine drift)")),
            "slowdown_per_rank": [round(statistics.median(x[2] for x in s), 3) for s in per_rank],
            "rounds_compute_ms_per_rank": [[round(x[0] + x[1], 4) for x in s] for s in per_rank],
            "comm_model": f"{comm_model.name} ({comm_model.kind})",
            "load1_before": round(load_before, 2), "load1_after": round(load1(), 2)}))
    return out


def measure_plan(plan: Plan, profile_name: str = "cpu-2c", rounds: int = 1, visits: int = 1) -> PlanCost:
    return measure_plans([plan], profile_name, rounds, visits)[0]

