"""How noisy a GPU profile's labels are, and how far the published roofline sits from them.

Reads ``data/profiles/<profile>/compute.parquet`` (measured: FBGEMM CUDA kernels, CUDA events) and
prints a table: the spread of each sample's timed calls (the label is their median), the reference
workload's range, and the ratio of the published-bandwidth roofline (``RooflineCostModel.published``,
predicted) to the measured fwd+bwd ms over a seeded draw of the sets. Writes
``bench/results/gpu-labels-<profile>.md``.

    .venv/bin/python bench/gpu_labels.py --profile h200
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from shardplan.argtypes import at_least
from shardplan.cost.baselines import RooflineCostModel
from shardplan.cost.profiles import get_profile
from shardplan.cost.train import load_sets
from shardplan.errors import exit_status
from shardplan.formats import write_text_atomic


def label_report(profile: str, draw: int = 2000, seed: int = 0, out: Path = Path("bench/results")) -> str:
    path = get_profile(profile).dir / "compute.parquet"
    sets, fwd, bwd, df = load_sets(path, None)
    calls_f, calls_b = np.stack(df.fwd_samples_ms.to_numpy()), np.stack(df.bwd_samples_ms.to_numpy())
    total = calls_f + calls_b
    spread = (total.max(1) - total.min(1)) / np.median(total, 1)
    fwd_mad = np.abs(calls_f - np.median(calls_f, 1, keepdims=True)).mean(1) / np.median(calls_f, 1)
    refs = np.concatenate([df.ref_before_ms.to_numpy(), df.ref_after_ms.to_numpy()])
    idx = np.random.default_rng(seed).choice(len(sets), min(draw, len(sets)), replace=False)
    pf, pb = RooflineCostModel.published(profile).predict([sets[i] for i in idx])
    ratio = (pf + pb) / (fwd[idx] + bwd[idx])
    pct = lambda a, q: " / ".join(f"{x:.3f}" for x in np.percentile(a, q))  # noqa: E731
    lines = [f"# Labels of `{profile}` (`{path.name}`, {len(df)} sets)", "",
             f"Command: `.venv/bin/python bench/gpu_labels.py --profile {profile}`", "",
             "Measured: each set's fwd and bwd ms over its timed calls (CUDA events); the label is their median. "
             "Predicted: the roofline of published HBM bandwidth.", "",
             "| what | 10th / 50th / 90th percentile |", "| --- | --- |",
             f"| a set's timed calls, fwd+bwd: (max - min) / median | {pct(spread, [10, 50, 90])} |",
             f"| a set's timed calls, fwd: mean absolute deviation / median | {pct(fwd_mad, [10, 50, 90])} |",
             f"| fwd+bwd label, ms | {pct(fwd + bwd, [10, 50, 90])} |",
             f"| reference workload, ms (before and after each set; min {refs.min():.3f}, max {refs.max():.3f}) | "
             f"{pct(refs, [10, 50, 90])} |",
             f"| published roofline / measured fwd+bwd ({len(idx)} sets, seed {seed}) | {pct(ratio, [10, 50, 90])} |"]
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / f"gpu-labels-{profile}.md", text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--draw", type=at_least(1), default=2000)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    print(label_report(args.profile, args.draw, out=args.out))


if __name__ == "__main__":
    sys.exit(exit_status(main))
