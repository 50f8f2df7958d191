"""A plan's predicted cost: the compute model per rank, the comm model per rank, memory.

:class:`PlanEstimator` is what searchers and ``evaluate`` use. Rank compute
predictions are cached by the rank's shard set, so a search that re-scores a
plan after moving one table only pays for the two ranks that changed.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Protocol

import numpy as np

from .. import budget
from ..domain import Plan, PlanCost, RankCost, Task
from ..errors import InputError
from ..memory import rank_memory_gb
from .comm import AlphaBetaCommModel, CommModel, FittedCommModel, rank_volumes
from .profiles import DEFAULT_PROFILE, Profile, get_profile, metadata_kinds, profiles_of_device, profiles_pricing
from .specs import ShardSpec, canonical, rank_specs


class ComputeModel(Protocol):
    profile: str

    def predict(self, sets: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray]: ...


# The kernels the cost data timed: FBGEMM's fused TBE with the weights in device memory; a replica's kernel
# is "dense" in TorchRec's plans (its data-parallel tables) and "fused" in ours, timed alike (cost.draws)
PRICED_KERNELS = ("fused",)
PRICED_REPLICA_KERNELS = ("fused", "dense")


def check_kernels(plan: Plan) -> None:
    """Refuse a plan whose tables run a kernel the cost data never timed (a UVM-cached, quantised or
    key-value table of a TorchRec plan), rather than price it as the fused kernel in device memory."""
    for i, t in enumerate(plan.tables):
        known = PRICED_REPLICA_KERNELS if t.sharding_type == "data_parallel" else PRICED_KERNELS
        if t.compute_kernel not in known:
            raise InputError(f"tables[{i}].compute_kernel", f"table {t.name!r} runs {t.compute_kernel!r}, which "
                             f"shardplan's cost models do not price (they were timed on {list(known)})",
                             "plan it with a fused kernel in device memory, or leave it out of the plan")


class PlanEstimator:
    """Predicted per-rank cost of plans on one hardware profile.

    Safe to share between threads: the cache is a dict that only ever gains
    whole entries (a race costs a duplicate prediction, never a wrong one).
    """

    CACHE_LIMIT = 1_000_000

    def __init__(self, compute: ComputeModel, comm: CommModel, profile: str, compute_name: str) -> None:
        self.compute = compute
        self.comm = comm
        self.profile = profile
        self.compute_name = compute_name
        self._cache: dict[tuple[ShardSpec, ...], tuple[float, float]] = {}

    def rank_compute(self, sets: list[list[ShardSpec]]) -> list[tuple[float, float]]:
        """(fwd_ms, bwd_ms) for each shard set; the order of shards in a set does not matter."""
        budget.check()
        if len(self._cache) > self.CACHE_LIMIT:  # a long-lived service must not grow without end
            self._cache.clear()
        keys = [canonical(s) for s in sets]
        found = {k: v for k in keys if (v := self._cache.get(k)) is not None}
        missing = list(dict.fromkeys(k for k in keys if k not in found))  # ordered: same batch every run
        if missing:
            fwd, bwd = self.compute.predict([list(k) for k in missing])
            for k, f, b in zip(missing, fwd, bwd):
                found[k] = self._cache[k] = (float(f), float(b))
        return [found[k] for k in keys]

    def check_task(self, task: Task, where: str = "") -> None:
        """Refuse a task this profile has no costs for, before anything is searched or priced: another
        optimizer or weight type than its data's, or ranks of another device than its own (a CPU profile's
        milliseconds are not a GPU's, and the task's memory default follows its device). Fields are named
        as in a task file, after ``where`` (``"task."`` for a plan's task)."""
        # the timings are of one optimizer and one weight type; another's are not priced silently
        for field, value, kinds, flag in (("optimizer", task.optimizer, self.optimizers, "--optimizer"),
                                          ("dtype", task.dtype, self.dtypes, "--dtype")):
            if value not in kinds:
                others = profiles_pricing(get_profile(self.profile).device, (task.optimizer, task.dtype))
                fix = (f"price it with a profile timed with it: {' or '.join(others)} (--profile, or profile= "
                       "in Python)" if others else
                       f"plan with {field} {kinds[0]!r}, or time a profile of your own: shardplan profiles --new "
                       f"NAME --like {self.profile}, then shardplan collect compute --profile NAME {flag} {value} "
                       "(profiles --show NAME lists the rest)")
                raise InputError(f"{where}{field}", f"{value!r} has no cost data in profile {self.profile!r} (its "
                                 f"kernels were timed with {field} {kinds})", fix)
        device = get_profile(self.profile).device
        if task.topology.device != device:
            raise InputError(f"{where}topology.device", f"is {task.topology.device!r} but profile {self.profile!r} "
                             f"prices {device} ranks", f"set topology.device to {device!r}, or use a "
                             f"{task.topology.device} profile: {profiles_of_device(task.topology.device)}")

    def estimate(self, plan: Plan) -> PlanCost:
        task = plan.task
        self.check_task(task, where="task.")
        check_kernels(plan)
        compute = self.rank_compute(rank_specs(plan))
        comm = self.comm.rank_comm_ms(rank_volumes(plan), task.topology)
        mem = rank_memory_gb(plan)
        per_rank = tuple(RankCost(rank=r, fwd_compute_ms=compute[r][0], bwd_compute_ms=compute[r][1],
                                  fwd_comm_ms=comm[r][0], bwd_comm_ms=comm[r][1], memory_gb=mem[r])
                         for r in range(task.topology.world_size))
        return PlanCost(kind="predicted", profile=self.profile, per_rank=per_rank,
                        extra={"compute_model": self.compute_name, "comm_model": self.comm.name})

    def at_host_state(self, host_reference_ms: float) -> "PlanEstimator":
        """This estimator priced at the host state of a machine whose reference workload runs in
        ``host_reference_ms`` (GPU profiles; :class:`.host_state.AtHostState`), with a cache of its own."""
        from .host_state import AtHostState

        compute = AtHostState(self.compute, host_reference_ms)
        return PlanEstimator(compute, self.comm, self.profile,
                             f"{self.compute_name} at a host reference of {compute.reference_ms:.3f} ms")

    @property
    def optimizers(self) -> list[str]:
        """The optimizers the compute model's data was timed with (:func:`profiles.metadata_kinds`)."""
        return metadata_kinds(getattr(self.compute, "metadata", {}) or {})[0]

    @property
    def dtypes(self) -> list[str]:
        """The weight types the compute model's data was timed with (:func:`profiles.metadata_kinds`)."""
        return metadata_kinds(getattr(self.compute, "metadata", {}) or {})[1]


def comm_model_for(profile: Profile) -> CommModel:
    path = profile.dir / "comm-model.json"
    if profile.device == "cpu":
        if not path.exists():
            raise InputError(str(path), "missing", "run `shardplan collect comm` to measure and fit it")
        return FittedCommModel.load(path, profile.name)
    figures = profile.published  # every GPU profile has them (its profile.json's schema)
    return AlphaBetaCommModel(profile=profile.name, intra_gbps=figures.nvlink_gbps, inter_gbps=figures.network_gbps,
                              alpha_intra_us=figures.alpha_intra_us, alpha_inter_us=figures.alpha_inter_us)


def load_estimator(profile_name: str = DEFAULT_PROFILE, model_path: str | Path | None = None,
                   host_reference_ms: float | None = None) -> PlanEstimator:
    """The profile's committed neural compute model and its comm model.

    A GPU profile with no trained model yet gets the roofline of its published HBM
    bandwidth instead (:meth:`RooflineCostModel.published`), with a warning, and
    every cost it gives names that model: GPU plans can be made before GPU cost
    data exists, priced the way TorchRec's planner prices them.

    ``host_reference_ms`` (GPU profiles): price at the host state of a machine whose reference
    workload runs in that many ms (``shardplan profiles --host-reference`` times it there) instead of
    the collection's median state (:class:`.host_state.AtHostState`); every cost names it.
    """
    from .baselines import RooflineCostModel
    from .model import NeuralCostModel

    profile = get_profile(profile_name)
    path = Path(model_path) if model_path else profile.dir / "compute-model.json"
    if not path.exists() and model_path is None and profile.device == "cuda":
        roofline = RooflineCostModel.published(profile.name)
        warnings.warn(f"profile {profile.name!r} has no trained compute model yet; its compute is priced by "
                      f"a roofline of published figures ({roofline.metadata['source']})", stacklevel=2)
        return PlanEstimator(roofline, comm_model_for(profile), profile.name,
                             "roofline (published HBM bandwidth; no GPU cost data yet)")
    if not path.exists():
        raise InputError(str(path), "no compute-cost model for this profile",
                         f"run `shardplan train --profile {profile.name}`")
    compute = NeuralCostModel.load(path, profile=profile.name)
    saved = compute.metadata.get("saved")
    est = PlanEstimator(compute, comm_model_for(profile), profile.name,
                        f"neural ({path.name}" + (f", saved {saved})" if saved else ")"))
    return est if host_reference_ms is None else est.at_host_state(host_reference_ms)
