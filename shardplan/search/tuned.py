"""Optuna tunes the NeuroShard beam search's own knobs, per task, under a time budget.

The knobs: beam width, steps, candidate tables per step, and the range of the
balance grid. The first trial is the fixed defaults (so tuning never returns
worse than them by prediction); later trials come from a seeded TPE sampler;
each trial reports its best predicted cost after every beam step and a median
pruner stops unpromising ones early. The objective is the predicted plan cost.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..cost.estimator import PlanEstimator
from ..domain import Plan, TableSharding, Task
from .base import Searcher, register
from .neuroshard import GRID, NeuroShardBeam


@register
class NeuroShardOptuna(Searcher):
    name = "neuroshard-optuna"
    description = "the NeuroShard beam search with its knobs tuned per task by Optuna (TPE, pruned)"

    def __init__(self, time_budget_s: float = 30.0, n_trials: int = 40, sharding_types: Iterable[str] | None = None
                 ) -> None:
        super().__init__(sharding_types)  # the beam sees the task with it folded in
        self.time_budget_s, self.n_trials = time_budget_s, n_trials

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed),
                                    pruner=optuna.pruners.MedianPruner(n_startup_trials=3))
        defaults = NeuroShardBeam()
        study.enqueue_trial({"beam_width": defaults.beam_width, "steps": defaults.steps,
                             "candidates": defaults.candidates, "grid_lo": GRID[0], "grid_hi": GRID[-2]})
        plans: dict[int, list[TableSharding]] = {}

        def objective(trial: "optuna.Trial") -> float:
            lo = trial.suggest_float("grid_lo", 1.0, 1.3)
            hi = trial.suggest_float("grid_hi", 1.2, 3.0)
            # Trial 0 is the enqueued defaults: the exact default grid, so tuning never predicts worse.
            grid = (GRID if trial.number == 0
                    else tuple(float(x) for x in np.linspace(lo, max(lo, hi), 5)) + (float("inf"),))

            def on_step(step: int, best: float) -> None:
                trial.report(best, step)
                if trial.should_prune():
                    raise optuna.TrialPruned()

            beam = NeuroShardBeam(beam_width=trial.suggest_int("beam_width", 1, 5),
                                  steps=trial.suggest_int("steps", 1, 6),
                                  candidates=trial.suggest_int("candidates", 2, 10),
                                  grid=grid,
                                  on_step=on_step)
            tables = beam.search(task, estimator, seed)
            plans[trial.number] = tables
            return estimator.estimate(Plan(task=task, tables=tuple(tables))).max_ms

        study.optimize(objective, n_trials=self.n_trials, timeout=self.time_budget_s)
        return plans[study.best_trial.number]
