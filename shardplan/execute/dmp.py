"""Plan-to-trainer: a real multi-process TorchRec DistributedModelParallel DLRM, sharded by a plan.

:func:`train_with_plan` starts one process per rank (``torch.multiprocessing``),
joins them in a process group (gloo on CPU, NCCL on GPUs: the same code), and
trains a DLRM whose embedding tables are the task's, sharded by TorchRec
exactly as the plan says (:func:`~shardplan.search.torchrec_adapter.to_torchrec_plan`).
Batches are synthetic and drawn as the task describes: per table, a Poisson
number of ids around its pooling factor, Zipf-skewed rows (DESIGN.md's recipe),
and labels from a fixed hidden rule on the dense features and the ids, so that
the loss has something to learn and must fall.

Memory: after training, each process sums what TorchRec actually allocated for
its shards (the FBGEMM ops' weights and optimizer state, and the replicas'
optimizer state) into :attr:`TrainResult.allocated`, to be read beside the
plan's own figures (:func:`~shardplan.memory.rank_memory`).

The model is the DLRM of Naumov et al. (2019) with concatenation as the
feature interaction (the reference code's ``--arch-interaction-op=cat``), which
lets tables have different dims as shardplan's tasks do: bottom MLP on the
dense features, the sharded ``EmbeddingBagCollection`` (fused FBGEMM kernels
with the task's optimizer in the backward), concatenation, top MLP, BCE loss,
Adagrad on the dense layers. Every embedding table trains with the task's
optimizer: fused into FBGEMM's backward for sharded tables, and for
data-parallel replicas (which TorchRec leaves to the caller) the same
algorithm in PyTorch, applied after DDP's gradient all-reduce.

Throughput is the global batch times the timed iterations over the slowest
rank's wall time for them (warm-up iterations excluded).
"""
from __future__ import annotations

import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..cost.ids import table_bags
from ..cost.profiles import DEFAULT_PROFILE
from ..domain import Plan, Task
from ..errors import InputError
from ..processes import spawn_ranks

# TorchRec's gloo (CPU) path has no kernels for these (row-wise needs a reduce-scatter of pooled
# embeddings that its CPU sharding does not implement); on GPUs with NCCL they run.
GLOO_UNSUPPORTED = ("row_wise", "table_row_wise")
GLOO_TYPES = ("table_wise", "column_wise", "data_parallel")
CPU_OPTIMIZERS = ("sgd", "rowwise_adagrad", "adagrad")  # what FBGEMM 1.8's CPU op fuses (no Adam)
DENSE_FEATURES = 13  # as Criteo's
MODULE_PATH = "sparse"  # where the EmbeddingBagCollection sits in the model (the plan's module path)


@dataclass
class TrainResult:
    """What one DistributedModelParallel run did."""

    plan: str
    world_size: int
    backend: str
    iterations: int
    warmup: int
    global_batch: int
    samples_per_s: float
    seconds: float
    losses: list[float] = field(default_factory=list)  # mean over ranks, per iteration
    # per rank, bytes TorchRec allocated for the rank's embedding shards ("weights", "optimizer_state"), and
    # how far the rank's memory peaked above where it stood before the model was built ("peak_growth":
    # everything, dense layers and transient buffers included; the process's resident set on CPU, the
    # CUDA allocator's on GPU; -1 where unknown)
    allocated: list[dict[str, int]] = field(default_factory=list)

    @property
    def loss_ends(self) -> tuple[float, float]:
        """Mean loss over the first and over the last fifth of the timed iterations."""
        k = max(1, len(self.losses) // 5)
        return float(np.mean(self.losses[:k])), float(np.mean(self.losses[-k:]))

    @property
    def loss_fell(self) -> bool:
        first, last = self.loss_ends
        return last < first

    def to_dict(self) -> dict:
        return {**asdict(self), "loss_fell": self.loss_fell,
                "first_loss": self.losses[0] if self.losses else None,
                "last_loss": self.losses[-1] if self.losses else None}


def check_runnable(plan: Plan, backend: str) -> None:
    """Raise :class:`InputError` naming what of the plan the backend cannot run: on gloo (CPU),
    row-wise tables and an optimizer FBGEMM's CPU op does not fuse."""
    if backend != "gloo":
        return
    if plan.task.optimizer not in CPU_OPTIMIZERS:
        raise InputError("task.optimizer", f"FBGEMM's CPU embedding op has no fused {plan.task.optimizer!r}",
                         f"train on GPUs (NCCL), or use one of {list(CPU_OPTIMIZERS)} on CPU")
    bad = [f"{t.name} ({t.sharding_type})" for t in plan.tables if t.sharding_type in GLOO_UNSUPPORTED]
    if bad:
        raise InputError("tables", f"TorchRec on CPU (gloo) cannot run row-wise sharding, which "
                         f"{len(bad)} table(s) use: {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}",
                         "train on GPUs (NCCL), or plan for gloo: shardplan plan TASK "
                         "--sharding-types " + ",".join(GLOO_TYPES))


def default_backend(plan: Plan) -> str:
    return "nccl" if plan.task.topology.device == "cuda" else "gloo"


def train_with_plan(plan: Plan, iterations: int = 40, warmup: int = 5, seed: int = 0, lr: float = 0.05,
                    backend: str | None = None, name: str = "plan") -> TrainResult:
    """Train the task's DLRM for ``iterations`` with ``plan`` as the sharding; one process per rank."""
    backend = backend or default_backend(plan)
    if iterations < 2 or warmup < 0:
        raise InputError("iterations", f"need at least 2 timed iterations and warmup >= 0 (got {iterations}, "
                         f"{warmup})")
    check_runnable(plan, backend)
    world = plan.task.topology.world_size
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        spawn_ranks(_worker, world, backend, plan, iterations, warmup, seed, lr, out)
        results = [dict(np.load(out / f"rank{r}.npz")) for r in range(world)]
    seconds = max(float(r["seconds"]) for r in results)
    losses = np.mean([r["losses"] for r in results], axis=0)
    global_batch = plan.task.global_batch_size
    return TrainResult(plan=name, world_size=world, backend=backend, iterations=iterations, warmup=warmup,
                       global_batch=global_batch, samples_per_s=global_batch * iterations / seconds,
                       seconds=seconds, losses=[round(float(x), 5) for x in losses],
                       allocated=[{"weights": int(r["weights_bytes"]), "optimizer_state": int(r["state_bytes"]),
                                   "peak_growth": int(r["peak_growth_bytes"])} for r in results])


def memory_rows(plan: Plan, result: TrainResult) -> list[dict]:
    """Per rank, the plan's memory (``shardplan.memory``) beside what TorchRec allocated in ``result``, in MiB.

    Weights and optimizer state are what the trainer keeps for good and should agree byte for byte;
    the plan's total adds the per-batch buffers it budgets, which the allocator holds only transiently;
    the peak growth is everything training held at once, dense layers included.
    """
    from ..memory import rank_memory

    mib = 1024**2
    cap = plan.task.topology.memory_per_rank_gb * 1024
    return [{"rank": r, "weights_plan": round(m.weights / mib, 3), "weights_torchrec": round(a["weights"] / mib, 3),
             "optimizer_plan": round(m.optimizer_state / mib, 3),
             "optimizer_torchrec": round(a["optimizer_state"] / mib, 3),
             "kept_equal": m.weights == a["weights"] and m.optimizer_state == a["optimizer_state"],  # in bytes
             "plan_total_with_buffers": round(m.total / mib, 3),
             "peak_growth": round(a["peak_growth"] / mib, 1) if a["peak_growth"] >= 0 else None,
             "capacity": round(cap, 1)}
            for r, (m, a) in enumerate(zip(rank_memory(plan), result.allocated))]


def torchrec_plan_for(task: Task, backend: str, profile: str = DEFAULT_PROFILE) -> Plan:
    """TorchRec's own plan of ``task``, limited to the sharding types ``backend`` can run, priced by
    ``profile`` (that of the plan it is trained beside)."""
    from ..planning import estimator
    from ..search import get_searcher

    types = GLOO_TYPES if backend == "gloo" else None
    return get_searcher("torchrec", types).plan(task, estimator(profile), seed=0)


def gloo_plans(task: Task, peers: list[str], estimator) -> tuple[dict[str, Plan], dict[str, str]]:
    """The default searcher's plan of ``task`` (as ``"shardplan"``) and each peer's, all limited to the
    sharding types gloo runs; a peer that cannot plan the task, or whose plan gloo cannot run, is
    left out, with why, in the second dict."""
    from ..search import DEFAULT_SEARCHER, get_searcher

    plans = {"shardplan": get_searcher(DEFAULT_SEARCHER, GLOO_TYPES).plan(task, estimator, seed=0)}
    errors: dict[str, str] = {}
    for peer in peers:
        try:
            plan = get_searcher(peer, GLOO_TYPES).plan(task, estimator, seed=0)
            check_runnable(plan, "gloo")
            plans[peer] = plan
        except InputError as e:  # infeasible, or not runnable on gloo
            errors[peer] = str(e)
    return plans, errors


def compare(plans: dict[str, Plan], iterations: int = 100, warmup: int = 5, rounds: int = 2, seed: int = 0,
            backend: str | None = None) -> dict[str, list[TrainResult]]:
    """Train every plan ``rounds`` times, taking turns (noise hits them alike); results per plan."""
    for p in plans.values():
        check_runnable(p, backend or default_backend(p))
    out: dict[str, list[TrainResult]] = {name: [] for name in plans}
    for _ in range(rounds):
        for name, p in plans.items():
            out[name].append(train_with_plan(p, iterations, warmup, seed, backend=backend, name=name))
    return out


def dense_arch(task: Task):
    """The DLRM's dense layers, shared by this trainer and the emulated-rank loop: the bottom MLP
    (dense features to 32) and the top MLP (32 + every table's dim, concatenated, to one logit)."""
    from torch import nn

    emb_total = sum(t.embedding_dim for t in task.tables)
    return (nn.Sequential(nn.Linear(DENSE_FEATURES, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU()),
            nn.Sequential(nn.Linear(32 + emb_total, 128), nn.ReLU(), nn.Linear(128, 1)))


def dlrm(task: Task):
    """The model: bottom MLP, the task's EmbeddingBagCollection (on meta: DMP materialises the shards),
    concatenation, top MLP."""
    import torch
    from torch import nn

    from ..search.torchrec_adapter import embedding_bag_collection

    class DLRM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bottom, self.top = dense_arch(task)
            self.sparse = embedding_bag_collection(task, device="meta")  # at MODULE_PATH

        def forward(self, dense: torch.Tensor, features) -> torch.Tensor:
            pooled = self.sparse(features).values()  # [B, sum of dims], tables in task order
            return self.top(torch.cat([self.bottom(dense), pooled], dim=1)).squeeze(1)

    return DLRM()


def synthetic_batches(task: Task, rank: int, count: int, seed: int):
    """``count`` (dense, KeyedJaggedTensor, labels) batches of the rank's local batch size."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from ..search.torchrec_adapter import feature_name

    batch = task.batch_size_per_rank
    rule = np.random.default_rng(12345)  # the hidden labelling rule: the same on every rank
    w = rule.normal(size=DENSE_FEATURES)
    parity = rule.choice([-1.0, 1.0], size=len(task.tables))
    out = []
    for i in range(count):
        rng = np.random.default_rng((seed, rank, i))
        dense = rng.normal(size=(batch, DENSE_FEATURES)).astype(np.float32)
        logit = dense @ w / np.sqrt(DENSE_FEATURES)
        lengths, values = [], []
        for k, t in enumerate(task.tables):
            bags = table_bags(t.name, t.num_embeddings, t.pooling_factor, t.zipf_alpha, batch,
                              seed=seed * 1_000_003 + rank * 10_007 + i)
            lengths.append(bags.lengths)
            values.append(bags.ids)
            if len(bags.ids):  # the parity of a sample's first id nudges its label
                starts = np.minimum(np.cumsum(bags.lengths) - bags.lengths, len(bags.ids) - 1)
                sign = bags.ids[starts] % 2 * 2 - 1
                logit = logit + np.where(bags.lengths > 0, parity[k] * sign, 0) / np.sqrt(len(task.tables))
        labels = (logit + 0.3 * rng.normal(size=batch) > 0).astype(np.float32)
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=[feature_name(t.name) for t in task.tables],
            values=torch.from_numpy(np.concatenate(values)), lengths=torch.from_numpy(np.concatenate(lengths)))
        out.append((torch.from_numpy(dense), kjt, torch.from_numpy(labels)))
    return out


def replica_optimizer(optimizer: str, params: list):
    """The task's embedding optimizer for data-parallel replicas, in PyTorch (None when there are none)."""
    import torch
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    from ..search.torchrec_adapter import EMBEDDING_LR

    if not params:
        return None
    make = {"sgd": torch.optim.SGD, "rowwise_adagrad": RowWiseAdagrad, "adagrad": torch.optim.Adagrad,
            "adam": torch.optim.Adam}[optimizer]
    return make(params, lr=EMBEDDING_LR)


def _float_bytes(tensors) -> int:
    """Bytes of the distinct floating-point storages among ``tensors``: FBGEMM keeps one-element
    placeholders for the placements it does not use, optimizers a scalar step count, and views share
    their base's storage."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t.is_floating_point() and t.numel() > 1:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def allocated_embedding_bytes(sharded_ebc, replica_opt) -> tuple[int, int]:
    """What TorchRec allocated on this rank for the embedding tables: (weights, optimizer state) bytes.

    Reads the FBGEMM table-batched ops inside TorchRec's sharded module (``_lookups`` ->
    ``_emb_modules`` -> ``_emb_module``: TorchRec 1.8's layout, private, so a layout change fails
    here by name rather than miscounting): their ``weights_*`` and ``momentum*_*`` tensors, on
    whichever placement (host, device, UVM) holds them; and the replicas' optimizer state.
    """
    weights, state = [], []
    for lookup in sharded_ebc._lookups:
        lookup = getattr(lookup, "module", lookup)  # data-parallel lookups sit inside DDP
        for emb in lookup._emb_modules:
            op = emb._emb_module
            for tname, t in list(op.named_parameters()) + list(op.named_buffers()):
                if tname.startswith("weights"):
                    weights.append(t)
                elif tname.startswith("momentum"):
                    state.append(t)
    if replica_opt is not None:
        state += [t for st in replica_opt.state.values() for t in st.values() if hasattr(t, "numel")]
    return _float_bytes(weights), _float_bytes(state)


def _memory_now(device) -> int:
    """Bytes this rank's device holds now: the process's resident set on CPU, the CUDA allocator's on
    GPU (whose peak statistics start here)."""
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    return _proc_status_bytes("VmRSS")


def _memory_peak(device) -> int:
    """The peak of what :func:`_memory_now` reads (CPU: since the process started, which the
    resident set before the model was built never exceeded)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return _proc_status_bytes("VmHWM")


def _proc_status_bytes(key: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of this process from /proc, or -1 off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def _worker(rank: int, world: int, port: int, backend: str, plan: Plan, iterations: int, warmup: int,
            seed: int, lr: float, out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    from ..search.torchrec_adapter import sharder, to_torchrec_plan

    # FBGEMM's CPU replica op backprops through PyTorch's autograd fallback, which warns that this is
    # deprecated; its gradients equal nn.EmbeddingBag's (tests/test_dmp.py checks), so say it once here.
    warnings.filterwarnings("ignore", message="fbgemm::dense_embedding_codegen_lookup_function")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    cuda = backend == "nccl"
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        batches = synthetic_batches(plan.task, rank, warmup + iterations, seed)
        before = _memory_now(device)  # the inputs are the harness's, not the plan's
        torch.manual_seed(seed)  # the dense layers start equal on every rank
        task = plan.task
        model = DistributedModelParallel(
            dlrm(task), env=ShardingEnv.from_process_group(dist.group.WORLD), device=device,
            plan=to_torchrec_plan(plan, module_path=MODULE_PATH), sharders=[sharder(task)])
        dense_params, replicas = [], []  # the fused optimizer already owns every sharded table's weights
        for pname, p in in_backward_optimizer_filter(model.named_parameters()):
            (replicas if pname.startswith(MODULE_PATH + ".") else dense_params).append(p)
        dense_opt = torch.optim.Adagrad(dense_params, lr=lr)
        replica_opt = replica_optimizer(task.optimizer, replicas)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        losses = []
        for i, (dense, kjt, labels) in enumerate(batches):
            if i == warmup:
                dist.barrier()
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            dense, kjt, labels = dense.to(device), kjt.to(device), labels.to(device)
            loss = loss_fn(model(dense, kjt), labels)
            dense_opt.zero_grad()
            if replica_opt is not None:
                replica_opt.zero_grad()
            loss.backward()  # the sharded tables' optimizer runs fused in here
            dense_opt.step()
            if replica_opt is not None:
                replica_opt.step()
            if i >= warmup:
                losses.append(float(loss.detach()))
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        dist.barrier()
        weights_bytes, state_bytes = allocated_embedding_bytes(getattr(model.module, MODULE_PATH), replica_opt)
        peak = _memory_peak(device)
        np.savez(out / f"rank{rank}.npz", seconds=seconds, losses=np.asarray(losses),
                 weights_bytes=weights_bytes, state_bytes=state_bytes,
                 peak_growth_bytes=peak - before if peak >= 0 <= before else -1)
    finally:
        dist.destroy_process_group()
