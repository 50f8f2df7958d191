"""The reinforcement-learning searcher (``rl``): a placement policy trained against the cost model.

As in AutoShard (KDD'22) and DreamShard (NeurIPS'22), the policy never touches
the hardware while it learns: episodes run in :class:`~shardplan.search.rl_env.PlacementEnv`,
whose costs come from the learned cost model. The network scores every rank
from its feature row with a shared MLP plus a mean-pooled context (a DeepSets
encoder), so it takes any number of ranks and, placing one table per step,
any number of tables. Training is REINFORCE with a shared baseline: each task
is rolled out ``rollouts`` times and each rollout's advantage is its reward
minus their mean (POMO's baseline). Training tasks come from one half of the
Meta-like pool (even table indices); the other half is kept for evaluation.

Planning (``--searcher rl``) decodes greedily and, with ``samples > 0``, also
samples that many plans, each refined by the grid search's local improvement,
keeping the best by predicted cost. A 60-table task is one forward pass per
table. This runs once per kind of episode: on whole tables, and with the hot
tables cut into column blocks first (the split step, :data:`SPLIT_CHOICES`);
where some tables are much wider than a rank's share of the columns, each
again with those cut too (:func:`~.neuroshard.wide_split_state`); and, where
some hot table may go by rows, with the hot tables spread row-wise (over
several hosts, table-row-wise on one host's ranks;
:func:`~.neuroshard.hot_spread_state`). Each kind's best plan is finished by
the pairwise polish (:func:`~.polish.polish`) and the cheapest polished plan
by predicted cost wins. Training episodes see the split choices alone: trained on every kind in
turn, the ``cpu-2c-nested`` policy planned unseen tables at the same predicted cost (docs/benchmark.md,
"Session 60").
"""
from __future__ import annotations

import datetime as _dt
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from ..cost.estimator import PlanEstimator
from ..cost.profiles import get_profile
from ..domain import TableSharding, Task
from ..errors import InfeasibleError, InputError
from ..formats import write_text_atomic
from .base import Searcher, register
from .neuroshard import HOT_SHARE, _require_incremental, wide_split_state
from .placer import Placer
from .polish import cheapest_first, polish
from .rl_env import RANK_FEATURES, PlacementEnv

POLICY_FORMAT = "shardplan/rl-policy@1"
# The split step's choices, tried in turn: whole tables, and hot tables cut into column blocks.
# Neither wins everywhere (splitting adds per-block lookup work), so the cost model decides per task.
SPLIT_CHOICES: tuple[float | None, ...] = (None, HOT_SHARE)


class PolicyNet(nn.Module):
    """Logits over ranks from per-rank features ``[world, F]`` (permutation-equivariant in ranks)."""

    def __init__(self, n_features: int = len(RANK_FEATURES), hidden: int = 64) -> None:
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(n_features, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.phi(x)
        ctx = (h * mask[:, None]).sum(0, keepdim=True) / mask.sum().clamp(min=1)
        logits = self.head(torch.cat([h, ctx.expand_as(h)], dim=1)).squeeze(1)
        return logits.masked_fill(~mask, float("-inf"))


def rollout(env: PlacementEnv, net: PolicyNet, mode: str, rng: np.random.Generator | None = None
            ) -> torch.Tensor | None:
    """Run one episode: ``greedy`` (argmax), ``sample`` (no gradient) or ``train`` (returns Σ log π).
    The placement is left in ``env`` (its cost: ``env.plan_cost()``)."""
    env.reset()
    logp = []
    while not env.done:
        feats, mask = env.observe()
        with torch.set_grad_enabled(mode == "train"):
            logits = net(torch.from_numpy(feats), torch.from_numpy(mask))
        if mode == "greedy":
            a = int(torch.argmax(logits))
        else:
            p = torch.softmax(logits, 0)
            a = int(rng.choice(len(p), p=p.detach().double().numpy() / float(p.detach().double().sum())))
            if mode == "train":
                logp.append(torch.log(p[a] + 1e-12))
        env.step(a)
    return torch.stack(logp).sum() if logp else None


def save_policy(net: PolicyNet, path: Path, metadata: dict[str, Any]) -> None:
    state = {"format": POLICY_FORMAT, "features": list(RANK_FEATURES), "hidden": net.head[0].out_features,
             "state_dict": {k: v.tolist() for k, v in net.state_dict().items()}, "metadata": metadata}
    write_text_atomic(path, json.dumps(state))


@lru_cache(maxsize=4)
def _read_policy(path: str, mtime_ns: int) -> tuple[PolicyNet, dict[str, Any]]:
    """The parsed policy file, once per file version (planning would otherwise re-read it every call)."""
    return load_policy(Path(path))


def load_policy(path: Path, profile: str | None = None) -> tuple[PolicyNet, dict[str, Any]]:
    try:
        state = json.loads(Path(path).read_text())
        if state.get("format") != POLICY_FORMAT:
            raise ValueError(f"format is {state.get('format')!r}, expected {POLICY_FORMAT!r}")
        if state["features"] != list(RANK_FEATURES):
            raise ValueError("its features differ from this shardplan version's")
        net = PolicyNet(len(RANK_FEATURES), state["hidden"])
        net.load_state_dict({k: torch.tensor(v) for k, v in state["state_dict"].items()})
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        raise InputError(str(path), f"not a usable RL policy: {e}",
                         "retrain it with `shardplan train-policy`") from None
    meta = state.get("metadata", {})
    if profile is not None:
        _check_profile(path, meta, profile)
    net.eval()
    return net, meta


def _check_profile(path: Path, meta: dict[str, Any], profile: str) -> None:
    if meta.get("profile") != profile:
        raise InputError(str(path), f"was trained for profile {meta.get('profile')!r}, not {profile!r}",
                         "train a policy for this profile with `shardplan train-policy`")


def episode_kinds(task: Task, estimator: PlanEstimator, placer: Placer) -> list[PlacementEnv]:
    """The task's episodes, one per distinct way of cutting it into units: each split choice; each again
    with the tables much wider than a rank's column share cut, where that cuts something; and, where
    some hot table can go by rows, the hot tables spread so (with the wide cut too, where it cuts
    something). Column blocks leave every id's lookups on each block's rank, which no cut spreads
    (gpu-multihost-00's 200-row table of pooling 150). Planning tries every kind; ``placer`` is the
    task's one, shared by the episodes."""
    envs = [PlacementEnv(task, estimator, hot_share, placer) for hot_share in SPLIT_CHOICES]
    envs += [PlacementEnv(task, estimator, hot_share, placer, wide=True)
             for hot_share, e in zip(SPLIT_CHOICES, envs) if wide_split_state(task, e.state) != e.state]
    spread = PlacementEnv(task, estimator, HOT_SHARE, placer, spread=True)
    if spread.state != envs[SPLIT_CHOICES.index(HOT_SHARE)].state:
        envs.append(spread)
        if wide_split_state(task, spread.state) != spread.state:
            envs.append(PlacementEnv(task, estimator, HOT_SHARE, placer, wide=True, spread=True))
    return envs


@register
class RLSearcher(Searcher):
    name = "rl"
    description = ("placement policy trained by REINFORCE against the learned cost model (DreamShard-style); "
                   "greedy decoding plus sampled plans, best by predicted cost, locally polished")

    def __init__(self, samples: int = 8, policy_path: str | Path | None = None, pairwise_polish: bool = True,
                 sharding_types: Iterable[str] | None = None) -> None:
        if samples < 0:
            raise InputError("samples", f"must be >= 0, got {samples}")
        super().__init__(sharding_types)
        self.samples, self.policy_path, self.pairwise_polish = samples, policy_path, pairwise_polish

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        _require_incremental(estimator)
        path = Path(self.policy_path) if self.policy_path else get_profile(estimator.profile).dir / "rl-policy.json"
        if not path.exists():
            raise InputError(str(path), "no RL policy for this profile",
                             f"run `shardplan train-policy --profile {estimator.profile}`")
        net, meta = _read_policy(str(path), path.stat().st_mtime_ns)
        _check_profile(path, meta, estimator.profile)
        placer = Placer(task, estimator)
        bests = [b for b in (self._best(env, net, seed) for env in episode_kinds(task, estimator, placer))
                 if b is not None]
        if not bests:
            raise InfeasibleError("task", f"the policy's plans ({1 + self.samples}) all overflow a rank's memory",
                                  "use a packing searcher (neuroshard, greedy-size) or raise memory_per_rank_gb")
        if not self.pairwise_polish:
            return min(bests, key=lambda b: b[0])[1]
        # Each episode kind's best is polished before they are compared: the polish moves a plan more
        # than the cut does, and the kind that comes cheapest unpolished is often not the cheapest
        # polished (gpu-multihost-00: 3.99 ms from whole tables, 2.66 from the hot ones cut, which came
        # 4.05 unpolished). A tie keeps the earlier kind.
        return cheapest_first(task, estimator, [polish(task, estimator, b[1], placer) for b in bests])[0]

    def _best(self, env: PlacementEnv, net: PolicyNet, seed: int) -> tuple[float, list[TableSharding]] | None:
        """The policy's best plan in ``env`` (greedy decoding and ``samples`` sampled, each refined), by
        the episode's predicted cost; None where every one overflows a rank's memory."""
        best: tuple[float, list[TableSharding]] | None = None
        rng = np.random.default_rng(seed)
        for k in range(1 + self.samples):
            rollout(env, net, "greedy" if k == 0 else "sample", rng)
            if env.overflowed:
                continue
            env.refine()
            cost = env.plan_cost()
            if best is None or cost < best[0]:
                best = (cost, env.tables())
        return best


def train_policy(estimator: PlanEstimator, out: Path, updates: int = 300, tasks_per_update: int = 8,
                 rollouts: int = 4, lr: float = 1e-3, seed: int = 0, progress: bool = True,
                 checkpoint_every: int = 20) -> dict[str, Any]:
    """REINFORCE on random tasks from the training half of the Meta-like pool, trained with the optimizer and
    weight type ``estimator`` prices; resumable from ``out``.ckpt."""
    from ..pools import load_pool
    from ..taskgen import TASK_RECIPE, generate_task

    for name, v in (("updates", updates), ("tasks_per_update", tasks_per_update), ("rollouts", rollouts)):
        if not isinstance(v, int) or v < 1:  # a policy saved after no update would be an untrained one
            raise InputError(name, f"must be a positive integer, got {v!r}")
    profile = get_profile(estimator.profile)
    pool = load_pool("meta_synthetic")
    train_pool = pool[0::2]  # even indices; the odd half is for evaluating transfer
    torch.manual_seed(seed)
    net = PolicyNet()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    ckpt = out.with_suffix(".ckpt")
    # A checkpoint resumes only the run that wrote it: same cost model, settings, split step and tasks.
    config = {"cost_model": estimator.compute_name, "tasks_per_update": tasks_per_update, "rollouts": rollouts,
              "lr": lr, "seed": seed, "split_choices": list(SPLIT_CHOICES), "task_recipe": TASK_RECIPE}
    start, history = 0, []
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        if state.get("config") == config:
            net.load_state_dict(state["net"])
            opt.load_state_dict(state["opt"])
            start, history = state["update"], state["history"]
        elif progress:
            print(f"{ckpt}: written by another run ({state.get('config')}); starting afresh")
    bar = tqdm(range(start, updates), desc="train rl policy", initial=start, total=updates, disable=not progress)
    for u in bar:
        rng = np.random.default_rng([seed, u])  # per update, so a resumed run draws what an unbroken one would
        loss = torch.zeros(())
        ratios = []
        for k in range(tasks_per_update):
            task = generate_task(rng, train_pool, f"rl-train-{u}-{k}", profile, num_tables=(10, 60),
                                 optimizer=estimator.optimizers[0], dtype=estimator.dtypes[0])  # what it prices
            try:
                env = PlacementEnv(task, estimator, SPLIT_CHOICES[k % len(SPLIT_CHOICES)])
            except InputError:
                continue
            lower = env.scale  # sum of solo predicted costs / ranks: no plan's compute is much below it
            results = [(lp, env.plan_cost()) for lp in (rollout(env, net, "train", rng) for _ in range(rollouts))]
            rewards = torch.tensor([-c / lower for _, c in results])
            adv = rewards - rewards.mean()
            gain = sum(a * lp for a, (lp, _) in zip(adv, results) if lp is not None)
            loss = loss - gain / (rollouts * tasks_per_update)
            ratios.append(float(-rewards.mean()))
        opt.zero_grad()
        if loss.requires_grad:
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        history.append(float(np.mean(ratios)) if ratios else float("nan"))
        bar.set_postfix(cost_over_bound=f"{history[-1]:.3f}")
        if (u + 1) % checkpoint_every == 0 or u + 1 == updates:
            torch.save({"net": net.state_dict(), "opt": opt.state_dict(), "update": u + 1, "history": history,
                        "config": config}, ckpt)
    meta = {"profile": profile.name, "cost_model": estimator.compute_name, "updates": updates,
            "tasks_per_update": tasks_per_update, "rollouts": rollouts, "lr": lr, "seed": seed,
            "train_pool": "meta_synthetic, even table indices (odd half held out)",
            "cost_over_bound_first_last": [round(float(np.mean(history[:10])), 4),
                                           round(float(np.mean(history[-10:])), 4)],
            "command": f"shardplan train-policy --profile {profile.name} --updates {updates} --seed {seed}",
            "date": _dt.date.today().isoformat()}
    save_policy(net, out, meta)
    return meta
