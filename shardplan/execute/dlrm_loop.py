"""A DLRM training loop whose embedding ranks are emulated on one device and timed one by one.

With one GPU (or this CPU), the ranks of a plan cannot run side by side, so
each rank's shards run as that rank's own FBGEMM table-batched op(s) — forward,
then backward with the fused optimizer — and are timed alone (CUDA events on a
GPU, wall clock on CPU). The dense part (bottom MLP, feature interaction by
concatenation, top MLP, BCE loss, backward, optimizer step) runs on one rank's
local batch, as every data-parallel rank would, and is timed too, on the pooled
embeddings as a tensor of their own: assembling them from the shards' outputs
(and its backward) is the all-to-all's work, not the dense part's, and would
otherwise grow with the plan's shard count (it did, up to 63 ms against 5-10 ms
of dense work, in the 2026-11-26 H200 run). An
iteration's time is

    dense + max over ranks (embedding fwd + bwd + modelled all-to-all),

with the all-to-all from the profile's comm model (fitted to measured gloo on
``cpu-2c``; on GPU profiles an alpha-beta model of NCCL over NVLink and the
network, labelled modelled). Samples per second = global batch / iteration.

The training is real: embeddings learn through the fused optimizer, the dense
layers through Adagrad, and the loss is reported. The lookups follow DESIGN.md's
id recipe (a few distinct batches, cycled, so that id generation stays out of
the loop).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from ..cost.estimator import PlanEstimator, comm_model_for
from ..cost.comm import rank_volumes
from ..cost.kernel import FusedOp, keep_freed_memory, shard_inputs
from ..cost.profiles import get_profile
from ..cost.specs import ShardSpec, rank_specs
from ..domain import Plan, Task
from .dmp import DENSE_FEATURES, dense_arch

DISTINCT_BATCHES = 4


@dataclass
class LoopResult:
    """Per-rank measured embedding time beside the plan's prediction, and the iteration's."""

    plan: str
    device: str
    iterations: int
    global_batch: int
    dense_ms: float
    rank_fwd_ms: list[float]
    rank_bwd_ms: list[float]
    rank_comm_ms: list[float]  # modelled (the profile's comm model), fwd + bwd
    predicted_rank_ms: list[float] = field(default_factory=list)  # compute + comm, from the cost models
    losses: list[float] = field(default_factory=list)

    @property
    def rank_ms(self) -> list[float]:
        """Each rank's embedding compute + comm."""
        return [f + b + c for f, b, c in zip(self.rank_fwd_ms, self.rank_bwd_ms, self.rank_comm_ms)]

    @property
    def embedding_ms(self) -> float:
        """The slowest rank's embedding compute + comm: what sharding decides."""
        return max(self.rank_ms)

    @property
    def iteration_ms(self) -> float:
        return self.dense_ms + self.embedding_ms

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / self.iteration_ms * 1e3

    def to_dict(self) -> dict:
        return {**self.__dict__, "embedding_ms": self.embedding_ms, "iteration_ms": self.iteration_ms,
                "samples_per_s": self.samples_per_s}


def _timer(device: torch.device) -> Callable[[Callable[[], object]], tuple[object, float]]:
    def timed(fn: Callable[[], object]) -> tuple[object, float]:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
            return out, start.elapsed_time(end)
        t0 = time.perf_counter()
        out = fn()
        return out, (time.perf_counter() - t0) * 1e3
    return timed


class _Rank:
    """One emulated rank: a TBE per batch size its shards see, and where each shard's output goes."""

    def __init__(self, task: Task, items: list, specs: list[ShardSpec], device: torch.device, seed: int) -> None:
        self.groups = []
        for batch in sorted({s.batch_size for s in specs}):
            idx = [i for i, s in enumerate(specs) if s.batch_size == batch]
            group = [specs[i] for i in idx]
            batches = [shard_inputs(group, seed * 1009 + k, str(device)) for k in range(DISTINCT_BATCHES)]
            op = FusedOp(batches[0], task.optimizer, task.dtype, str(device), tuple(batches[1:]))
            # (table, column offset, columns, column offset within this TBE's output)
            places, at = [], 0
            for i in idx:
                table, _, sh = items[i]
                places.append((table.name, sh.col_offset, sh.num_cols, at))
                at += sh.num_cols
            self.groups.append((op.tbe, op.batches, places))


def run_loop(plan: Plan, profile_name: str, estimator: PlanEstimator | None = None, iterations: int = 20,
             warmup: int = 3, seed: int = 0, lr: float = 0.05, name: str = "plan") -> LoopResult:
    """Train the task's DLRM for ``warmup + iterations`` steps; time the last ``iterations``."""
    profile = get_profile(profile_name)
    device = torch.device("cuda" if profile.device == "cuda" else "cpu")
    if device.type == "cpu":
        keep_freed_memory()
        if profile.threads:
            torch.set_num_threads(profile.threads)
    task = plan.task
    torch.manual_seed(seed)
    ranks = [_Rank(task, items, specs, device, seed) for items, specs in zip(plan.rank_shards(), rank_specs(plan))]
    dims = {t.name: t.embedding_dim for t in task.tables}
    local = task.batch_size_per_rank
    bottom, top = (m.to(device) for m in dense_arch(task))
    dense_params = list(bottom.parameters()) + list(top.parameters())
    opt = torch.optim.Adagrad(dense_params, lr=lr)
    rng = np.random.default_rng(seed)
    w = torch.from_numpy(rng.normal(size=DENSE_FEATURES).astype(np.float32)).to(device)
    timed = _timer(device)
    n = task.topology.world_size
    fwd, bwd, dense_ms = np.zeros((iterations, n)), np.zeros((iterations, n)), np.zeros(iterations)
    losses = []
    for it in range(warmup + iterations):
        k = it % DISTINCT_BATCHES
        # Who goes first turns each iteration: on the H200 the rank timed first in an iteration ran 1.3-1.5x
        # the others' median (the 2026-11-26 run, every rank 0 then); turned, that penalty falls on each
        # rank in 1 of n iterations, which the median over iterations leaves out for n >= 3.
        order = [(it + j) % n for j in range(n)]
        dense = torch.from_numpy(rng.normal(size=(local, DENSE_FEATURES)).astype(np.float32)).to(device)
        labels = ((dense @ w) > 0).float()
        outs, t_fwd = [], np.zeros(n)
        for r in order:
            for tbe, inputs, places in ranks[r].groups:
                out, ms = timed(lambda: tbe(*inputs[k]))
                outs.append((r, out, places))
                t_fwd[r] += ms
        # The shards' outputs become the tables' pooled embeddings (column blocks at their offset, row
        # slices added up): the all-to-all's work, modelled as comm, so it stays out of every timing.
        pooled = {name: torch.zeros(local, d, device=device) for name, d in dims.items()}
        for _, out, places in outs:
            for table, col, cols, at in places:
                pooled[table] = pooled[table] + nn.functional.pad(
                    out[:local, at:at + cols], (col, dims[table] - col - cols))
        gathered = torch.cat([pooled[t.name] for t in task.tables], dim=1)
        emb = gathered.detach().requires_grad_()  # what the dense part receives: the same for every plan

        def dense_step():
            logits = top(torch.cat([bottom(dense), emb], dim=1)).squeeze(1)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
            grads = torch.autograd.grad(loss, [emb] + dense_params)
            for p, g in zip(dense_params, grads[1:]):
                p.grad = g
            opt.step()
            return loss, grads[0]

        (loss, emb_grad), t_dense = timed(dense_step)
        out_grads = torch.autograd.grad(gathered, [o for _, o, _ in outs], emb_grad)  # back through the glue
        t_bwd = np.zeros(n)
        for (r, out, _), g in zip(outs, out_grads):
            _, ms = timed(lambda: out.backward(g))  # the TBE backward with its fused optimizer
            t_bwd[r] += ms
        if it >= warmup:
            fwd[it - warmup], bwd[it - warmup], dense_ms[it - warmup] = t_fwd, t_bwd, t_dense
            losses.append(round(float(loss.detach()), 5))
    comm = comm_model_for(profile).rank_comm_ms(rank_volumes(plan), task.topology)
    predicted = []
    if estimator is not None:
        predicted = [r.total_ms for r in estimator.estimate(plan).per_rank]
    return LoopResult(plan=name, device=str(device), iterations=iterations, global_batch=task.global_batch_size,
                      dense_ms=float(np.median(dense_ms)), rank_fwd_ms=np.median(fwd, axis=0).round(4).tolist(),
                      rank_bwd_ms=np.median(bwd, axis=0).round(4).tolist(),
                      rank_comm_ms=[round(f + b, 4) for f, b in comm], predicted_rank_ms=predicted, losses=losses)
