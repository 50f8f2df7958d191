"""Measuring plans on real FBGEMM kernels.

Each rank's shards are built into one table-batched op exactly as the cost
data was (:func:`shardplan.cost.kernel.time_specs`), fed the global batch with
ids drawn by DESIGN.md's recipe (another seed than the cost data's), and timed
with the profile's protocol.

Several plans are measured interleaved: in each round the plans take turns,
in an order rotated from round to round, so noise hits them alike. In its
turn a plan's ranks are timed one after the other, each in one go (the
collector's protocol), or, with ``visits > 1``, each built once and visited
that many times in turn with the other ranks, the profile's repeats spread
over the visits: on 2026-11-22 that halved the spread of a rank between two
measurements (15% to 7% median, ``bench/visits_noise.py``) at 2.5 times the
time. With visits, where all the call's plans fit in memory together, their
ranks take turns visit by visit across plans, not plan after plan: the same
day's benches showed the ratio of two plans' costs varying 9-11% (sd of log)
from round to round while the ratio of two ranks of one plan varied 4%, so the
drift between plans' turns, not the ranks' own noise, was what blurred a
comparison. A rank's figure is its median round (every round's figure is kept
in the cost block).

The fixed reference workload is timed just before and after every visit, and
every figure of one call is divided by a single slowdown: the median of all
those readings over the profile's quiet reference (``reference.json``,
written by ``shardplan train``), as the training labels were divided by
theirs. One divisor for the call, not one per visit: the reference is a few
milliseconds of work and reads bursts that the ranks' longer timings do not
share. ``bench/reference_tracking.py`` (2026-11-22, reference at 1.4-1.8x)
found a visit's raw time correlated with its references at only 0.15-0.41;
dividing each visit by its own references made the ratio of two ranks' 4-visit
figures 1.3-2.6 times as noisy as not dividing (sd of log 0.10-0.19 against
0.05-0.08), and made each rank's own figure noisier too. With one divisor,
figures within a call compare exactly as their raw times do (imbalance, plan
over plan), and the divisor only sets the level: that the level matches the
labels' is what the fitness probe (:mod:`shardplan.cost.fitness`) checks.
For the same reason a visit is no longer retaken when its references show a
burst: that selected on the reference, not on the kernels.
Communication is not run here: it comes from the profile's comm model, and the
cost block says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..cost.calibration import FEATURES, NEIGHBOURS, calibrated_timing
from ..cost.comm import rank_volumes
from ..cost.estimator import check_kernels, comm_model_for
from ..cost.kernel import KernelTiming, RankOp, time_bracketed
from ..cost.profiles import (DEFAULT_PROFILE, Profile, available_memory_gb, get_profile, host_record, load1,
                             reference_ms)
from ..cost.specs import ShardSpec, rank_specs
from ..domain import Plan, PlanCost, RankCost
from ..errors import InputError
from ..memory import rank_memory_gb

MEASURE_ID_SEED = 1_000_003  # ids independent of the collector's (which uses the sample index)
# Warm-up before every visit but a rank's first in a round: the op is built and its buffers allocated;
# one call over the same ids brings back the cache state that other ranks' visits evicted.
VISIT_WARMUP = 1
# With visits, at most this share of the available memory is held at once (a plan's ranks, or every
# plan of the call): the rest is the ids, the gradients and the process itself.
MEMORY_SHARE = 0.9


def _visit_repeats(profile: Profile, visits: int) -> int:
    """Timed iterations per visit: the profile's repeats spread over the visits (at least 2 each)."""
    return max(2, math.ceil(profile.repeats / visits))


@dataclass(frozen=True)
class _RankJob:
    """One rank of one plan of the call, as timed."""

    plan: int
    rank: int
    specs: list[ShardSpec]
    optimizer: str
    dtype: str


def _time_round(jobs: list[_RankJob], profile: Profile, with_reference: bool, visits: int,
                visit_warmup: int = VISIT_WARMUP) -> tuple[list[tuple[float, float]], list[float]]:
    """One round over ``jobs`` (one plan's ranks, or several plans' taking turns visit by visit):
    raw (fwd_ms, bwd_ms) per job, each the median of every iteration of its visits, and the
    reference's readings taken around every visit (none without ``with_reference``). Each rank is
    built once and visited ``visits`` times in turn with the others."""
    fwd: list[list[float]] = [[] for _ in jobs]
    bwd: list[list[float]] = [[] for _ in jobs]
    refs: list[float] = []
    ops: list[RankOp | None] = [None] * len(jobs)

    def run(j: int, warmup: int, repeats: int) -> KernelTiming:
        # A rank is built inside its first visit's bracket, as the collector builds every sample: the
        # reference after a build read 7% slower (median, 2026-11-22), and it should read the kernels.
        if ops[j] is None:
            job = jobs[j]
            ops[j] = RankOp(job.specs, job.optimizer, job.dtype, profile.device, MEASURE_ID_SEED)
        return ops[j].run(warmup, repeats)

    if visits == 1:  # the collector's protocol
        schedule = [(profile.warmup, profile.repeats)]
    else:  # the first visit warms each freshly built op up fully; later ones restore its cache state
        k = _visit_repeats(profile, visits)
        schedule = [(profile.warmup, k)] + [(visit_warmup, k)] * (visits - 1)
    for warmup, repeats in schedule:
        for j, job in enumerate(jobs):
            if not job.specs:
                continue
            if with_reference:
                b = time_bracketed(lambda: run(j, warmup, repeats), profile.device)
                t = b.timing
                refs += [b.ref_before_ms, b.ref_after_ms]
            else:
                t = run(j, warmup, repeats)
            fwd[j].extend(t.fwd_samples_ms)
            bwd[j].extend(t.bwd_samples_ms)
            if visits == 1:
                ops[j] = None  # one rank in memory at a time
    ops.clear()  # free the tables before the next round's are built
    return [(statistics.median(f), statistics.median(b)) if f else (0.0, 0.0) for f, b in zip(fwd, bwd)], refs


def _plans_take_turns_by_visit(plans: list[Plan], visits: int) -> bool:
    """Whether this call's plans can be visited in turn, rank by rank (all of them held in memory at
    once), rather than each plan taking its own turn; a plan that alone does not fit is an error."""
    if visits == 1:
        return False
    need, have = [sum(rank_memory_gb(p)) for p in plans], available_memory_gb()
    if have is None:
        return len(plans) > 1
    if max(need) > MEMORY_SHARE * have:
        raise InputError("visits", f"{visits} visits per round hold a whole plan ({max(need):.1f} GB) in "
                         f"memory and {have:.1f} GB is available", "measure with --visits 1")
    return len(plans) > 1 and sum(need) <= MEMORY_SHARE * have


def check_measurable(plans: list[Plan], profile: Profile) -> None:
    """Refuse to time a plan as something it is not: ranks of another device than ``profile``'s kernels
    (CPU timings of a GPU plan, or the reverse), or tables of a kernel other than the fused one this
    times (:func:`~shardplan.cost.estimator.check_kernels`); either would be reported as its measured cost."""
    for p in plans:
        check_kernels(p)
        if p.task.topology.device != profile.device:
            raise InputError("task.topology.device", f"plan of {p.task.name!r} has {p.task.topology.device} ranks but "
                             f"profile {profile.name!r} times {profile.device} kernels",
                             f"measure it with a {p.task.topology.device} profile, on that device")


def measure_plans(plans: list[Plan], profile_name: str = DEFAULT_PROFILE, rounds: int = 1,
                  visits: int = 1, visit_warmup: int = VISIT_WARMUP) -> list[PlanCost]:
    """Measured cost of each plan (compute timed, comm from the comm model), interleaved.

    ``visits > 1`` visits each rank that many times per round, taking turns with the other ranks
    (the profile's repeats spread over the visits): with the plan's own ranks, and with every rank
    of every plan of the call where they fit in memory together. The ranks then see the same moments
    of a drifting machine, and each rank's figure averages over more of them. ``visit_warmup``
    iterations, untimed, open every visit but a rank's first in a round. Every figure of the call
    is divided by one slowdown: the median of every reference reading it took.
    """
    if not plans:
        return []
    if visits < 1 or rounds < 1 or visit_warmup < 0:
        raise InputError("rounds" if rounds < 1 else "visits" if visits < 1 else "visit_warmup",
                         "must be at least 1 (visit_warmup: at least 0)")
    profile = get_profile(profile_name)
    check_measurable(plans, profile)
    host = host_record(profile)
    profile.use_threads()
    nominal = reference_ms(profile)
    comm_model = comm_model_for(profile)
    load_before = load1()
    together = _plans_take_turns_by_visit(plans, visits)
    jobs = [[_RankJob(i, r, s, p.task.optimizer, p.task.dtype) for r, s in enumerate(rank_specs(p))]
            for i, p in enumerate(plans)]
    raw: list[list[list[tuple[float, float]]]] = [[[] for _ in j] for j in jobs]  # plan, rank, round
    round_refs: list[list[float]] = [[] for _ in plans]  # plan: median reading of each of its rounds
    readings: list[float] = []
    for rnd in range(rounds):
        order = list(range(len(plans)))
        order = order[rnd % len(order):] + order[: rnd % len(order)]
        groups = [[j for i in order for j in jobs[i]]] if together else [jobs[i] for i in order]
        for group in groups:
            per_job, refs = _time_round(group, profile, bool(nominal), visits, visit_warmup)
            for job, x in zip(group, per_job):
                raw[job.plan][job.rank].append(x)
            readings += refs
            for i in {job.plan for job in group} if refs else set():
                round_refs[i].append(statistics.median(refs))
    factor = statistics.median(readings) / nominal if nominal and readings else 1.0
    if visits == 1:
        protocol = f"median of {profile.repeats} after {profile.warmup} warm-up"
    else:
        others = "the ranks of every plan of the call" if together else "the plan's other ranks"
        protocol = (f"median of {visits} visits x {_visit_repeats(profile, visits)} iterations, taken in "
                    f"turn with {others} (warm-up {profile.warmup} before the first visit, {visit_warmup} "
                    "before the others)")
    divided = (f"divided by one slowdown for the whole call, {factor:.3f}x: the median of its "
               f"{len(readings)} readings of the reference against quiet ({nominal:.3f} ms)" if nominal
               else "raw (no reference.json: not normalised for machine drift)")
    out = []
    for plan, per_rank, refs in zip(plans, raw, round_refs):
        comm = comm_model.rank_comm_ms(rank_volumes(plan), plan.task.topology)
        mem = rank_memory_gb(plan)
        ranks = tuple(RankCost(r, statistics.median(x[0] for x in s) / factor,
                               statistics.median(x[1] for x in s) / factor,
                               comm[r][0], comm[r][1], mem[r]) for r, s in enumerate(per_rank))
        out.append(PlanCost(kind="measured", profile=profile.name, per_rank=ranks, extra={
            "compute": (f"measured: FBGEMM {profile.device} TBE fwd/bwd, {protocol}, median of {rounds} "
                        f"interleaved round(s), {profile.threads or 'default'} thread(s) per rank; {divided}"),
            "slowdown": round(factor, 4),
            "slowdown_per_round": [round(x / nominal, 3) for x in refs] if nominal else [],
            "rounds_compute_ms_per_rank": [[round((x[0] + x[1]) / factor, 4) for x in s] for s in per_rank],
            "comm_model": f"{comm_model.name} ({comm_model.kind})",
            "load1_before": round(load_before, 2), "load1_after": round(load1(), 2), **host}))
    return out


def measure_plan(plan: Plan, profile_name: str = DEFAULT_PROFILE, rounds: int = 1, visits: int = 1) -> PlanCost:
    return measure_plans([plan], profile_name, rounds, visits)[0]


def measure_plan_calibrated(plan: Plan, profile_name: str = DEFAULT_PROFILE, rounds: int = 1) -> PlanCost:
    """Measured cost with every rank's compute neighbour-calibrated (:mod:`shardplan.cost.calibration`):
    timed beside labelled stored ranks like it and expressed on the host its labels were taken on,
    the geometric mean of ``rounds`` rounds over the plan's ranks. For accuracy checks on a busy host,
    where one reference divisor is wrong for most ranks; about 20 timings a rank per round."""
    if rounds < 1:
        raise InputError("rounds", "must be at least 1")
    profile = get_profile(profile_name)
    check_measurable([plan], profile)
    host = host_record(profile)
    comm_model = comm_model_for(profile)
    comm = comm_model.rank_comm_ms(rank_volumes(plan), plan.task.topology)
    mem = rank_memory_gb(plan)
    specs = rank_specs(plan)
    load_before = load1()
    timings: dict[int, list] = {r: [] for r, s in enumerate(specs) if s}
    for _ in range(rounds):  # a round over all ranks, so drift between rounds reaches every rank
        for r in timings:
            timings[r].append(calibrated_timing(specs[r], plan.task.optimizer, plan.task.dtype,
                                                MEASURE_ID_SEED, profile))
    gmean = lambda xs: float(math.exp(statistics.fmean(math.log(x) for x in xs)))  # noqa: E731
    zero = (0.0, 0.0)
    per = {r: (gmean([c.fwd_ms for c in cs]), gmean([c.bwd_ms for c in cs])) for r, cs in timings.items()}
    ranks = tuple(RankCost(r, *per.get(r, zero), comm[r][0], comm[r][1], mem[r]) for r in range(len(specs)))
    return PlanCost(kind="measured", profile=profile.name, per_rank=ranks, extra={
        "compute": (f"measured: FBGEMM {profile.device} TBE fwd/bwd, each rank timed in turn with the "
                    f"{NEIGHBOURS} stored ranks nearest it by {', '.join(FEATURES)} (calibration.POINT_NAMES), "
                    "divided by their raw-over-label ratio (neighbour calibration), geometric mean of "
                    f"{rounds} round(s)"),
        "calibration_neighbours_by": ",".join(FEATURES),
        # which stored labels neighbours came from; unrecorded before 2026-11-29, when those that failed the
        # quiet gate were in the pool too (fitness.labelled_ranks)
        "calibration_labels": "passed the quiet gate",
        "calibration_factor_per_rank": [round(gmean([c.factor for c in timings[r]]), 4) if r in timings else None
                                        for r in range(len(specs))],
        "reference_divided_compute_ms_per_rank": [
            round(gmean([c.reference_divided_ms for c in timings[r]]), 4) if r in timings else 0.0
            for r in range(len(specs))],
        "rounds_compute_ms_per_rank": [[round(c.fwd_ms + c.bwd_ms, 4) for c in timings.get(r, [])]
                                       for r in range(len(specs))],
        "reference_slowdown": round(statistics.median(c.reference_slowdown for cs in timings.values()
                                                      for c in cs), 4) if timings else None,
        "comm_model": f"{comm_model.name} ({comm_model.kind})",
        "load1_before": round(load_before, 2), "load1_after": round(load1(), 2), **host})
