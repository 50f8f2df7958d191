"""Fine-tune a compute model on one collection of plan groups: the day's rank-to-rank structure.

A plan group's labels are the ratios of its ranks (one divisor per task), and
how those ratios come out moves from day to day on this VM by more than they
move within a day (``bench/plan_group_drift.py``). This script starts from a
model (default: the profile's committed one) and takes ``--steps`` full-batch
Adam steps on the plan-group loss of one collection (``--round`` of
``--groups``; the recipe's group loss, tilt included), while anchoring the
model to its own predictions on a fixed sample of its training sets (random
sets, plan ranks, plan groups) so the level and everything else stay where
they were. Writes a candidate model file; it is judged by
``bench/noise_decomposition.py --model`` (offline, on the bench's measured
ranks) and ``bench/model_ab.py`` (measured).

    .venv/bin/python bench/finetune_groups.py --groups data/profiles/cpu-2c/compute-plan-groups-round3-4.parquet \\
      --round 4 --out data/profiles/cpu-2c/candidates/day-finetune/compute-model.json
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from shardplan.argtypes import at_least
from shardplan.cost.model import NeuralCostModel, _parts_of, _pooled
from shardplan.cost.profiles import get_profile
from shardplan.cost.specs import ShardSpec
from shardplan.cost.train import load_sets
from shardplan.errors import InputError, exit_status

# sets drawn from each training file for the anchor (file name, how many, load_sets' source filter)
ANCHOR = (("compute.parquet", 1500, None), ("compute-ranks.parquet", 500, "plan-rank"),
          ("compute-plan-groups.parquet", 500, None))


class _Batch:
    """Sets as the model's network takes them: normalised padded features, mask and part index."""

    def __init__(self, model: NeuralCostModel, sets: list[list[ShardSpec]]) -> None:
        x, mask, owner = model.network_inputs(sets)
        self.index = (np.searchsorted(owner, np.arange(len(sets))), np.bincount(owner, minlength=len(sets)))
        self.x, self.mask = torch.from_numpy(x), torch.from_numpy(mask)
        self.n = len(sets)

    def log_ms(self, model: NeuralCostModel) -> torch.Tensor:
        """The model's log (fwd, bwd) ms of every set."""
        part_idx, part_owner = _parts_of(self.index, np.arange(self.n))
        return _pooled(model.net(self.x[part_idx], self.mask[part_idx]), part_owner, self.n)


def finetune(model: NeuralCostModel, sets: list[list[ShardSpec]], fwd: np.ndarray, bwd: np.ndarray,
             groups: np.ndarray, anchor_sets: list[list[ShardSpec]], steps: int, lr: float,
             anchor_weight: float, seed: int = 0, log: Callable[[str], None] = print) -> NeuralCostModel:
    """``model`` after ``steps`` Adam steps on the group loss of ``sets`` (one group id per set) plus
    ``anchor_weight`` x the mean squared log change of its predictions on ``anchor_sets``."""
    torch.manual_seed(seed)
    target = _Batch(model, sets)
    anchor = _Batch(model, anchor_sets)
    y = torch.from_numpy(np.log(np.stack([fwd, bwd], axis=1)).astype(np.float32))
    with torch.no_grad():
        before = anchor.log_ms(model)
    members = [np.flatnonzero(groups == g) for g in np.unique(groups)]
    opt = torch.optim.Adam(model.net.parameters(), lr=lr)
    model.net.train()
    for step in range(steps):
        # _group_loss scales as if the groups were one training batch; over all of them it is a mean
        group_loss = model._group_loss(target.x, target.mask, y, members, target.index) * model.batch_size / len(sets)
        drift = (anchor.log_ms(model) - before).square().mean()
        loss = group_loss + anchor_weight * drift
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"step {step}: group loss {group_loss.item():.5f}, anchor drift {drift.item():.6f}")
    model.net.eval()
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=Path, required=True, help="plan-group parquet (shardplan collect ranks --visits)")
    ap.add_argument("--round", type=at_least(0), help="only this collection round of the file")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--model", type=Path, help="model to start from (default: the profile's committed one)")
    ap.add_argument("--steps", type=at_least(1), default=300)
    ap.add_argument("--lr", type=at_least(0, float), default=3e-4)
    ap.add_argument("--anchor-weight", type=at_least(0, float), default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    profile = get_profile(args.profile)
    model = NeuralCostModel.load(args.model or profile.dir / "compute-model.json", profile.name)
    sets, fwd, bwd, df = load_sets(args.groups)
    if args.round is not None:
        keep = np.flatnonzero((df["round"] == args.round).to_numpy())
        if keep.size == 0:
            raise InputError("--round", f"{args.round} has no rows in {args.groups}",
                             f"use one of the rounds {sorted(df['round'].unique())}")
        sets, fwd, bwd, df = [sets[i] for i in keep], fwd[keep], bwd[keep], df.iloc[keep]
    rng = np.random.default_rng(0)
    anchor_sets: list[list[ShardSpec]] = []
    for name, n, source in ANCHOR:
        pool = load_sets(profile.dir / name, source=source)[0]
        anchor_sets += [pool[i] for i in rng.choice(len(pool), min(n, len(pool)), replace=False)]
    groups = df["group"].astype("category").cat.codes.to_numpy()
    finetune(model, sets, fwd, bwd, groups, anchor_sets, args.steps, args.lr, args.anchor_weight)
    model.save(args.out, {"finetuned": {
        "from": str(args.model or profile.dir / "compute-model.json"), "groups": str(args.groups),
        "round": args.round, "ranks": len(sets), "dates": [str(df["date"].min()), str(df["date"].max())],
        "steps": args.steps, "lr": args.lr, "anchor_weight": args.anchor_weight,
        "command": f".venv/bin/python bench/finetune_groups.py {shlex.join(sys.argv[1:])}"}})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
