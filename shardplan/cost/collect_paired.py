"""Labels of another optimizer or weight type, made from a base profile's own by timing both kinds in turns.

A profile's data is of one kind (optimizer, weight type), and its model prices
that kind alone. The ratio of another kind over the base is not one factor:
on 80 stored sets of ``cpu-2c-nested``, row-wise adagrad's forward + backward
ran 1.23-2.60x sgd's (10th-90th percentile), more on narrow tables
(``bench/optimizer_ratio.py``, session 62). Timing the new kind afresh labels
it at the level of the hour it is timed in, and a disturbed host's level is
not the one its base labels were taken at.

:func:`collect_paired` takes the base profile's labelled rows instead (a
cost-data file: random sets or plan ranks; a seeded order, so a partial run
is a uniform sample), builds each set once in the base kind and once in the
new one with the ids its label was timed with, and times the two in turns,
``visits`` visits of the profile's repeats each. Within one set and moment the
host's level cancels from the ratio, and the new row is labelled the base label
times it, forward and backward apart. The base row's identity (seed, sample,
task, rank, source), its protocol and its reference timings are kept, so
training divides the new label by the slowdown it divided the base label by
and splits the rows as it split the base's; the row also keeps the base label,
both kinds' raw medians and the ratios (``label_recipe = "paired-ratio"``).

What the level does not cancel from: the ratio itself. On ``cpu-2c-nested``'s
guest (session 63) the same held-out rows paired an hour apart gave a
backward ratio 8% lower with the guest running the sgd sets at 2.17x their
labels against 1.90x, and 6% higher at 1.82x against 1.96x: row-wise
adagrad's extra work slows less than sgd's under what slows that guest
(three pairings read with each row held fixed put a quiet guest's backward
ratio about a fifth above labels paired at 3x its reference:
``bench/kind_transfer.py``). And one set's ratio carries about a tenth of
noise there. ``wait_fit_s`` pairs
only while the host is fit (:mod:`.fitness`, probed on the base profile
before the first row and every ``FIT_EVERY`` rows) and records each row's
last probe (``fit_*``).
"""
from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..errors import InputError
from .collect import _stamp, append_rows, check_one_kind, data_kinds, row_id_seed
from .fitness import wait_until_fit
from .kernel import RankOp, require_kernel, time_reference
from .profiles import Profile, load1, runs_here
from .specs import ShardSpec, specs_from_json
from .split import holdout_mask

LABEL_RECIPE = "paired-ratio"
PAIR_ORDER_SEED = 0  # the seeded order in which the base rows are taken
TIMED_SOURCES = ("random", "plan-rank")  # rows that record a timing (not plan-rank-infeasible)
FIT_EVERY = 50  # rows between fitness probes (a probe takes about 15 s; 50 rows 2-5 minutes here)


def paired_sources(src: pd.DataFrame, seed: int = PAIR_ORDER_SEED) -> pd.DataFrame:
    """The base rows that carry a timing, shuffled by ``seed``; the index is the row's position in the file
    (``src_row``)."""
    timed = src if "source" not in src else src[src["source"].isin(TIMED_SOURCES)]
    return timed.loc[np.random.default_rng(seed).permutation(timed.index.to_numpy())]


def time_in_turns(specs: list[ShardSpec], id_seed: int, kinds: list[tuple[str, str]], profile: Profile,
                  visits: int) -> dict[tuple[str, str], tuple[float, float]]:
    """One set built once per kind (optimizer, dtype) and the kinds timed in turns, ``visits`` visits of the
    profile's repeats each after every build's warm-up: per kind, the (fwd, bwd) medians over every repeat."""
    ops = {k: RankOp(specs, *k, profile.device, id_seed) for k in kinds}
    for op in ops.values():  # each build's warm-up, not a sample
        op.run(profile.warmup, 1)
    samples: dict[tuple[str, str], tuple[list[float], list[float]]] = {k: ([], []) for k in kinds}
    for _ in range(visits):
        for k, op in ops.items():
            t = op.run(1, profile.repeats)
            samples[k][0].extend(t.fwd_samples_ms)
            samples[k][1].extend(t.bwd_samples_ms)
    return {k: (float(np.median(f)), float(np.median(b))) for k, (f, b) in samples.items()}


def paired_row(base_row: pd.Series, raw: dict[str, float]) -> dict[str, object]:
    """The new kind's labels: the base row's times its measured ratio, per head (every repeat scaled too)."""
    ratio_f, ratio_b = (raw[f"raw_{h}_ms"] / raw[f"raw_base_{h}_ms"] if raw[f"raw_base_{h}_ms"] > 0 else 1.0
                        for h in ("fwd", "bwd"))  # an empty rank costs nothing in either kind
    base_f, base_b = float(base_row["fwd_ms"]), float(base_row["bwd_ms"])
    out: dict[str, object] = {"fwd_ms": base_f * ratio_f, "bwd_ms": base_b * ratio_b, "base_fwd_ms": base_f,
                              "base_bwd_ms": base_b, "ratio_fwd": ratio_f, "ratio_bwd": ratio_b, **raw}
    for head, ratio in (("fwd", ratio_f), ("bwd", ratio_b)):
        if f"{head}_samples_ms" in base_row:
            out[f"{head}_samples_ms"] = [float(x) * ratio for x in base_row[f"{head}_samples_ms"]]
    return out


def collect_paired(profile: Profile, base: Profile, src: Path, out: Path, optimizer: str, dtype: str,
                   visits: int = 2, sets: int | None = None, max_seconds: float | None = None,
                   held_out: bool = False, wait_fit_s: float | None = None,
                   flush_every: int = 10) -> pd.DataFrame:
    """Label ``src``'s rows (a cost-data file of ``base``) for ``profile`` in kind (``optimizer``, ``dtype``)
    by the ratio of the two kinds timed in turns (module docstring), appending to ``out`` until it holds
    ``sets`` rows (default: every timed row of ``src``) or ``max_seconds`` have passed; resumable by
    ``src_row``. ``held_out`` keeps, of those first ``sets`` rows, only the ones training holds out
    (``split.holdout_mask``): the same rows paired again, with more visits, check the labels a model is
    scored against. With ``wait_fit_s`` (seconds; 0: probe and record, never wait) the base profile is probed
    before the first row and every ``FIT_EVERY`` rows, waiting while the host is unfit; a wait that runs out
    raises :class:`MachineUnfitError` with the rows so far kept. Refuses, before timing anything, a base of
    another device or CPU than this host, the base's own kind, a kind the device cannot train, and an ``out``
    of another kind."""
    if profile.name == base.name:
        raise InputError("--base", f"is the profile being labelled ({base.name!r})",
                         "label a profile of its own: shardplan profiles --new NAME --like BASE")
    if base.device != profile.device or not runs_here(base):
        raise InputError("--base", f"profile {base.name!r} was not measured on this host's device and CPU",
                         "pair against a profile of this machine, whose labels the ratios here carry over to")
    require_kernel(optimizer, dtype, profile.device, fields=("--optimizer", "--dtype"))
    source = pd.read_parquet(src)
    kinds = data_kinds(source) or [("sgd", "fp32")]
    if len(kinds) > 1:
        raise InputError("SRC", f"{src} holds timings of {len(kinds)} kinds {kinds}", "pair a file of one kind")
    base_kind = kinds[0]
    if base_kind == (optimizer, dtype):
        raise InputError("--optimizer/--dtype", f"{src} is already timed with {optimizer} and {dtype}",
                         "pair another kind than the base's (shardplan collect retime times the same one again)")
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    check_one_kind(existing, out, optimizer, dtype)
    profile.use_threads()
    done = set(existing["src_row"]) if len(existing) else set()
    order = paired_sources(source)
    wanted = len(order) if sets is None else min(sets, len(order))
    picked = order.iloc[:wanted]
    if held_out:
        picked = picked[holdout_mask(picked)]
        wanted = len(picked)
    todo = [i for i in picked.index if i not in done]
    stamp = {**_stamp(profile, optimizer, dtype), "base_profile": base.name, "label_recipe": LABEL_RECIPE,
             "paired_visits": visits}
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    start = time.monotonic()
    n, fit = 0, None  # rows paired this call; the last fitness probe
    for i in tqdm(todo, desc=f"pair {src.name} as {optimizer}/{dtype} [{profile.name}]",
                  initial=wanted - len(todo), total=wanted):
        if max_seconds is not None and time.monotonic() - start > max_seconds:
            break
        if wait_fit_s is not None and n % FIT_EVERY == 0:
            existing, rows = append_rows(existing, rows, out), []  # kept should the wait run out
            fit = wait_until_fit(base, wait_fit_s)
        n += 1
        row = source.loc[i]
        before, ref = load1(), time_reference(profile.device)
        t = time_in_turns(specs_from_json(row["shards"]), row_id_seed(row), [base_kind, (optimizer, dtype)], profile,
                          visits)
        raw = {f"{key}_{head}_ms": t[k][h] for key, k in (("raw_base", base_kind), ("raw", (optimizer, dtype)))
               for h, head in enumerate(("fwd", "bwd"))}
        rows.append({"src_row": int(i), **row.to_dict(), **stamp, **paired_row(row, raw),
                     "paired_ref_ms": ref, "paired_load1_before": before, "paired_load1_after": load1(),
                     "paired_date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                     **(fit.columns() if fit is not None else {})})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)
