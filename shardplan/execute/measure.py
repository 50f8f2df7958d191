"""Measuring a plan on real FBGEMM kernels.

Each rank's shards are built into one table-batched op exactly as the cost
data was (:func:`shardplan.cost.kernel.time_specs`), fed the global batch with
ids drawn by DESIGN.md's recipe, and timed: forward and backward medians after
warm-up. Ranks are timed one after another in this process, with the
profile's thread count, in ``rounds`` interleaved passes (rank 0, 1, ..., then
again) whose medians are kept, so a burst of machine noise does not land on
one rank only. Communication is not run here: it comes from the profile's comm
model, and the cost block says so.
"""
from __future__ import annotations

import statistics

import torch

from ..cost.comm import rank_volumes
from ..cost.estimator import comm_model_for
from ..cost.kernel import time_specs
from ..cost.profiles import get_profile, load1
from ..cost.specs import rank_specs
from ..domain import Plan, PlanCost, RankCost
from ..memory import rank_memory_gb

MEASURE_ID_SEED = 1_000_003  # ids independent of the collector's (which uses the sample index)


def measure_rank_compute(plan: Plan, profile_name: str = "cpu-2c", rounds: int = 1, warmup: int = 2,
                         repeats: int = 5) -> list[tuple[float, float]]:
    profile = get_profile(profile_name)
    if profile.device == "cpu" and profile.threads:
        torch.set_num_threads(profile.threads)
    specs = rank_specs(plan)
    samples: list[list[tuple[float, float]]] = [[] for _ in specs]
    for _ in range(rounds):
        for r, rank in enumerate(specs):
            samples[r].append(time_specs(rank, plan.task.optimizer, plan.task.dtype, profile.device,
                                         id_seed=MEASURE_ID_SEED, warmup=warmup, repeats=repeats)
                              if rank else (0.0, 0.0))
    return [(statistics.median(f for f, _ in s), statistics.median(b for _, b in s)) for s in samples]


def measure_plan(plan: Plan, profile_name: str = "cpu-2c", rounds: int = 1, warmup: int = 2,
                 repeats: int = 5) -> PlanCost:
    """The plan's cost with compute measured on real kernels and comm from the comm model."""
    profile = get_profile(profile_name)
    before = load1()
    compute = measure_rank_compute(plan, profile_name, rounds, warmup, repeats)
    comm_model = comm_model_for(profile)
    comm = comm_model.rank_comm_ms(rank_volumes(plan), plan.task.topology)
    mem = rank_memory_gb(plan)
    per_rank = tuple(RankCost(rank=r, fwd_compute_ms=compute[r][0], bwd_compute_ms=compute[r][1],
                              fwd_comm_ms=comm[r][0], bwd_comm_ms=comm[r][1], memory_gb=mem[r])
                     for r in range(plan.task.topology.world_size))
    return PlanCost(kind="measured", profile=profile.name, per_rank=per_rank, extra={
        "compute": f"measured: FBGEMM {profile.device} TBE fwd/bwd, median of {repeats} after {warmup} "
                   f"warm-up, {rounds} round(s), {profile.threads or 'default'} thread(s) per rank",
        "comm_model": f"{comm_model.name} ({comm_model.kind})",
        "load1_before": round(before, 2), "load1_after": round(load1(), 2)})
