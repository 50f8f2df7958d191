"""Training the compute-cost model from committed data, and reporting its accuracy.

``shardplan train`` = :func:`train_and_report`: load the profile's
``compute.parquet`` (and ``compute-ranks.parquet``, whole ranks of real plans,
when present; held out by task; and ``compute-plan-groups.parquet``, ranks of a
task's plans timed together, learnt for their ratios within the task), put each sample's times on one state of the
machine (read off the reference workload timed beside it: on a CPU divided by the slowdown, on a GPU less the
host's launch jitter, :mod:`.host_state`), split it deterministically (a sample is held out when a
hash of its seed and index falls in the last 15%), fit the neural model and the
two baselines on the training part, score all three on the held-out part and
on ``compute-large.parquet`` (sets larger than any in training), save the
model with its metadata and write the report (JSON + markdown).
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from ..errors import InputError
from ..formats import write_json_atomic, write_text_atomic
from .baselines import GBMCostModel, RooflineCostModel
from .collect import data_kinds
from .host_state import HostStateAdjustment, sample_reference_ms
from .kernel import REFERENCE_SPECS
from .labels import label_slowdowns, repeated_labels
from .model import NeuralCostModel, check_context_code
from .profiles import Profile
from .specs import ShardSpec, specs_from_json
from .split import holdout_mask, is_holdout

# Whole-rank samples of real plans are fewer than the random sets but are the population the
# searchers ask about; each counts this many times in training.
RANK_SAMPLE_WEIGHT = 3
# With ``long_ranks`` (a candidate), a plan rank counts once more per LONG_RANK_MS of its time, up to
# LONG_RANK_MAX times its usual weight: a plan's cost is its slowest rank's, so the long ranks are
# where an error moves a plan, and they are few (2% of the ranks are over 20 ms).
LONG_RANK_MS, LONG_RANK_MAX = 10.0, 3


REFERENCE_PERCENTILE = 5
# Decompositions (compute-decompositions.parquet) are of trained-on plan ranks, so the task split holds
# none out; they are split by source row under this key instead (no collector seed is negative).
DECOMP_SPLIT_SEED = -1
# A decomposition's label, a ratio within a repetition, weighs as much as a plan rank's.
DECOMP_WEIGHT = RANK_SAMPLE_WEIGHT


def rank_weights(ms: np.ndarray, long_ranks: bool = False) -> np.ndarray:
    """How many times each plan rank of fwd+bwd ``ms`` counts in training: ``RANK_SAMPLE_WEIGHT``, and
    with ``long_ranks`` that times ``ms / LONG_RANK_MS`` rounded, between 1 and ``LONG_RANK_MAX``."""
    times = np.full(len(ms), RANK_SAMPLE_WEIGHT, dtype=np.int64)
    if long_ranks:
        times *= np.clip(np.rint(np.asarray(ms) / LONG_RANK_MS), 1, LONG_RANK_MAX).astype(np.int64)
    return times


def reference_nominal(df: pd.DataFrame) -> float:
    """The quiet machine's reference time: a low percentile of every reference timing in the data."""
    return float(np.percentile(np.concatenate([df["ref_before_ms"], df["ref_after_ms"]]), REFERENCE_PERCENTILE))


def load_sets(path: Path, nominal: float | None = None, source: str | None = None,
              window_s: float | None = None, retimes: list[pd.DataFrame] | None = None
              ) -> tuple[list[list[ShardSpec]], np.ndarray, np.ndarray, pd.DataFrame]:
    """Shard sets and their fwd/bwd ms; with ``nominal``, divided by each sample's slowdown (over the
    timings within ``window_s`` of it where that is given: :func:`.labels.label_slowdowns`), and each row
    timed again in ``retimes`` labelled by the median of its timings (:func:`.labels.repeated_labels`).
    ``source`` keeps only the rows of that source (e.g. ``plan-rank``)."""
    df = pd.read_parquet(path)
    if nominal is not None:  # smoothed over the whole file's timings, before a source is picked from it
        df["_slowdown"] = label_slowdowns(df, nominal, window_s)
    if source is not None:
        df = df[df["source"] == source].reset_index(drop=True)
    sets = [specs_from_json(s) for s in df["shards"]]
    fwd, bwd = df["fwd_ms"].to_numpy(), df["bwd_ms"].to_numpy()
    if nominal is not None:
        factor = df.pop("_slowdown").to_numpy()
        fwd, bwd = fwd / factor, bwd / factor
        if retimes:
            fwd, bwd, df["timings"] = repeated_labels(df, fwd, bwd, retimes, nominal, window_s)
    return sets, fwd, bwd, df


def load_retimes(data_dir: Path) -> list[pd.DataFrame]:
    """The re-timings kept under ``data_dir/retimes/`` (``*-retime*.parquet``, written by ``shardplan collect
    retime``), in name order: :func:`load_sets` pairs each with the rows it re-timed."""
    return [pd.read_parquet(p) for p in sorted((data_dir / "retimes").glob("*-retime*.parquet"))]


LARGE_RAW_SPLIT = "larger_sets, raw labels (machine drift left in)"
GROUP_SPLIT = "holdout plan groups (each task's plans timed together; level matched per group)"
HOT_SPLIT = "holdout hot mixes (neighbour-calibrated, plan ranks' level)"
CROWDED_SPLIT = "holdout crowded mixes (neighbour-calibrated, plan ranks' level)"
MODERATE_SPLIT = "holdout moderate mixes (neighbour-calibrated, plan ranks' level)"
# the recipes of shardplan.cost.collect_hot
MIX_SPLITS = {"hot": HOT_SPLIT, "crowded": CROWDED_SPLIT, "moderate": MODERATE_SPLIT}
DECOMP_SPLIT = ("holdout decompositions (each set whole over the sum of its shards alone, timed in the same "
                "repetitions; scored as that ratio)")


def level_matched(pred_f: np.ndarray, pred_b: np.ndarray, fwd: np.ndarray, bwd: np.ndarray,
                  group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Predictions scaled per group so their geometric mean matches the measured one: what is left
    is the error in the ratios within a group, the only thing grouped labels know."""
    out = []
    for p, y in ((pred_f, fwd), (pred_b, bwd)):
        shift = pd.Series(np.log(y) - np.log(p)).groupby(group).transform("mean").to_numpy()
        out.append(p * np.exp(shift))
    return out[0], out[1]


def load_decompositions(path: Path) -> tuple[list[list[ShardSpec]], np.ndarray, pd.DataFrame]:
    """Sets timed whole and shard by shard, and their measured ratios ``[D, 2]`` (fwd, bwd) of the whole
    over the sum of its shards alone (:mod:`shardplan.cost.collect_decomp`)."""
    df = pd.read_parquet(path)
    if "parts" in df:  # a rank's ops timed apart (collect decompositions --by-batch) are for reading only
        df = df[df["parts"] == "shards"].reset_index(drop=True)
    return [specs_from_json(s) for s in df["shards"]], df[["ratio_fwd", "ratio_bwd"]].to_numpy(), df


def decomposition_holdout(df: pd.DataFrame) -> np.ndarray:
    """Which decompositions training holds out: by source row (``DECOMP_SPLIT_SEED``)."""
    return np.array([is_holdout(DECOMP_SPLIT_SEED, i) for i in df["src_row"]], dtype=bool)


def repetition_ratios(row: pd.Series) -> np.ndarray:
    """A decomposition's fwd+bwd ratio whole / sum alone in each of its repetitions."""
    f, b = np.stack(row["fwd_samples_ms"]), np.stack(row["bwd_samples_ms"])
    return (f[:, 0] + b[:, 0]) / (f[:, 1:] + b[:, 1:]).sum(axis=1)


def measured_ratios(df: pd.DataFrame) -> np.ndarray:
    """Decompositions' measured ratios ``[D, 3]``: fwd and bwd as labelled, and fwd+bwd as they are
    (the median over repetitions of the per-repetition ratio)."""
    total = df.apply(lambda r: float(np.median(repetition_ratios(r))), axis=1).to_numpy()
    return np.column_stack([df["ratio_fwd"].to_numpy(), df["ratio_bwd"].to_numpy(), total])


def predicted_ratios(model: Any, sets: list[list[ShardSpec]]) -> np.ndarray:
    """A model's ratios ``[D, 3]`` (fwd, bwd, fwd+bwd) of each set whole over the sum of its shards
    each predicted alone."""
    whole_f, whole_b = model.predict(sets)
    alone_f, alone_b = model.predict([[s] for d in sets for s in d])
    owner = np.repeat(np.arange(len(sets)), [len(d) for d in sets])
    sum_f = np.bincount(owner, alone_f, len(sets))
    sum_b = np.bincount(owner, alone_b, len(sets))
    return np.stack([whole_f / sum_f, whole_b / sum_b, (whole_f + whole_b) / (sum_f + sum_b)], axis=1)


def ratio_metrics(pred: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    """Predicted ratios ``[D, 3]`` against the measured ones (:func:`measured_ratios`): MAPE, Spearman and
    the median signed error per head."""
    out: dict[str, Any] = {}
    for k, name in enumerate(("fwd", "bwd", "fwd+bwd")):
        y = measured[:, k]
        out[name] = {"mape": float(np.mean(np.abs(pred[:, k] - y) / y)),
                     "spearman": float(spearmanr(pred[:, k], y).statistic),
                     "median_error": float(np.median(pred[:, k] / y - 1.0))}
    return out


def metrics(pred_f: np.ndarray, pred_b: np.ndarray, fwd: np.ndarray, bwd: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, p, y in (("fwd", pred_f, fwd), ("bwd", pred_b, bwd),
                       ("fwd+bwd", pred_f + pred_b, fwd + bwd)):
        out[name] = {"mape": float(np.mean(np.abs(p - y) / y)),
                     "spearman": float(spearmanr(p, y).statistic)}
    return out


# Fewer random sets than this cannot make a model (a GPU lease cut short may have collected a handful).
MIN_TRAIN_SETS = 10


def train_and_report(profile: Profile, epochs: int = 300, seed: int = 0, data_dir: Path | None = None,
                     out_dir: Path | None = None, progress: bool = True,
                     random_level: bool = True, split_batches: bool = True,
                     context_totals: bool = False, decompositions: bool | None = None,
                     hot_mixes: bool = False, long_ranks: bool = False,
                     crowded_mixes: bool = False, context_code: str = "free",
                     slowdown_window_s: float | None = None, retimes: bool = False,
                     init: Profile | None = None, huber_delta: float | None = None,
                     components: int = 1, moderate_mixes: bool = False) -> dict[str, Any]:
    """Train on ``data_dir`` (default: the profile's folder), write model and report to ``out_dir``.
    ``random_level``: the random sets' level is learnt apart from plan ranks' (``NeuralCostModel.fit``);
    it needs plan ranks (``compute-ranks.parquet``), or an ``init`` model that learnt it, whose offset is then
    held fixed; it is not used without either. ``split_batches``: a
    rank's shards of each batch size are priced as an op of their own (``NeuralCostModel.fit``).
    ``context_totals``: the set context also reads the rank's totals (a candidate; ``NeuralCostModel.fit``);
    ``context_code``: how the context reads the mean shard code besides them ("free", "none", "banded";
    ``NeuralCostModel.fit``; the last two candidates).
    ``decompositions``: also learn ``compute-decompositions.parquet``'s ratios of sets over their shards alone
    (``NeuralCostModel.fit``), held out by source row and scored as ratios; None: the profile's
    ``train_decompositions``. ``hot_mixes``: also
    learn ``compute-hot-mixes.parquet`` (:mod:`collect_hot`), neighbour-calibrated sets at plan ranks' level,
    each counted as a plan rank; held out by the random split (a candidate); ``crowded_mixes`` the same of
    ``compute-crowded-mixes.parquet``, ``moderate_mixes`` of ``compute-moderate-mixes.parquet``.
    ``long_ranks``: plan ranks count more the longer they are (:func:`rank_weights`; a candidate).
    ``slowdown_window_s``: the labels' divisor smoothed over that window (:mod:`.labels`) in place of the
    profile's own choice (a candidate). ``retimes``:
    the random sets and plan ranks timed again under ``data_dir/retimes/`` are labelled by the median of their
    timings (:func:`.labels.repeated_labels`; a CPU profile's candidate). ``init``: training starts from that
    profile's committed model (``NeuralCostModel.fit``'s ``init``), which must be of this host's device and of
    the same network shape: for a kind labelled on few sets, paired against a base with many. ``huber_delta``:
    the labelled sets' log loss turns linear past that residual (``NeuralCostModel.fit``; a candidate).
    ``components``: time parts per shard and head, each with a set factor of its own (``NeuralCostModel.fit``;
    above 1 a candidate)."""
    check_context_code(context_code, context_totals, ("--context-code", "--context-totals"))  # before any data
    start = None
    if init is not None:  # read and checked before any data
        if init.name == profile.name or init.device != profile.device:
            what = "the one being trained" if init.name == profile.name else f"a {init.device} profile's"
            raise InputError("--init", f"profile {init.name!r} is {what}",
                             f"start from another {profile.device} profile's model")
        start = NeuralCostModel.load(init.dir / "compute-model.json", init.name)
    decompositions = profile.train_decompositions if decompositions is None else decompositions
    data_dir = data_dir or profile.dir
    out_dir = out_dir or data_dir
    nominal = reference_nominal(pd.read_parquet(data_dir / "compute.parquet",
                                                columns=["ref_before_ms", "ref_after_ms"]))
    # A shared CPU VM drifts, and its labels are divided by the slowdown the reference shows. On a lent
    # GPU the reference (a fraction of a ms) reads the host's launch jitter, which only short ops feel:
    # the labels lose the share of it each op's length shows on the training split (host_state.py).
    divisor = nominal if profile.device == "cpu" else None
    window = profile.slowdown_window_s if slowdown_window_s is None else slowdown_window_s
    if retimes and divisor is None:  # before any re-timing is read
        raise InputError("--retimes", f"profile {profile.name!r} is a GPU's, whose labels are its host-state "
                         "adjustment's", "leave --retimes out: it labels a CPU profile's re-timed rows")
    retimed = load_retimes(data_dir) if retimes else []
    if retimes and not retimed:
        raise InputError("--retimes", f"no re-timings (*-retime*.parquet) under {data_dir / 'retimes'}",
                         f"time rows again first: shardplan collect retime SRC --out "
                         f"{data_dir / 'retimes'}/NAME-retime1.parquet --profile {profile.name}")
    sets, fwd, bwd, df = load_sets(data_dir / "compute.parquet", divisor, window_s=window, retimes=retimed)
    kinds = data_kinds(df)
    if len(kinds) > 1:  # the model has no feature for either, and would price a blend of both
        raise InputError(str(data_dir / "compute.parquet"), f"holds timings of {len(kinds)} optimizer/dtype pairs "
                         f"{kinds}", "keep one pair per profile: move the others' rows to a profile of their own")
    (optimizer, dtype), = kinds or [("sgd", "fp32")]
    raw_f, raw_b = df["fwd_ms"].to_numpy(), df["bwd_ms"].to_numpy()
    hold = holdout_mask(df)
    tr = np.flatnonzero(~hold)
    te = np.flatnonzero(hold)
    if len(te) == 0 or len(tr) < MIN_TRAIN_SETS:
        raise InputError(str(data_dir / "compute.parquet"),
                         f"holds {len(df)} timed sets: {len(tr)} to train on and {len(te)} held out",
                         f"collect more (at least {MIN_TRAIN_SETS} to train on and one held out): "
                         f"shardplan collect compute --profile {profile.name}")
    pick = lambda idx, from_=sets: [from_[i] for i in idx]  # noqa: E731
    host_state = None
    if divisor is None:
        ref = sample_reference_ms(df)
        host_state = HostStateAdjustment.fit(pick(tr), fwd[tr], bwd[tr], ref[tr], seed=seed)
        fwd, bwd = host_state.apply(sets, fwd, bwd, ref)
    train_sets, train_f, train_b = pick(tr), fwd[tr], bwd[tr]

    def add_plan_level(sets_: list[list[ShardSpec]], f_: np.ndarray, b_: np.ndarray, hold: np.ndarray
                       ) -> tuple[list[list[ShardSpec]], np.ndarray, np.ndarray]:
        """Train on the sets not in ``hold``, at plan ranks' level and weight; return the held-out split."""
        nonlocal train_sets, train_f, train_b
        kept, held = np.flatnonzero(~hold), np.flatnonzero(hold)
        times = rank_weights(f_[kept] + b_[kept], long_ranks)
        # copy after copy of the kept sets in order (a set leaves once its count is reached): the order, and
        # so the committed weights, of training without long_ranks, which repeats them all alike
        copies = np.concatenate([kept[times > j] for j in range(int(times.max(initial=0)))] or [kept[:0]])
        train_sets = train_sets + pick(copies, sets_)
        train_f = np.concatenate([train_f, f_[copies]])
        train_b = np.concatenate([train_b, b_[copies]])
        return pick(held, sets_), f_[held], b_[held]

    ranks_path = data_dir / "compute-ranks.parquet"
    rank_split = None
    if ranks_path.exists():  # whole ranks of real plans; held out by task
        rsets, rf, rb, rdf = load_sets(ranks_path, divisor, source="plan-rank", window_s=window, retimes=retimed)
        rhold = holdout_mask(rdf)
        rank_split = add_plan_level(rsets, rf, rb, rhold)
        rank_counts = (int((~rhold).sum()), int(rhold.sum()), int(rdf.loc[~rhold, "task"].nunique()),
                       int(rdf.loc[rhold, "task"].nunique()))

    mix_splits, mix_counts = {}, {}
    wanted_mixes = (("hot", hot_mixes), ("crowded", crowded_mixes), ("moderate", moderate_mixes))
    for recipe in [r for r, wanted in wanted_mixes if wanted]:
        mix_path = data_dir / f"compute-{recipe}-mixes.parquet"
        if not mix_path.exists():
            raise InputError(f"--{recipe}-mixes", f"no {recipe} mixes at {mix_path}",
                             f"collect them first: shardplan collect {recipe}-mixes")
        # already on the stored plan ranks' host (divided by the neighbours' factor): no divisor
        msets, mf, mb, mdf = load_sets(mix_path)
        mhold = holdout_mask(mdf)
        mix_splits[recipe] = add_plan_level(msets, mf, mb, mhold)
        mix_counts[recipe] = (int((~mhold).sum()), int(mhold.sum()))

    groups = np.full(len(train_sets), -1)
    groups_path = data_dir / "compute-plan-groups.parquet"
    group_split = None
    if groups_path.exists():  # a task's plans timed together: their ratios, not their level, are labels
        gsets, gf, gb, gdf = load_sets(groups_path)  # already divided, by one slowdown per task
        gid = gdf["group"].astype("category").cat.codes.to_numpy()
        ghold = holdout_mask(gdf)
        gtr, gte = np.flatnonzero(~ghold), np.flatnonzero(ghold)
        train_sets = train_sets + pick(gtr, gsets)
        train_f = np.concatenate([train_f, gf[gtr]])
        train_b = np.concatenate([train_b, gb[gtr]])
        groups = np.concatenate([groups, gid[gtr]])
        group_split = (pick(gte, gsets), gf[gte], gb[gte], gid[gte])
        # a task (seed, sample) can be timed in several rounds, each a group of its own: count tasks
        task_of = gdf["seed"].astype(str) + ":" + gdf["sample"].astype(str)
        group_counts = (len(gtr), len(gte), int(task_of[gtr].nunique()), int(task_of[gte].nunique()))

    decomp_train = decomp_split = None
    decomp_path = data_dir / "compute-decompositions.parquet"
    if decompositions:
        if not decomp_path.exists():
            raise InputError("--decompositions", f"no decompositions at {decomp_path}",
                             "collect them first: shardplan collect decompositions")
        dsets, dratio, ddf = load_decompositions(decomp_path)
        dhold = decomposition_holdout(ddf)
        decomp_train = (pick(np.flatnonzero(~dhold), dsets), dratio[~dhold])
        decomp_split = (pick(np.flatnonzero(dhold), dsets), measured_ratios(ddf[dhold]))

    # without plan ranks there is no other level, unless the start model learnt it on its own host and lends it
    carried = random_level and rank_split is None and start is not None and start.random_level
    random_level = random_level and (rank_split is not None or carried)
    models = {
        # grouped ranks are the same population as the plan ranks, and weigh as much
        "neural": NeuralCostModel(profile=profile.name, epochs=epochs, seed=seed, group_weight=RANK_SAMPLE_WEIGHT,
                                  random_level=random_level, split_batches=split_batches,
                                  context_totals=context_totals, decomp_weight=DECOMP_WEIGHT,
                                  context_code=context_code, huber_delta=huber_delta, components=components),
        "roofline (TorchRec form)": RooflineCostModel(),
        "gbm (hand features)": GBMCostModel(seed=seed),
    }
    # the baselines learn levels only: grouped sets, whose level is not a label, are left out
    absolute = np.flatnonzero(groups < 0)
    absolute_split = (pick(absolute, train_sets), train_f[absolute], train_b[absolute])
    for name, m in models.items():
        if isinstance(m, NeuralCostModel):
            m.fit(train_sets, train_f, train_b, progress=progress, groups=groups,
                  random_sets=np.arange(len(train_sets)) < len(tr),  # compute.parquet's sets come first
                  decompositions=decomp_train, init=start)
        else:
            m.fit(*absolute_split)

    evals: dict[str, dict[str, Any]] = {}
    splits = {"holdout": (pick(te), fwd[te], bwd[te])}
    if divisor is not None or host_state is not None:
        splits["holdout, raw labels (machine drift left in)"] = (pick(te), raw_f[te], raw_b[te])
    if rank_split is not None:
        splits["holdout plan ranks (whole ranks of real plans, tasks not trained on)"] = rank_split
    for recipe, mix_split in mix_splits.items():
        if len(mix_split[0]):
            splits[MIX_SPLITS[recipe]] = mix_split
    large_path = data_dir / "compute-large.parquet"
    if large_path.exists():
        lsets, lf, lb, ldf = load_sets(large_path, divisor, window_s=window)
        if host_state is None:
            splits["larger_sets"] = (lsets, lf, lb)
        else:  # the same adjustment as the sets trained on, and beside it the times as measured
            splits["larger_sets"] = (lsets, *host_state.apply(lsets, lf, lb, sample_reference_ms(ldf)))
            splits[LARGE_RAW_SPLIT] = (lsets, lf, lb)
    # the random collector's sets are scored at their own level; plan ranks at the predicted one
    random_splits = {"holdout", "holdout, raw labels (machine drift left in)", "larger_sets", LARGE_RAW_SPLIT}

    def predict(m: Any, split: str, s: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray]:
        return m.predict(s, random_level=True) if isinstance(m, NeuralCostModel) and split in random_splits \
            else m.predict(s)

    for split, (s, f, b) in splits.items():
        evals[split] = {"n": len(s), "num_shards": [min(map(len, s)), max(map(len, s))],
                        "models": {name: metrics(*predict(m, split, s), f, b) for name, m in models.items()}}
    if group_split is not None and len(group_split[0]):
        s, f, b, gid = group_split
        evals[GROUP_SPLIT] = {"n": len(s), "num_shards": [min(map(len, s)), max(map(len, s))],
                              "models": {name: metrics(*level_matched(*m.predict(s), f, b, gid), f, b)
                                         for name, m in models.items()}}

    if decomp_split is not None and len(decomp_split[0]):
        s, measured = decomp_split
        evals[DECOMP_SPLIT] = {"n": len(s), "num_shards": [min(map(len, s)), max(map(len, s))],
                               "models": {name: ratio_metrics(predicted_ratios(m, s), measured)
                                          for name, m in models.items()}}

    neural = models["neural"]
    meta = {
        "profile": profile.name,
        "trained_on": (f"data/profiles/{profile.name}/compute.parquet" if data_dir == profile.dir
                       else str(data_dir / "compute.parquet"))
                      + (" + compute-ranks.parquet" if rank_split is not None else "")
                      + (" + compute-plan-groups.parquet" if group_split is not None else "")
                      + (" + compute-decompositions.parquet" if decomp_train is not None else "")
                      + "".join(f" + compute-{recipe}-mixes.parquet" for recipe in mix_splits),
        "train_samples": int(len(tr)), "holdout_samples": int(len(te)),
        **({"train_rank_samples": rank_counts[0], "holdout_rank_samples": rank_counts[1],
            "train_rank_tasks": rank_counts[2], "holdout_rank_tasks": rank_counts[3],
            "rank_sample_weight": RANK_SAMPLE_WEIGHT,
            **({"long_ranks": {"per_ms": LONG_RANK_MS, "max_times": LONG_RANK_MAX}} if long_ranks else {})}
           if rank_split is not None else {}),
        **({"train_group_samples": group_counts[0], "holdout_group_samples": group_counts[1],
            "train_group_tasks": group_counts[2], "holdout_group_tasks": group_counts[3]}
           if group_split is not None else {}),
        **{f"{part}_{recipe}_mixes": n for recipe, counts in mix_counts.items()
           for part, n in zip(("train", "holdout"), counts)},
        **({"retimes": {"files": len(retimed), "random_sets_relabelled": int((df["timings"] > 1).sum()),
                        "plan_ranks_relabelled": int((rdf["timings"] > 1).sum()) if rank_split is not None else 0,
                        "how": "median of the label and its re-timings, each pass moved to the label's level"}}
           if retimes else {}),
        "train_num_shards": [int(df["num_shards"].min()), int(df["num_shards"].max())],
        "data_stamp": {k: sorted(map(str, df[k].unique()))[:3] for k in
                       ("cpu_model", "cpu_cores", "torch", "fbgemm_gpu", "threads", "optimizer")},
        "optimizers": [optimizer], "dtypes": [dtype],  # what PlanEstimator.check_task lets it price
        "reference_ms": nominal,
        "labels": ("measured ms divided by the machine's slowdown during the sample: the mean of the "
                   "reference workload's times just before and after it, "
                   + (f"as the median over the samples of its file timed within {window / 2:g} s of it, "
                      if window else "")
                   + "over the quiet reference "
                   f"(the {REFERENCE_PERCENTILE}th percentile of all reference times, {nominal:.4f} ms)"
                   if divisor is not None else host_state.describe()),
        **({"host_state": host_state.summary()} if host_state is not None else {}),
        "evaluation": evals,
        **({"init": {"profile": init.name, "date": start.metadata.get("date"),
                     "trained_on": start.metadata.get("trained_on")}} if init is not None else {}),
        "random_level": ({"learnt": not carried, "log_offset_fwd_bwd": neural.random_offset.tolist(),
                          "note": "random sets are scored at their own level; plan ranks and searchers at plan ranks'"
                          + (f"; the offset is {init.name}'s, held fixed: this profile has no plan ranks of its own"
                             if carried else "")}
                         if random_level else {"learnt": False}),
        "command": f"shardplan train --profile {profile.name} --epochs {epochs} --seed {seed}"
                   + ("" if random_level else " --no-random-level")
                   + ("" if split_batches else " --no-split-batches")
                   + (" --context-totals" if context_totals else "")
                   + ("" if context_code == "free" else f" --context-code {context_code}")
                   + ("" if decompositions == profile.train_decompositions
                      else " --decompositions" if decompositions else " --no-decompositions")
                   + "".join(f" --{recipe}-mixes" for recipe in mix_splits)
                   + (" --long-ranks" if long_ranks else "")
                   + (f" --slowdown-window-s {slowdown_window_s:g}" if slowdown_window_s is not None else "")
                   + (" --retimes" if retimes else "")
                   + (f" --huber-delta {huber_delta:g}" if huber_delta is not None else "")
                   + (f" --components {components}" if components != 1 else "")
                   + (f" --init {init.name}" if init is not None else ""),
        "date": _dt.date.today().isoformat(),
    }
    neural.save(out_dir / "compute-model.json", meta)
    write_json_atomic(out_dir / "reference.json", {
        "reference_ms": nominal, "specs": [vars(s) for s in REFERENCE_SPECS],
        "how": f"{REFERENCE_PERCENTILE}th percentile of the reference timings in compute.parquet",
        "command": meta["command"]})
    write_json_atomic(out_dir / "compute-model-report.json", meta)
    write_text_atomic(out_dir / "compute-model-report.md", report_markdown(meta))
    return meta


def metric_cells(m: dict[str, Any]) -> str:
    """One model's :func:`metrics` as markdown cells: MAPE and Spearman of fwd, bwd and fwd+bwd."""
    return " | ".join(f"{m[k]['mape'] * 100:.1f}% | {m[k]['spearman']:.3f}" for k in ("fwd", "bwd", "fwd+bwd"))


def report_markdown(meta: dict[str, Any]) -> str:
    lines = [f"# Compute-cost model report: profile `{meta['profile']}`", "",
             f"Trained by `{meta['command']}` on {meta['train_samples']} real FBGEMM samples of "
             f"`{meta['trained_on']}` (sets of {meta['train_num_shards'][0]} to "
             f"{meta['train_num_shards'][1]} shards); date {meta['date']}."
             + (f" Plus {meta['train_rank_samples']} whole ranks of real plans of {meta['train_rank_tasks']} "
                f"tasks (each counted {meta['rank_sample_weight']} times); the ranks of "
                f"{meta['holdout_rank_tasks']} other tasks are held out." if "train_rank_samples" in meta else "")
             + (f" Plus {meta['train_group_samples']} ranks of {meta['train_group_tasks']} tasks whose plans "
                "were timed together, learnt for their ratios within a group only (a group is a task's "
                "plans timed in one call, per round; its level rides on that call's divisor); "
                f"{meta['holdout_group_tasks']} tasks' are held out and scored after matching each group's "
                "level." if "train_group_samples" in meta else ""),
             "All targets are measured kernel times; every figure below compares a model's "
             "prediction with them. Labels: " + meta["labels"] + "."
             + (" The raw-label split shows the same held-out sets against the times as measured."
                if any(k.startswith("holdout, raw") for k in meta["evaluation"]) else ""), ""]
    for split, ev in meta["evaluation"].items():
        lines += [f"## {split}: {ev['n']} sets of {ev['num_shards'][0]} to {ev['num_shards'][1]} shards", "",
                  "| model | fwd MAPE | fwd Spearman | bwd MAPE | bwd Spearman | fwd+bwd MAPE | fwd+bwd Spearman |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, m in ev["models"].items():
            lines.append(f"| {name} | {metric_cells(m)} |")
        lines.append("")
    return "\n".join(lines)
