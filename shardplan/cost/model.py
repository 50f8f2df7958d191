"""The neural compute-cost model: per-shard encoder, sum pooling, fwd/bwd heads.

A rank's shards are encoded one by one by a shared MLP; each code gives the
shard's own forward and backward time, and these are sum-pooled over the rank;
a context head reading the set as a whole (mean code, shard count) scales the
sum and adds a fixed overhead, which is how the model learns that a fused
kernel's time is not the sum of its parts (see :class:`_SetNet`). Only shards fed
one batch size fuse: a rank holding data-parallel replicas beside sharded tables
is priced as two such sets, added (:func:`batch_parts`). Trained with
MSE in log space, i.e. on relative error, plus a penalty whenever adding a
shard to a set lowers its predicted time (see :meth:`NeuralCostModel.fit`).
Feature scaling is part of the saved state.

Usage mirrors scikit-learn::

    model = NeuralCostModel(profile="cpu-2c").fit(sets, fwd_ms, bwd_ms)
    fwd, bwd = model.predict(sets)
    model.save(path); NeuralCostModel.load(path, profile="cpu-2c")
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from ..errors import InputError
from ..formats import write_text_atomic
from .features import FEATURE_NAMES, set_features
from .specs import ShardSpec

MODEL_FORMAT = "shardplan/compute-model@1"
# Amounts a set's context can read in total (``context_totals``): log2 features whose sums over a set's
# shards are what its working set and traffic are (floats looked up, floats updated, bytes held). The
# context reads (log2(1 + total) - TOTALS_CENTRE) / TOTALS_SCALE: about -1 to 2 for this project's sets.
TOTAL_FEATURES = ("log_lookup_floats", "log_update_floats", "log_weight_bytes")
TOTALS_CENTRE, TOTALS_SCALE = 20.0, 8.0
# How the set context reads the mean shard code: "free" (an input like the rest), "none" (not at all: the
# count and totals alone), "banded" (a second network of the code adds to the log factors at most
# CODE_BAND either way, and to the overheads freely): see NeuralCostModel.fit.
CONTEXT_CODE_MODES = ("free", "none", "banded")
CODE_BAND = 0.5
OFFSET_LR_SCALE = 20.0  # the random sets' level offset learns this many times faster than the weights
# The set context is held within the range it took on the training sets, less this share of them at
# each end: the extremes are a handful of sets, and one outlier would license the extrapolation the
# bound is there to stop (see NeuralCostModel.fit).
CONTEXT_TRIM_PERCENT = 0.5
MAX_COMPONENTS = 8  # time components a shard may carry per head (``components``; 1: the committed recipe)


class _SetNet(nn.Module):
    """ms = factor(set) * sum_i t(shard_i) + overhead(set), for forward and backward.

    ``t`` is a per-shard time read off the shard's code (sum pooling: a rank's
    time grows with what it holds); the set context (mean code and log shard
    count, and with ``totals`` the set's total amounts) gives a multiplicative
    factor for what fusing the shards into one kernel changes, and a fixed
    overhead. The additive core is what lets the model extrapolate to more
    shards than it was trained on.

    With ``components`` K > 1 each shard's time is K parts per head and the
    context gives each summed part a factor of its own: ms = sum_k factor_k(set)
    * sum_i t_k(shard_i) + overhead(set). One factor slows every shard of a set
    alike; K of them let the set slow some kinds of work (rows that stay in
    cache when their table runs alone) more than others, and a rank is still
    the sum of its shards' codes and parts.
    """

    def __init__(self, n_features: int, hidden: int, code: int,
                 totals: tuple[np.ndarray, np.ndarray] | None = None, context_code: str = "free",
                 components: int = 1) -> None:
        super().__init__()
        self.code = code
        self.components = components
        self.time_width = 2 * components  # own-time parts per shard: K fwd, then K bwd; as many log factors
        self.context_code = context_code
        self.encoder = nn.Sequential(
            nn.Linear(n_features, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, code))
        self.shard_time = nn.Linear(code, self.time_width)
        # With ``totals`` (the feature scaling's mean and std), each code also carries the shard's raw
        # amounts of TOTAL_FEATURES, so a set's summed code holds its totals for the context to read.
        self.n_totals = len(TOTAL_FEATURES) if totals is not None else 0
        if totals is not None:
            idx = [FEATURE_NAMES.index(f) for f in TOTAL_FEATURES]
            self.register_buffer("total_mean", torch.as_tensor(np.asarray(totals[0])[idx], dtype=torch.float32))
            self.register_buffer("total_std", torch.as_tensor(np.asarray(totals[1])[idx], dtype=torch.float32))
            self.total_index = idx
        n_context = (code if context_code == "free" else 0) + 1 + self.n_totals
        n_out = self.time_width + 2  # log factors (fwd parts, bwd parts), log overheads (fwd, bwd)
        self.context = nn.Sequential(nn.Linear(n_context, hidden), nn.SiLU(), nn.Linear(hidden, n_out))
        if context_code == "banded":
            self.code_context = nn.Sequential(nn.Linear(code + 1 + self.n_totals, hidden), nn.SiLU(),
                                              nn.Linear(hidden, n_out))
        # The context's outputs (log factors, log overheads) are held within the range they took on
        # the training sets, once fitted (NeuralCostModel._bound_context); None while training.
        self.context_bounds: tuple[torch.Tensor, torch.Tensor] | None = None

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-shard codes ``[..., C]`` (``C`` learnt columns, then any raw totals) and per-shard times
        ``[..., 2K]`` (K parts fwd, then K bwd) for features ``[..., F]``."""
        codes = self.encoder(x)
        times = torch.exp(self.shard_time(codes).clamp(max=30.0))
        if self.n_totals:  # the log2 features back to amounts (floats looked up, updated; bytes held)
            codes = torch.cat([codes, torch.exp2(x[..., self.total_index] * self.total_std + self.total_mean)], dim=-1)
        return codes, times

    def context_input(self, code_sum: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """What the context can read: the mean learnt code, log2 of the shard count and, with totals, the
        set's totals on a log2 scale (``TOTALS_CENTRE``, ``TOTALS_SCALE``); ``context_code`` says which
        parts its networks take (:meth:`raw_context`)."""
        parts = [code_sum[:, :self.code] / count, torch.log2(count)]
        if self.n_totals:
            parts.append((torch.log2(1.0 + code_sum[:, self.code:]) - TOTALS_CENTRE) / TOTALS_SCALE)
        return torch.cat(parts, dim=1)

    def pooled(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Summed codes, summed shard times and sizes ``[N, 1]`` of padded sets ``x [N, S, F]``, ``mask [N, S]``."""
        codes, times = self.encode(x)
        m = mask.unsqueeze(-1)
        return (codes * m).sum(dim=1), (times * m).sum(dim=1), mask.sum(dim=1, keepdim=True)

    def raw_context(self, code_sum: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """The context's outputs ``[N, 2K + 2]`` (log factors of the fwd parts, of the bwd parts; log overhead
        fwd, bwd), unbounded."""
        inputs = self.context_input(code_sum, count.clamp(min=1.0))
        if self.context_code == "free":
            return self.context(inputs)
        out = self.context(inputs[:, self.code:])
        if self.context_code == "banded":
            z = self.code_context(inputs)
            k = self.time_width
            out = out + torch.cat([CODE_BAND * torch.tanh(z[:, :k]), z[:, k:]], dim=1)
        return out

    def combine(self, code_sum: torch.Tensor, time_sum: torch.Tensor, count: torch.Tensor,
                bounded: bool = True) -> torch.Tensor:
        """Log ms ``[N, 2]`` of sets given their summed codes, summed shard times and sizes ``[N, 1]``;
        ``bounded=False`` leaves the context unheld by ``context_bounds`` (a diagnostic)."""
        ctx = self.raw_context(code_sum, count)
        if bounded and self.context_bounds is not None:
            ctx = torch.clamp(ctx, *self.context_bounds)
        k = self.time_width
        log_factor, log_overhead = ctx[:, :k], ctx[:, k:]
        work = torch.log(time_sum + 1e-9) + log_factor
        if self.components > 1:  # each head's parts, each at its own factor, add
            work = torch.logsumexp(work.reshape(-1, 2, self.components), dim=2)
        return torch.logaddexp(work, log_overhead)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Log ms ``[N, 2]`` (fwd, bwd) for padded sets ``x [N, S, F]`` with ``mask [N, S]``."""
        return self.combine(*self.pooled(x, mask))


def check_context_code(context_code: str, context_totals: bool,
                       names: tuple[str, str] = ("context_code", "context_totals")) -> None:
    """Refuse a ``context_code`` that is no mode, or one that leaves the context without the totals (it
    would read little but the shard count); ``names`` are the two settings' names as the caller spells them."""
    code_name, totals_name = names
    if context_code not in CONTEXT_CODE_MODES:
        raise InputError(code_name, f"must be one of {', '.join(CONTEXT_CODE_MODES)}, got {context_code!r}",
                         "pick one of them")
    if context_code != "free" and not context_totals:
        raise InputError(code_name, f"a context of {context_code!r} code reads little but the shard count",
                         f"turn {totals_name} on, or keep {code_name} free")


_Layers = list[tuple[np.ndarray, np.ndarray]]  # a context network's linear layers: (weight.T, bias) each


def _numpy_layers(net: nn.Sequential) -> _Layers:
    """The two linear layers of a context network (linear, SiLU, linear), copied out as NumPy arrays."""
    return [(net[i].weight.detach().numpy().T.copy(), net[i].bias.detach().numpy().copy()) for i in (0, 2)]


def _mlp(x: np.ndarray, layers: _Layers) -> np.ndarray:
    """A context network (linear, SiLU, linear) in NumPy."""
    (w1, b1), (w2, b2) = layers
    h = x @ w1 + b1
    return (h / (1.0 + np.exp(-h))) @ w2 + b2


def batch_parts(sets: list[list[ShardSpec]]) -> tuple[list[list[ShardSpec]], np.ndarray]:
    """Each set cut into its shards of one batch size, and the index of the set each part comes from.

    FBGEMM fuses only shards fed the same batch into one op, so a rank holding data-parallel
    replicas (the local batch) beside sharded tables (the global batch) runs two ops, and its time
    is their sum: that is how the timer measures it (``kernel.RankOp``) and how TorchRec runs it
    (data-parallel tables get a lookup module of their own). Parts keep the order of their sets.
    """
    parts: list[list[ShardSpec]] = []
    owner: list[int] = []
    for i, s in enumerate(sets):
        for batch in sorted({x.batch_size for x in s}):
            parts.append([x for x in s if x.batch_size == batch])
            owner.append(i)
    return parts, np.asarray(owner, dtype=np.int64)


def _with_foreign_shard(x: torch.Tensor, mask: torch.Tensor, gen: torch.Generator
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each padded set of ``x [N, S, F]`` with one more shard, drawn from a random set of the batch
    (now and then itself: a duplicate shard is more work too)."""
    n = x.shape[0]
    donor = torch.randperm(n, generator=gen)
    counts = mask[donor].sum(dim=1)
    pick = (torch.rand(n, generator=gen) * counts).long().clamp(max=x.shape[1] - 1)
    extra = x[donor, pick].unsqueeze(1)
    return torch.cat([x, extra], dim=1), torch.cat([mask, torch.ones(n, 1)], dim=1)


def _parts_of(part_index: tuple[np.ndarray, np.ndarray], sets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The training rows (parts) of the sets ``sets``, given where each set's parts start and how many it has
    (``part_index``), and for each part the position in ``sets`` of its owner (None when every set is one part)."""
    first, n_parts = part_index
    counts = n_parts[sets]
    if (counts == 1).all():
        return torch.from_numpy(first[sets]), None
    start = np.repeat(first[sets], counts)
    step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return torch.from_numpy(start + step), torch.from_numpy(np.repeat(np.arange(len(sets)), counts))


def _pooled(part_log_ms: torch.Tensor, owner: torch.Tensor | None, n_sets: int) -> torch.Tensor:
    """Log ms ``[n_sets, 2]`` of sets from their parts' log ms: the parts' times add."""
    if owner is None:
        return part_log_ms
    return torch.log(torch.zeros(n_sets, 2).index_add_(0, owner, torch.exp(part_log_ms)))


class NeuralCostModel:
    """Predicts a rank's fused FBGEMM forward and backward ms from its shard specs.

    Parameters are validated at construction; ``fit`` returns ``self``.
    """

    def __init__(self, profile: str, hidden: int = 128, code: int = 64, epochs: int = 300,
                 batch_size: int = 256, lr: float = 2e-3, weight_decay: float = 1e-5,
                 seed: int = 0, monotone_weight: float = 10.0, group_weight: float = 1.0,
                 group_tilt: bool = True, random_level: bool = False, split_batches: bool = True,
                 context_totals: bool = False, decomp_weight: float = 1.0, context_code: str = "free",
                 huber_delta: float | None = None, components: int = 1) -> None:
        for name, v in (("hidden", hidden), ("code", code), ("epochs", epochs), ("batch_size", batch_size)):
            if not isinstance(v, int) or v <= 0:
                raise InputError(name, f"must be a positive integer, got {v!r}")
        if lr <= 0:
            raise InputError("lr", f"must be positive, got {lr!r}")
        for name, w in (("monotone_weight", monotone_weight), ("group_weight", group_weight),
                        ("decomp_weight", decomp_weight)):
            if w < 0:
                raise InputError(name, f"must be >= 0, got {w!r}")
        if huber_delta is not None and not huber_delta > 0:
            raise InputError("huber_delta", f"must be positive (a log-ms residual), got {huber_delta!r}",
                             "leave it unset for the squared loss")
        if not isinstance(components, int) or not 1 <= components <= MAX_COMPONENTS:
            raise InputError("components", f"must be an integer from 1 to {MAX_COMPONENTS}, got {components!r}",
                             "1 is the committed recipe")
        check_context_code(context_code, context_totals)
        self.profile = profile
        self.hidden, self.code, self.epochs = hidden, code, epochs
        self.batch_size, self.lr, self.weight_decay, self.seed = batch_size, lr, weight_decay, seed
        self.monotone_weight, self.group_weight, self.group_tilt = monotone_weight, group_weight, group_tilt
        self.decomp_weight = decomp_weight
        self.random_level = random_level
        self.split_batches = split_batches
        self.context_totals = context_totals
        self.context_code = context_code
        self.huber_delta = huber_delta
        self.components = components
        self.net: _SetNet | None = None
        # log ms (fwd, bwd) that random shard sets sit above the level predicted (a planner's ranks)
        self.random_offset = np.zeros(2, dtype=np.float32)
        # [2, 4]: the lowest and highest context outputs on the training sets (see fit); None: unbounded
        self.context_range: np.ndarray | None = None
        self.mean = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
        self.std = np.ones(len(FEATURE_NAMES), dtype=np.float32)
        self.metadata: dict[str, Any] = {}

    # ---- training ---------------------------------------------------------------------------
    def fit(self, sets: list[list[ShardSpec]], fwd_ms: np.ndarray, bwd_ms: np.ndarray,
            progress: bool = True, groups: np.ndarray | None = None,
            random_sets: np.ndarray | None = None,
            decompositions: tuple[list[list[ShardSpec]], np.ndarray] | None = None,
            init: "NeuralCostModel | None" = None) -> "NeuralCostModel":
        """Fit on measured sets. Besides the log-space MSE, every batch is also scored with one
        shard of another set added to each set; where that lowers the prediction, the squared
        log drop, times ``monotone_weight``, is added to the loss.

        Why: a fused kernel never gets faster for doing more work, but a free-form set model
        can learn otherwise off its training distribution, and a searcher finds such spots.
        (The model before this penalty priced a 134-lookup-per-sample table at 20.8 ms alone
        and at 7.4 ms with two tiny data-parallel replicas beside it; both measure ~15 ms.)
        Adding shards from other sets also mixes batch sizes, as data-parallel replicas do.

        ``groups`` (one int per set, -1 for none) marks sets whose times are known only relative
        to the other sets of their group: the ranks of one task's plans timed together, whose
        shared divisor sets the group's level but not the ratios within it. Their loss is the
        squared log error less its group mean (each step also takes whole groups, so that every
        group comes once an epoch), times ``group_weight``; the absolute loss skips them.

        With ``group_tilt`` the error is also taken less its group's straight-line trend in the
        log of the measured time: a busy neighbour on this VM does not slow every rank alike. On
        2026-11-22, with the reference at 3.9x quiet, stored ranks of 1.5-5 ms re-timed (divided
        alike) at 0.66x their labels, 4-12 ms at 0.53x and 20-45 ms at 0.38x: the short ones,
        whose data sit in the shared cache when the host is quiet, lost the most. A group timed
        then is tilted by size as well as shifted, and only what is left, the ratios of ranks of
        like size, is a label.

        With ``random_level``, the sets marked in ``random_sets`` (the random collector's shard
        sets) get a level of their own: a learnt log offset per head is added to their
        predictions in training, and :meth:`predict` leaves it out, so the model predicts at the
        level of the unmarked sets, whole ranks of real plans, which are what a searcher asks
        about. Random sets then teach how cost varies with the shards, and plan ranks the level.
        Why: the model trained without it (2026-11-22, kept under the profile's
        ``candidates/before-random-level/``) fits the random sets and the ranks of its training
        tasks, but ranks of tasks it has not seen measure about 4% slower than it says (median;
        held-out plan ranks -3.8%, sets larger than any in training -4%), while held-out random
        sets do not (+0.6%). With it: held-out plan ranks -3.2%, neighbour-calibrated ranks of unseen
        tasks -0.6% (`unseen-b`) and -0.0% (`unseen-a`).

        With ``split_batches`` a set is priced as the sum of its parts of one batch size
        (:func:`batch_parts`), each run through the network as a set of its own, which is how such a
        rank runs and is measured; the loss is on the set's total. Why: priced as one fused set, the
        data-parallel ranks of TorchRec's plans of unseen tasks were the model's worst misses
        (2026-11-23: up to 22% over the measurement), with one overhead and one fusion factor for
        what are two ops.

        With ``context_totals`` the set context also reads the set's totals of ``TOTAL_FEATURES``
        (floats looked up, floats updated, bytes held), not only its mean shard code and shard count:
        each shard's code carries its raw amounts beside the learnt ones, so a rank is still the sum
        of its shards' codes for the searchers' incremental use. Why: shards in one fused op slow one
        another through the cache by how much they touch together, which the mean of eight large
        shards does not tell from one. A candidate (2026-11-24, the profile's
        ``candidates/context-totals/``), not the committed recipe: ``docs/cost-model.md``, "Totals in
        the set context". ``context_code`` "none" (with totals) leaves the context the totals and the shard
        count, not the mean shard code: how much the shards slow one another is then a function of what
        they touch together; "banded" adds a second network of the mean code whose share of the log
        factors is held within ``CODE_BAND`` either way. Why: on sets heavier than nearly all trained on,
        the free context's factor climbs until the bound below stops it (the Xeon's larger sets' slowest
        fifth: +46% over without the bound), "none" climbs as far (+44%), "banded" much less (+13%).
        Candidates (session 40), not the committed recipe: ``docs/cost-model.md``, "The set context's bound".

        With ``huber_delta`` the labelled sets' log error is squared only up to that residual and
        counts linearly past it, so a label far off its like (a timing a busy neighbour slowed, which
        the reference's divisor did not take out) pulls the fit less. Why: on the Zen 4 guest's random
        sets of 2-5 ms the committed model's log error has a long tail of labels far above it (at 2-3
        ms: skew -1.4, the fit a median 8.7% over the labels and a mean 3.1%; ``bench/error_map.py``'s
        spread table), where a second timing of the same sets moves by about as much as the model
        errs (the nested guest's repeatability sets, 2-8 ms: the two timings' residuals correlate
        0.10). A candidate (session 81): ``docs/cost-model.md``, "A robust loss for noisy short sets".

        Once fitted, the set context's outputs (the log fusion factor and log overhead of each head)
        are held within the range they took on the training sets, less the outermost
        ``CONTEXT_TRIM_PERCENT`` at each end (``context_range``). Why: the context
        is a free-form MLP, and read off sets larger than any trained on it extrapolates the fusion
        factor without end, while the kernels' factor levels off once the set's data no longer fit in
        cache. On the Xeon host (2026-11-24), sets of 16-40 shards measured 1.73x and 1.83x the sum of
        their shards alone in their two slowest fifths, where the unbounded model said 1.71x and 2.59x
        (MAPE on those sets 15.4%; bounded 11.5%). The trim: retrained with session 31's targeted sets of
        hot tables, a few dozen training sets (random and targeted alike) took contexts far out, the
        untrimmed range let the larger sets' context go as far, and they went back to 15.4%; trimmed,
        9.7% (``docs/cost-model.md``, "Past the cache").

        ``decompositions`` (sets of one batch size, and their measured ratios ``[D, 2]``, fwd and bwd,
        of the set's time over the sum of its shards' times alone, timed in the same repetitions:
        :mod:`shardplan.cost.collect_decomp`) add the squared log error of the predicted ratio (the
        set whole over the sum of its shards each predicted alone), times ``decomp_weight``; every
        decomposition comes once an epoch. Why: no other label says how far a set sits over its
        shards alone without an hour's level in it, and that is what the model missed on the one
        TorchRec rank it left outside 15% on the Xeon (1.32-1.77x measured, 1.24x predicted). A
        candidate (2026-11-24, the Xeon profile's ``candidates/decompositions/``), not the committed
        recipe: the ratios move with the host's cache state, and learnt against labels taken in
        another they cost the larger sets (``docs/cost-model.md``, "Sets over their shards alone").

        With ``components`` K > 1 each shard's time is K parts per head, and the set context gives each
        summed part a factor of its own (``_SetNet``). Why: the Xeon's lasting misses on TorchRec's
        unseen ranks are ranks the kernel runs 1.3-1.6 times their shards alone, which the one factor
        prices at 1.0-1.3 (``bench/rank_parts.py``, session 88), and one factor slows a shard whose rows
        stay cached while its table runs alone as much as one whose rows never do. A candidate (session
        89): on the Xeon two parts fit as well as one and move those misses by 1-6 points, none inside
        15% (``docs/cost-model.md``, "Time in parts; many moderate tables").

        ``init`` (a fitted model of the same network shape) is where training starts: its weights, its
        feature scaling and its random sets' offset, in place of a seeded draw and this data's scaling.
        Where ``random_level`` is asked with no plan ranks among the sets, ``init``'s offset is kept as it
        is (it must have learnt one): a new host's random sets then teach the network at plan ranks' level.
        Why: a kind labelled on a few hundred sets (another optimizer, paired against a base profile's
        thousands: :mod:`.collect_paired`) shares most of how cost grows with the shards with its base,
        and learns from its own labels how it differs rather than all of it again.
        """
        if len(sets) != len(fwd_ms) or len(sets) != len(bwd_ms):
            raise InputError("fit", "sets, fwd_ms and bwd_ms must have the same length")
        groups = np.full(len(sets), -1) if groups is None else np.asarray(groups)
        if len(groups) != len(sets):
            raise InputError("groups", "must have one entry per set")
        marked = np.zeros(len(sets), bool) if random_sets is None else np.asarray(random_sets, bool)
        if len(marked) != len(sets):
            raise InputError("random_sets", "must have one entry per set")
        if decompositions is not None:
            if len(decompositions[0]) != len(decompositions[1]):
                raise InputError("decompositions", "must give one ratio pair per set")
            if any(len({x.batch_size for x in d}) != 1 for d in decompositions[0]):
                raise InputError("decompositions", "each set must be fed one batch size (one fused op)")
        # Without whole plan ranks nothing here pins the plan level (grouped sets teach ratios only); a start
        # model that learnt the offset on its own host lends it, held fixed: the new host's random sets then
        # train the network at that host's plan level, as far as the two hosts' offsets agree.
        carried = self.random_level and not (~marked & (groups < 0)).any()
        if carried and not (init is not None and init.random_level):
            raise InputError("random_sets", "random_level needs sets outside random_sets with absolute labels "
                             "(whole plan ranks) to set the level, or an init model that learnt it; add them or "
                             "train without random_level")
        torch.manual_seed(self.seed)
        gen = torch.Generator().manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        parts, owner = self.ops(sets)
        # parts come in set order: set i owns parts first[i] .. first[i] + n_parts[i] - 1
        first = np.searchsorted(owner, np.arange(len(sets)))
        n_parts = np.bincount(owner, minlength=len(sets))
        part_index = (first, n_parts)
        x, mask = set_features(parts)
        if init is None:
            flat = x[mask > 0]
            self.mean = flat.mean(axis=0)
            self.std = flat.std(axis=0) + 1e-6
        else:
            self._check_init(init)
            self.mean, self.std = init.mean.copy(), init.std.copy()
        x = (x - self.mean) * mask[..., None] / self.std
        y = np.log(np.stack([fwd_ms, bwd_ms], axis=1).clip(1e-3)).astype(np.float32)
        xt, mt, yt = torch.from_numpy(x), torch.from_numpy(mask), torch.from_numpy(y)
        self.net = self._new_net()
        offset = nn.Parameter(torch.zeros(2))
        if init is not None:
            self.net.load_state_dict(init.net.state_dict())
            offset.data = torch.from_numpy(init.random_offset.astype(np.float32).copy())
        shifted = torch.from_numpy((marked & self.random_level).astype(np.float32))[:, None]
        # The offset is one number per head that every random set pulls on: it takes larger steps than
        # the weights, or the network's own level moves to split the difference first.
        param_groups = [{"params": list(self.net.parameters()), "lr": self.lr}]
        if self.random_level and not carried:
            param_groups.append({"params": [offset], "lr": OFFSET_LR_SCALE * self.lr, "weight_decay": 0.0})
        opt = torch.optim.AdamW(param_groups, lr=self.lr, weight_decay=self.weight_decay)
        absolute = np.flatnonzero(groups < 0)
        group_ids = np.unique(groups[groups >= 0])
        members = {g: np.flatnonzero(groups == g) for g in group_ids}
        steps_per_epoch = max(1, -(-len(absolute) // self.batch_size))
        groups_per_step = -(-len(group_ids) // steps_per_epoch)  # every group once an epoch
        steps = self.epochs * steps_per_epoch
        decomp = self._decomposition_inputs(decompositions) if decompositions is not None else None
        decomps_per_step = 0 if decomp is None else -(-len(decompositions[1]) // steps_per_epoch)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[g["lr"] for g in param_groups], total_steps=steps)
        self.net.train()
        bar = tqdm(range(self.epochs), desc="train cost model", disable=not progress)
        for _ in bar:
            order = rng.permutation(absolute)
            group_order = list(rng.permutation(group_ids))
            # drawn only with decompositions, so a model without them trains exactly as before
            decomp_order = rng.permutation(len(decompositions[1])) if decomp is not None else None
            total = 0.0
            for k in range(0, len(order), self.batch_size):
                idx = torch.from_numpy(order[k:k + self.batch_size])
                part_idx, part_owner = _parts_of(part_index, idx.numpy())
                part_pred = self.net(xt[part_idx], mt[part_idx])
                pred = _pooled(part_pred, part_owner, len(idx))
                loss = self._absolute_loss(pred + shifted[idx] * offset, yt[idx])
                if self.monotone_weight > 0:
                    grown = self.net(*_with_foreign_shard(xt[part_idx], mt[part_idx], gen))
                    loss = loss + self.monotone_weight * torch.relu(part_pred - grown).square().mean()
                if self.group_weight > 0 and group_order:
                    step_groups = [group_order.pop() for _ in range(min(groups_per_step, len(group_order)))]
                    loss = loss + self.group_weight * self._group_loss(xt, mt, yt, [members[g] for g in step_groups],
                                                                       part_index)
                if decomp is not None and self.decomp_weight > 0:
                    step_decomps = decomp_order[k // self.batch_size * decomps_per_step:][:decomps_per_step]
                    if len(step_decomps):
                        loss = loss + self.decomp_weight * self._decomposition_loss(decomp, step_decomps)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                total += loss.item() * len(idx)
            bar.set_postfix(loss=f"{total / len(order):.4f}")
        self.net.eval()
        self.random_offset = offset.detach().numpy().copy()
        self._bound_context(xt, mt)
        return self

    def _absolute_loss(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Log-space loss of labelled sets: squared, or with ``huber_delta`` squared up to that residual
        and linear past it (:meth:`fit`)."""
        if self.huber_delta is None:
            return nn.functional.mse_loss(pred, target)
        # doubled: torch's Huber is half the square below delta, so residuals under delta cost what MSE charges
        return nn.functional.huber_loss(pred, target, delta=self.huber_delta) * 2.0

    def _check_init(self, init: "NeuralCostModel") -> None:
        """``init`` must be fitted and of this model's network shape and inputs, or its weights mean nothing here."""
        if init.net is None:
            raise InputError("init", "is not a fitted model", "fit or load it first")
        for name in ("hidden", "code", "split_batches", "context_totals", "context_code", "components"):
            if getattr(init, name) != getattr(self, name):
                raise InputError("init", f"has {name}={getattr(init, name)!r}, this model {getattr(self, name)!r}",
                                 "start from a model trained by the same recipe")

    def _decomposition_inputs(self, decompositions: tuple[list[list[ShardSpec]], np.ndarray]
                              ) -> tuple[torch.Tensor, ...]:
        """The tensors :meth:`_decomposition_loss` reads: each set whole (scaled features, mask), each
        shard alone as a set of one (features, mask), where each set's shards start and how many it
        has, and the log measured ratios."""
        sets, ratios = decompositions
        scale = lambda x, m: torch.from_numpy((x - self.mean) * m[..., None] / self.std)  # noqa: E731
        wx, wm = set_features(sets)
        sx, sm = set_features([[s] for d in sets for s in d])
        counts = np.array([len(d) for d in sets])
        first = np.cumsum(counts) - counts
        log_ratio = torch.from_numpy(np.log(np.asarray(ratios, dtype=np.float32)))
        return (scale(wx, wm), torch.from_numpy(wm), scale(sx, sm), torch.from_numpy(sm), first, counts, log_ratio)

    def _decomposition_loss(self, decomp: tuple[torch.Tensor, ...], idx: np.ndarray) -> torch.Tensor:
        """Squared error of the predicted log ratio (set whole over the sum of its shards alone) on the
        decompositions ``idx``, scaled as the absolute loss is (per set of a batch)."""
        wx, wm, sx, sm, first, counts, log_ratio = decomp
        rows, owner = _parts_of((first, counts), idx)
        whole = self.net(wx[idx], wm[idx])
        alone = _pooled(self.net(sx[rows], sm[rows]), owner, len(idx))
        err = whole - alone - log_ratio[idx]
        return err.square().sum() / (err.shape[1] * self.batch_size)

    def _bound_context(self, x: torch.Tensor, mask: torch.Tensor, chunk: int = 4096) -> None:
        """Set ``context_range`` to the range the context outputs took over the fitted sets' parts
        (scaled features ``x [N, S, F]``, ``mask [N, S]``), less ``CONTEXT_TRIM_PERCENT`` at each end,
        and hold the context within it from now on."""
        assert self.net is not None
        self.net.context_bounds = None
        outputs = []
        with torch.no_grad():
            for k in range(0, len(x), chunk):
                code_sum, _, count = self.net.pooled(x[k:k + chunk], mask[k:k + chunk])
                outputs.append(self.net.raw_context(code_sum, count)[count[:, 0] > 0].numpy())
        ctx = np.concatenate(outputs)
        self._set_context_range(np.percentile(ctx, [CONTEXT_TRIM_PERCENT, 100.0 - CONTEXT_TRIM_PERCENT], axis=0))

    def _set_context_range(self, bounds: np.ndarray | None) -> None:
        assert self.net is not None
        self.context_range = None if bounds is None else np.asarray(bounds, dtype=np.float32)
        self.net.context_bounds = None if bounds is None else tuple(torch.from_numpy(b) for b in self.context_range)

    def _new_net(self) -> _SetNet:
        return _SetNet(len(FEATURE_NAMES), self.hidden, self.code,
                       (self.mean, self.std) if self.context_totals else None, self.context_code, self.components)

    @property
    def code_width(self) -> int:
        """Columns of :meth:`encode_shards`' codes (the learnt code, then any raw totals)."""
        return self.code + (len(TOTAL_FEATURES) if self.context_totals else 0)

    @property
    def time_width(self) -> int:
        """Columns of :meth:`encode_shards`' own times: ``components`` parts of the forward, then of the
        backward."""
        return 2 * self.components

    def ops(self, sets: list[list[ShardSpec]]) -> tuple[list[list[ShardSpec]], np.ndarray]:
        """The sets as the model prices them, one op at a time, and the set each op comes from: their
        one-batch parts with ``split_batches`` (:func:`batch_parts`), else each set whole. A set's price is
        the sum of its ops' prices."""
        return batch_parts(sets) if self.split_batches else (sets, np.arange(len(sets)))

    def network_inputs(self, sets: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sets as the fitted network reads them: their ops' (:meth:`ops`) padded features scaled
        by the stored feature scaling, the mask, and the set each part comes from."""
        parts, owner = self.ops(sets)
        x, mask = set_features(parts)
        return (x - self.mean) * mask[..., None] / self.std, mask, owner

    def _group_loss(self, xt: torch.Tensor, mt: torch.Tensor, yt: torch.Tensor, groups: list[np.ndarray],
                    part_index: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
        """Squared log error of the sets of ``groups``, each less its group's mean error, summed and
        scaled as the absolute loss is (per set of a batch), so a grouped set weighs like one there."""
        idx = np.concatenate(groups)
        part_idx, part_owner = _parts_of(part_index, idx)
        idx = torch.from_numpy(idx)
        err = _pooled(self.net(xt[part_idx], mt[part_idx]), part_owner, len(idx)) - yt[idx]
        sizes = torch.tensor([len(g) for g in groups])
        owner = torch.repeat_interleave(torch.arange(len(groups)), sizes)
        n = len(groups)
        mean_of = lambda v: torch.zeros(n, 2).index_add_(0, owner, v) / sizes[:, None]  # noqa: E731
        err = err - mean_of(err)[owner]
        if self.group_tilt:  # less the least-squares line in the measured log time, per head
            size = yt[idx] - mean_of(yt[idx])[owner]
            slope = mean_of(size * err) / (mean_of(size.square()) + 1e-6)
            err = err - slope[owner] * size
        return err.square().sum() / (err.shape[1] * self.batch_size)

    # ---- inference --------------------------------------------------------------------------
    def _pooled_sets(self, sets: list[list[ShardSpec]]
                     ) -> tuple[list[int], np.ndarray, tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]:
        """What :meth:`predict` and :meth:`on_bound` read: the indices of the non-empty sets, the set each
        network part comes from, and the parts' pooled (summed codes, summed shard times, sizes)."""
        if self.net is None:
            raise RuntimeError("the model is not fitted; call fit() or load()")
        nonempty = [i for i, s in enumerate(sets) if s]
        if not nonempty:
            return nonempty, np.zeros(0, dtype=np.int64), None
        x, mask, owner = self.network_inputs([sets[i] for i in nonempty])
        with torch.no_grad():
            return nonempty, owner, self.net.pooled(torch.from_numpy(x), torch.from_numpy(mask))

    def predict(self, sets: list[list[ShardSpec]], random_level: bool = False,
                bounded: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward ms for each shard set (0 for an empty set); with ``random_level``, at
        the level learnt for the random collector's sets (see :meth:`fit`) instead of plan ranks'.
        ``bounded=False`` lets the set context leave ``context_range`` (a diagnostic: what the
        network alone says of a set unlike the training sets)."""
        out_f = np.zeros(len(sets))
        out_b = np.zeros(len(sets))
        nonempty, owner, pooled = self._pooled_sets(sets)
        if not nonempty:
            return out_f, out_b
        with torch.no_grad():
            y = self.net.combine(*pooled, bounded=bounded).numpy()
        ms = np.zeros((len(nonempty), 2))
        np.add.at(ms, owner, np.exp(y))
        ms *= np.exp(self.random_offset if random_level else 0.0)
        out_f[nonempty] = ms[:, 0]
        out_b[nonempty] = ms[:, 1]
        return out_f, out_b

    def on_bound(self, sets: list[list[ShardSpec]]) -> np.ndarray:
        """``[N, 2]`` bools: whether the set context's factor (fwd, bwd) of any of each set's ops lies
        outside ``context_range``, so that the bound, not the network, sets its price there."""
        out = np.zeros((len(sets), 2), bool)
        nonempty, owner, pooled = self._pooled_sets(sets)
        if not nonempty or self.context_range is None:
            return out
        code_sum, _, count = pooled
        k = self.time_width
        with torch.no_grad():
            factor = self.net.raw_context(code_sum, count).numpy()[:, :k]
        outside = (factor < self.context_range[0, :k]) | (factor > self.context_range[1, :k])
        outside = outside.reshape(-1, 2, self.components).any(axis=2)  # any part of each head
        hit = np.zeros((len(nonempty), 2), bool)
        np.logical_or.at(hit, owner, outside)
        out[nonempty] = hit
        return out

    # ---- incremental use (search) -----------------------------------------------------------
    def encode_shards(self, specs: list[ShardSpec]) -> tuple[np.ndarray, np.ndarray]:
        """Codes ``[n, C]`` and own times ``[n, 2K]`` (:attr:`time_width`) of shards; a rank is the sum of
        its shards' rows.

        With :meth:`combine`, a searcher scores "rank r plus shard s" by adding
        two vectors instead of re-running the model on the whole set. With
        ``split_batches`` only shards of one batch size may be summed into one set;
        the rest of a rank is priced apart (see ``Placer.fixed_sums``).
        """
        if self.net is None:
            raise RuntimeError("the model is not fitted; call fit() or load()")
        if not specs:
            return np.zeros((0, self.code_width), np.float32), np.zeros((0, self.time_width), np.float32)
        x, _ = set_features([specs])
        x = (x[0] - self.mean) / self.std
        with torch.no_grad():
            codes, times = self.net.encode(torch.from_numpy(x))
        return codes.numpy(), times.numpy()

    def combine(self, code_sum: np.ndarray, time_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Forward and backward ms ``[m, 2]`` of ``m`` sets from their sums (0 for empty sets).

        The same arithmetic as ``_SetNet.combine``, in NumPy: searchers call this
        tens of thousands of times on a handful of rows, where torch's per-call
        overhead (about 0.1 ms) is most of the cost.
        """
        context, code_context = self._context_weights()
        count = np.asarray(count, dtype=np.float32).reshape(-1, 1)
        n = np.maximum(count, 1.0)
        code_sum = np.asarray(code_sum, np.float32)
        parts = [code_sum[:, :self.code] / n, np.log2(n)]
        if self.context_totals:
            # A searcher's sums add and subtract shards' raw amounts in float32: a rank it empties can
            # keep a small negative remainder (-32 bytes seen), which must not reach the log.
            totals = np.maximum(code_sum[:, self.code:], 0.0)
            parts.append((np.log2(1.0 + totals) - TOTALS_CENTRE) / TOTALS_SCALE)
        inputs = np.concatenate(parts, axis=1)
        ctx = _mlp(inputs if self.context_code == "free" else inputs[:, self.code:], context)
        k = self.time_width
        if self.context_code == "banded":
            z = _mlp(inputs, code_context)
            ctx = ctx + np.concatenate([CODE_BAND * np.tanh(z[:, :k]), z[:, k:]], axis=1)
        if self.context_range is not None:
            ctx = np.clip(ctx, self.context_range[0], self.context_range[1])
        work = np.log(np.maximum(np.asarray(time_sum, np.float32), 0.0) + 1e-9) + ctx[:, :k]
        if self.components > 1:
            work = np.logaddexp.reduce(work.reshape(-1, 2, self.components), axis=2)
        y = np.logaddexp(work, ctx[:, k:])
        return np.where(count > 0, np.exp(y), 0.0)

    def _context_weights(self) -> tuple[_Layers, _Layers]:
        """The context network's layers and the banded code network's (empty unless "banded"), as
        NumPy ``(weight.T, bias)`` pairs, cached per fitted network."""
        if self.net is None:
            raise RuntimeError("the model is not fitted; call fit() or load()")
        cached = getattr(self, "_context_np", None)
        if cached is None or cached[0] is not self.net:
            banded = _numpy_layers(self.net.code_context) if self.context_code == "banded" else []
            cached = self._context_np = (self.net, (_numpy_layers(self.net.context), banded))
        return cached[1]

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path: str | Path, metadata: dict[str, Any] | None = None) -> None:
        if self.net is None:
            raise RuntimeError("nothing to save: the model is not fitted")
        self.metadata = {**self.metadata, **(metadata or {})}
        state = {
            "format": MODEL_FORMAT, "profile": self.profile, "feature_names": list(FEATURE_NAMES),
            "hyper": {"hidden": self.hidden, "code": self.code, "epochs": self.epochs,
                      "batch_size": self.batch_size, "lr": self.lr,
                      "weight_decay": self.weight_decay, "seed": self.seed,
                      "monotone_weight": self.monotone_weight, "group_weight": self.group_weight,
                      "group_tilt": self.group_tilt, "random_level": self.random_level,
                      "split_batches": self.split_batches, "context_totals": self.context_totals,
                      "decomp_weight": self.decomp_weight, "context_code": self.context_code,
                      "huber_delta": self.huber_delta, "components": self.components},
            "mean": self.mean.tolist(), "std": self.std.tolist(), "random_offset": self.random_offset.tolist(),
            "context_range": None if self.context_range is None else self.context_range.tolist(),
            "state_dict": {k: v.tolist() for k, v in self.net.state_dict().items()},
            "metadata": {"saved": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                         **self.metadata},
        }
        write_text_atomic(path, json.dumps(state))

    @classmethod
    def load(cls, path: str | Path, profile: str | None = None) -> "NeuralCostModel":
        """Load a model file; ``profile``, when given, must match the file's (never mixed silently)."""
        path = Path(path)
        try:
            state = json.loads(path.read_text())
            if state.get("format") != MODEL_FORMAT:
                raise ValueError(f"format is {state.get('format')!r}, expected {MODEL_FORMAT!r}")
            if state["feature_names"] != list(FEATURE_NAMES):
                raise ValueError("its features differ from this shardplan version's")
            # files written before group_tilt or split_batches existed were trained without them
            model = cls(profile=state["profile"], **{"group_tilt": False, "split_batches": False, **state["hyper"]})
            model.mean = np.asarray(state["mean"], dtype=np.float32)
            model.std = np.asarray(state["std"], dtype=np.float32)
            model.random_offset = np.asarray(state.get("random_offset", [0.0, 0.0]), dtype=np.float32)
            model.net = model._new_net()
            model.net.load_state_dict({k: torch.tensor(v) for k, v in state["state_dict"].items()})
            model.net.eval()
            # files written before the bound existed have none: their context is unbounded, as trained
            model._set_context_range(state.get("context_range"))
            model.metadata = state.get("metadata", {})
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
            raise InputError(str(path), f"not a usable compute-cost model: {e}",
                             "retrain it with `shardplan train`") from None
        if profile is not None and model.profile != profile:
            raise InputError(str(path), f"was trained for profile {model.profile!r}, not {profile!r}",
                             "use the model of the profile you plan for")
        return model
