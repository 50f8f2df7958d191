"""What fills a hardware profile's folder, step by step, and how far a folder has got.

One list serves both ends of bringing a machine: the README that ``shardplan profiles --new`` writes
(the commands, in order) and ``shardplan profiles --show`` (which files are there, what they hold,
and the next command to run). A step is done when its file is in the profile's folder.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .profiles import Profile

CLI = ".venv/bin/shardplan"
# CPU timing takes one core and keeps the allocator from returning memory mid-timing (the labels' protocol)
CPU_PIN = "MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 "


@dataclass(frozen=True)
class Step:
    """One step: what it makes, the file it leaves, its commands in order, and whether planning needs it."""

    name: str
    file: str
    commands: tuple[str, ...]
    needed_to_plan: bool


def steps(profile: Profile) -> list[Step]:
    """The steps that fill ``profile``'s folder, in the order to run them. A GPU profile has no comm
    step (one GPU machine cannot measure NCCL between GPUs: its comm is the alpha-beta model of its
    published links), and it plans before any of its data exists, with the roofline of its published
    HBM bandwidth; a CPU profile needs its model and its comm to plan."""
    pin, name, cpu = (CPU_PIN if profile.device == "cpu" else ""), profile.name, profile.device == "cpu"
    out = [Step("random sets (at least 5,000)", "compute.parquet",
                (f"{pin}{CLI} collect compute --profile {name} --samples 5500 --seed 0",), cpu),
           Step("larger sets, never trained on", "compute-large.parquet",
                (f"{pin}{CLI} collect compute --profile {name} --seed 1 --min-shards 16 --max-shards 40 "
                 "--samples 300",), False)]
    if cpu:
        out.append(Step("communication", "comm-model.json", (f"{CLI} collect comm --profile {name}",), True))
    out += [Step("the compute model", "compute-model.json", (f"{CLI} train --profile {name}",), cpu),
            Step("plan ranks, then train again", "compute-ranks.parquet",
                 (f"{pin}{CLI} collect ranks --profile {name}", f"{CLI} train --profile {name}"), False),
            Step("the rl searcher's policy", "rl-policy.json",
                 (f"{CLI} train-policy --profile {name} --updates 300 --seed 0",), False)]
    return out


def describe(path: Path) -> str:
    """What a step's file holds, in a few words (rows and dates of cost data; a model's held-out error)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        data = pq.ParquetFile(path)
        rows = data.metadata.num_rows
        if "date" not in data.schema_arrow.names or rows == 0:
            return f"{rows:,} rows"
        dates = sorted(d for d in data.read(columns=["date"]).column("date").to_pylist() if d)  # not-planned: none
        return f"{rows:,} rows" + (f", {dates[0][:10]} to {dates[-1][:10]}" if dates else "")
    doc = json.loads(path.read_text())
    meta = doc.get("metadata", {})
    if path.name == "compute-model.json":
        held = meta.get("evaluation", {}).get("holdout", {})
        score = held.get("models", {}).get("neural", {}).get("fwd+bwd")
        return (f"saved {str(meta.get('saved', '?'))[:10]}"
                + (f"; held out fwd+bwd MAPE {100 * score['mape']:.1f}%, Spearman {score['spearman']:.3f} "
                   f"({held.get('n')} sets)" if score else ""))
    if path.name == "comm-model.json":
        fit = doc.get("fit", {})
        return f"{meta.get('date', '?')}; fitted to {fit.get('n', '?')} timings, MAPE {100 * fit.get('mape', 0):.1f}%"
    return f"{meta.get('date', '?')}; {meta.get('command', '')}".rstrip("; ")


def progress(profile: Profile) -> list[tuple[Step, str | None]]:
    """Each step with what its file holds, or ``None`` where the file is not there yet."""
    return [(s, _held(profile.dir / s.file) if (profile.dir / s.file).exists() else None) for s in steps(profile)]


def _held(path: Path) -> str:
    try:
        return describe(path)
    except Exception as e:  # noqa: BLE001 - a file this listing cannot read is reported, not fatal
        return f"unreadable ({type(e).__name__}: {e}); collect or train it again"
