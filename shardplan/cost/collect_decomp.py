"""Decompositions: a shard set timed whole and shard by shard, in the same repetitions.

A set's labels elsewhere are absolute (each at the level of its hour) or ratios
between ranks of one task (plan groups). Neither says directly how far a set
sits over its shards timed alone, which is how much the shards slow one
another in one fused op; on this project's Xeon VM that ratio read 1.32-1.77x
on one TorchRec rank within 45 minutes, while the model said 1.24x
(``docs/cost-model.md``, session 33). Timed in the same repetition, the
host's level cancels from it: ``whole / sum(alone)`` is a label no hour's level
enters.

:func:`collect_decompositions` takes the trained-on plan ranks of a profile's
``compute-ranks.parquet`` (one batch size, ``MIN_SHARDS`` shards or more; held-
out tasks are never taken), in a seeded order, builds each set whole and each
shard alone as one op apiece (:class:`kernel.RankOp`), and times them in turns
for ``reps`` repetitions (the reference workload at each repetition's start;
the turn order rotates so no op always follows the same one). A row keeps every
repetition's fwd and bwd ms of the whole and of each shard alone, and the
label, the median over repetitions of the per-repetition ratio, per head
(``ratio_fwd``, ``ratio_bwd``). Rows go to
``data/profiles/<profile>/compute-decompositions.parquet``; resumable by source
row (``src_row``).

``by_batch`` decomposes a rank into its ops instead: a rank holding
data-parallel replicas runs one op on the local batch and one on the global
(``model.batch_parts``), and a plan-rank label is their sum. Timed apart in the
same repetitions, the two say which one a model misprices (on the H100 the
TorchRec ranks of ``gpu-bench-11`` sat 0.2 ms under the others' level over what
the model gave their sharded op, docs/gpu.md). Every plan rank of two batch
sizes is taken, held-out ones too: these rows are for reading, not training
(the default file, ``compute-batch-parts.parquet``, is one training never opens).
"""
from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..errors import InputError
from .collect import _stamp, append_rows, row_id_seed, spec_columns
from .kernel import RankOp, time_reference
from .model import batch_parts
from .profiles import Profile, load1, reference_ms
from .specs import ShardSpec, specs_from_json
from .split import holdout_mask

MIN_SHARDS = 3  # two shards say little about how a set of them interferes
DECOMP_ORDER_SEED = 11  # the seeded order in which source ranks are taken


def decomposition_sources(ranks: pd.DataFrame, seed: int = DECOMP_ORDER_SEED, by_batch: bool = False) -> pd.DataFrame:
    """The rows of a plan-rank file fit to decompose, in the order they are taken: trained-on
    (not held out) plan ranks of ``MIN_SHARDS`` or more shards fed one batch size, or with ``by_batch``
    every plan rank fed two or more, shuffled by ``seed``. The index is the row's position in the file
    (``src_row``)."""
    ranks = ranks[ranks["source"] == "plan-rank"]
    batches = ranks["shards"].map(lambda s: len({x.batch_size for x in specs_from_json(s)})).to_numpy()
    if by_batch:
        rows = ranks[batches >= 2]
    else:
        rows = ranks[~holdout_mask(ranks) & (ranks["num_shards"] >= MIN_SHARDS) & (batches == 1)]
    return rows.loc[np.random.default_rng(seed).permutation(rows.index.to_numpy())]


def time_decomposition(specs: list[ShardSpec], optimizer: str, dtype: str, profile: Profile, id_seed: int,
                       reps: int, by_batch: bool = False) -> dict[str, object]:
    """``specs`` whole and each shard alone (with ``by_batch``, each batch's op alone), timed in turns
    for ``reps`` repetitions: every repetition's medians (fwd, bwd) of each op, the per-repetition ratio
    whole / sum alone and its median per head, the reference at each repetition's start, the load and
    the date. ``part_batches`` gives each part's batch size (``alone_*`` follow that order)."""
    parts = batch_parts([specs])[0] if by_batch else [[s] for s in specs]
    ops = [RankOp(specs, optimizer, dtype, profile.device, id_seed)]
    ops += [RankOp(part, optimizer, dtype, profile.device, id_seed) for part in parts]
    before = load1()
    fwd = np.zeros((reps, len(ops)))
    bwd = np.zeros((reps, len(ops)))
    refs = []
    for r in range(reps):
        refs.append(time_reference(profile.device))
        for k in np.roll(np.arange(len(ops)), -r):  # rotate the turn order
            t = ops[k].run(profile.warmup, profile.repeats)
            fwd[r, k], bwd[r, k] = t.fwd_ms, t.bwd_ms
    ratio_f = fwd[:, 0] / fwd[:, 1:].sum(axis=1)
    ratio_b = bwd[:, 0] / bwd[:, 1:].sum(axis=1)
    return {**spec_columns(specs), "parts": "batches" if by_batch else "shards",
            "part_batches": [part[0].batch_size for part in parts], "id_seed": id_seed, "reps": reps,
            "warmup": profile.warmup,
            "repeats": profile.repeats,
            "ratio_fwd": float(np.median(ratio_f)), "ratio_bwd": float(np.median(ratio_b)),
            "ratio_fwd_samples": ratio_f.tolist(), "ratio_bwd_samples": ratio_b.tolist(),
            "whole_fwd_ms": float(np.median(fwd[:, 0])), "whole_bwd_ms": float(np.median(bwd[:, 0])),
            "alone_fwd_ms": np.median(fwd[:, 1:], axis=0).tolist(),
            "alone_bwd_ms": np.median(bwd[:, 1:], axis=0).tolist(),
            "fwd_samples_ms": fwd.tolist(), "bwd_samples_ms": bwd.tolist(),
            "ref_ms": refs, "quiet_ms": reference_ms(profile) or float("nan"),
            "load1_before": before, "load1_after": load1(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def _rows_of(path: Path, src: Path) -> pd.Series:
    """The source rows of ``src`` that the decomposition file ``path`` holds."""
    if not path.is_file():
        raise InputError("--skip", f"no decomposition file at {path}", "name an existing parquet file or drop it")
    df = pd.read_parquet(path)
    if "src_row" not in df or "src" not in df:
        raise InputError("--skip", f"{path} is not a decomposition file (no src_row/src columns)",
                         "name a file written by shardplan collect decompositions")
    return df.loc[df["src"] == src.name, "src_row"]


def collect_decompositions(profile: Profile, out: Path, num_sets: int, reps: int = 5,
                           src: Path | None = None, max_seconds: float | None = None,
                           flush_every: int = 5, by_batch: bool = False,
                           skip: Sequence[Path] = ()) -> pd.DataFrame:
    """Append decompositions to ``out`` until it holds ``num_sets`` (or the sources run out, or
    ``max_seconds`` pass); resumable: source rows already in ``out`` are skipped, and so are those of
    the same source file already in any ``skip`` file (a second collection of fresh sets beside an
    earlier one). ``by_batch``: ranks of two batch sizes, into their ops (the module's docstring)."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    profile.use_threads()
    src = src or profile.dir / "compute-ranks.parquet"
    sources = decomposition_sources(pd.read_parquet(src), by_batch=by_batch)
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    done = set(existing["src_row"]) if len(existing) else set()
    taken = done | {int(i) for f in skip for i in _rows_of(f, src)}
    todo = [i for i in sources.index if i not in taken][:max(0, num_sets - len(done))]
    stamps: dict[tuple[str, str], dict[str, object]] = {}
    rows: list[dict] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    for i in tqdm(todo, desc=f"collect decompositions [{profile.name}]", initial=len(done),
                  total=len(done) + len(todo)):
        if deadline is not None and time.monotonic() > deadline:
            break
        row = sources.loc[i]
        kind = (str(row["optimizer"]), str(row["dtype"]))
        if kind not in stamps:
            stamps[kind] = _stamp(profile, *kind)
        rows.append({"src_row": int(i), "src": src.name, "seed": row["seed"], "sample": row["sample"],
                     "source": "batch-parts" if by_batch else "decomposition", "task": row["task"],
                     "searcher": row["searcher"], "rank": row["rank"],
                     **time_decomposition(specs_from_json(row["shards"]), *kind, profile, row_id_seed(row), reps,
                                          by_batch),
                     **stamps[kind]})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)
