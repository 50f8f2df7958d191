"""Plan a suite with a variant of the default searcher into a folder of plan files, for ``plans_ab.py`` to
measure against the default's.

Variants (``--variant``):

* ``default``: the default searcher as it is (the A side of a comparison);
* ``unpolished``: the beam without its pairwise polish (``pairwise_polish=False``);
* ``wide``: a wider beam (width 6, 8 steps, 10 split candidates a step, a work bound of 5e7);
* ``ensemble``: the default searcher planning against the geometric mean of several trained compute
  models (``--members``: the committed model and the named candidates under
  ``data/profiles/<profile>/candidates/``), behind the searchers' incremental interface.

Every plan file carries the cost block of the profile's committed model, so that ``plans_ab.py``'s
"predicted" column compares both sides by one model. Planning only (no kernel is timed).

    .venv/bin/python bench/variant_plans.py --variant ensemble --members with-round2,with-ranks-pools,context-totals \\
        --suite data/tasks/cpu-bench --out /tmp/plans-ensemble
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from shardplan.cost.estimator import PlanEstimator, comm_model_for, load_estimator
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile
from shardplan.cost.specs import ShardSpec
from shardplan.errors import exit_status
from shardplan.formats import load_task, save_plan
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from shardplan.search.neuroshard import NeuroShardBeam

BEAMS = {"unpolished": {"pairwise_polish": False},
         "wide": {"beam_width": 6, "steps": 8, "candidates": 10, "max_work": 5e7}}


@dataclasses.dataclass
class EnsembleModel:
    """Compute model whose fwd and bwd ms are the geometric mean of its members'.

    For incremental search a shard's code is every member's code side by side, followed by the own
    times of every member but the first (the first member's own times travel as the code's times), so
    that summing codes over a rank sums each member's inputs and :meth:`combine` can split them again.
    """

    members: list[NeuralCostModel]

    def __post_init__(self) -> None:
        if not all(m.split_batches for m in self.members):
            raise ValueError("every member must price each batch size's shards apart (split_batches)")
        first = self.members[0]
        self.profile, self.metadata, self.split_batches = first.profile, first.metadata, True
        self.time_width = first.time_width
        self.code_width = sum(m.code_width for m in self.members) + sum(m.time_width for m in self.members[1:])

    def predict(self, sets: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray]:
        fwd, bwd = zip(*(m.predict(sets) for m in self.members))
        empty = np.array([not s for s in sets])
        return np.where(empty, 0.0, _geomean(fwd)), np.where(empty, 0.0, _geomean(bwd))

    def encode_shards(self, specs: list[ShardSpec]) -> tuple[np.ndarray, np.ndarray]:
        encoded = [m.encode_shards(specs) for m in self.members]
        codes = np.concatenate([c for c, _ in encoded] + [t for _, t in encoded[1:]], axis=1)
        return codes, encoded[0][1]

    def combine(self, code_sum: np.ndarray, time_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
        code_sum = np.asarray(code_sum)
        at, codes = 0, []
        for m in self.members:
            codes.append(code_sum[:, at:at + m.code_width])
            at += m.code_width
        times = [np.asarray(time_sum)]
        for m in self.members[1:]:
            times.append(code_sum[:, at:at + m.time_width])
            at += m.time_width
        ms = _geomean([m.combine(c, t, count) for m, c, t in zip(self.members, codes, times)])
        return np.where(np.asarray(count).reshape(-1, 1) > 0, ms, 0.0)


def _geomean(arrays: list[np.ndarray] | tuple[np.ndarray, ...]) -> np.ndarray:
    return np.exp(np.mean(np.log(np.maximum(np.asarray(arrays), 1e-9)), axis=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=("default", *BEAMS, "ensemble"), required=True)
    ap.add_argument("--members", default="", help="ensemble: candidate folders joined to the committed model")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--suite", type=Path, default=Path("data/tasks/cpu-bench"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    committed = load_estimator(args.profile)
    if args.variant == "ensemble":
        profile = get_profile(args.profile)
        names = [n for n in args.members.split(",") if n]
        if not names:
            ap.error("--variant ensemble needs --members")
        paths = [profile.dir / "compute-model.json"]
        paths += [profile.dir / "candidates" / n / "compute-model.json" for n in names]
        model = EnsembleModel([NeuralCostModel.load(p, profile=profile.name) for p in paths])
        estimator = PlanEstimator(model, comm_model_for(profile), profile.name,
                                  "ensemble of " + ", ".join(map(str, paths)))
        searcher = get_searcher(DEFAULT_SEARCHER)
    elif args.variant == "default":
        estimator, searcher = committed, get_searcher(DEFAULT_SEARCHER)
    else:
        estimator, searcher = committed, NeuroShardBeam(**BEAMS[args.variant])
    args.out.mkdir(parents=True, exist_ok=True)
    for path in tqdm(sorted(args.suite.glob("*.json")), desc=f"{args.variant} plans [{args.suite.name}]"):
        task = load_task(path)
        plan = searcher.plan(task, estimator, seed=0)
        save_plan(dataclasses.replace(plan, cost=committed.estimate(plan)), args.out / f"{task.name}.json")
    print(f"wrote {args.out}/<task>.json")


if __name__ == "__main__":
    sys.exit(exit_status(main))
