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

Several plans are measured interleaved: in each round, the plans take turns
rank by rank, in an order rotated from round to round, so noise hits them
alike. A rank's figure is its median round (every round's figure is kept in
the cost block). The fastest round was tried and rejected: dividing by the
reference errs both ways on a disturbed machine (``bench/drift_probe.py`` saw
TorchRec's ranks of ``unseen-a-10`` divide to 1.3x their quiet time while the
reference read 1.1x, and an hour later to 0.55x while it read 4-5x), so the
fastest divided round is not the least disturbed one.
Communication is not run here: it comes from the profile's comm model, and the
cost block says so.
"""
from __future__ import annotations

import statistics

from ..cost.comm import rank_volumes
from ..cost.estimator import comm_model_for
from ..cost.kernel import MEASURE_SLOW_LIMIT, slowdown, time_specs, time_specs_bracketed
from ..cost.profiles import Profile, get_profile, load1, reference_ms
from ..cost.specs import ShardSpec, rank_specs
from ..domain import Plan, PlanCost, RankCost
from ..memory import rank_memory_gb

MEASURE_ID_SEED = 1_000_003  # ids independent of the collector's (which uses the sample index)
MEASURE_ATTEMPTS = 3  # a rank timed while the machine was disturbed is timed again (kernel.disturbed)
MEASURE_PAUSE_S = 0.5  # before a retry, times the attempt number (a bench is thousands of rank timings)


def time_rank(specs: list[ShardSpec], optimizer: str, dtype: str, profile: Profile,
              nominal: float | None) -> tuple[float, float, float]:
    """(fwd_ms, bwd_ms, slowdown) of one rank, drift divided out when ``nominal`` is known."""
    if not specs:
        return 0.0, 0.0, 1.0
    if not nominal:  # no quiet reference to divide by: raw times
        t = time_specs(specs, optimizer, dtype, profile.device, id_seed=MEASURE_ID_SEED,
                       warmup=profile.warmup, repeats=profile.repeats)
        return t.fwd_ms, t.bwd_ms, 1.0
    b = time_specs_bracketed(specs, optimizer, dtype, profile.device, MEASURE_ID_SEED, profile.warmup,
                             profile.repeats, quiet_ms=nominal, max_attempts=MEASURE_ATTEMPTS,
                             slow_limit=MEASURE_SLOW_LIMIT, pause_s=MEASURE_PAUSE_S)
    factor = slowdown(b.ref_before_ms, b.ref_after_ms, nominal)
    return b.timing.fwd_ms / factor, b.timing.bwd_ms / factor, factor


def measure_plans(plans: list[Plan], profile_name: str = "cpu-2c", rounds: int = 1) -> list[PlanCost]:
    """Measured cost of each plan (compute timed, comm from the comm model), interleaved."""
    if not plans:
        return []
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
            for r, rank in enumerate(specs[i]):
                samples[i][r].append(time_rank(rank, plans[i].task.optimizer, plans[i].task.dtype, profile, nominal))
    out = []
    for plan, per_rank in zip(plans, samples):
        comm = comm_model.rank_comm_ms(rank_volumes(plan), plan.task.topology)
        mem = rank_memory_gb(plan)
        ranks = tuple(RankCost(r, statistics.median(x[0] for x in s), statistics.median(x[1] for x in s),
                               comm[r][0], comm[r][1], mem[r]) for r, s in enumerate(per_rank))
        out.append(PlanCost(kind="measured", profile=profile.name, per_rank=ranks, extra={
            "compute": (f"measured: FBGEMM {profile.device} TBE fwd/bwd, median of {profile.repeats} after "
                        f"{profile.warmup} warm-up, median of {rounds} interleaved round(s), "
                        f"{profile.threads or 'default'} thread(s) per rank; "
                        + (f"divided by the machine's slowdown against the quiet reference ({nominal:.3f} ms)"
                           if nominal else "raw (no reference.json: not normalised for machine drift)")),
            "slowdown_per_rank": [round(statistics.median(x[2] for x in s), 3) for s in per_rank],
            "rounds_compute_ms_per_rank": [[round(x[0] + x[1], 4) for x in s] for s in per_rank],
            "comm_model": f"{comm_model.name} ({comm_model.kind})",
            "load1_before": round(load_before, 2), "load1_after": round(load1(), 2)}))
    return out


def measure_plan(plan: Plan, profile_name: str = "cpu-2c", rounds: int = 1) -> PlanCost:
    return measure_plans([plan], profile_name, rounds)[0]

