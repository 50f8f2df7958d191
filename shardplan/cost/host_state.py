"""Taking the host's launch jitter out of GPU cost labels.

A small FBGEMM op on a GPU waits on its kernel launches, so how busy the host
CPU is while a sample is timed shows in the sample: on the lent H200 the
reference workload timed beside every sample (itself a small TBE forward and
backward) read 0.77-1.28x its median (10th-90th percentile), and session
41's model's held-out error moved with it (correlation -0.59 in log;
``bench/host_jitter.py``). A long op hides the launches behind its kernels,
and the effect fades with the op's length. A CPU profile divides its labels
by the reference's slowdown instead: there the whole machine slows, and
every op with it.

:class:`HostStateAdjustment` reads, per op (forward, backward) and per band
of the op's length, how many ms a sample gains per ms the reference ran over
its median, by regressing a gradient-boosting model's residuals on the
training split alone (each set priced by a model fitted without it);
:meth:`HostStateAdjustment.apply` subtracts that share of each sample's
reference excess. Labels so adjusted are at the collection's median host
state, which is the state a typical training step meets, not its quietest.
:class:`AtHostState` prices a trained model at another host state, given the
reference as timed there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from .baselines import GBMCostModel
from .specs import ShardSpec

# Bands of an op's length (ms, as the gradient-boosting model predicts it: a label's own length would
# select on its noise). The lent H200's ops ran 0.15-10 ms.
BAND_EDGES_MS = (0.5, 1.0, 2.0)
# A band with fewer training samples than this is left unadjusted.
MIN_BAND_SAMPLES = 200
# Residuals are read off models that did not see the set (k-fold over the training split).
FOLDS = 4
# No op's time, moved to another host state (a label to the median's, a price to a reading's), drops
# below this share of itself: a quicker host than any seen, or a reference spike the op did not feel,
# cannot make it free or negative.
MIN_SHARE = 0.1


def _out_of_fold(sets: list[list[ShardSpec]], fwd_ms: np.ndarray, bwd_ms: np.ndarray, seed: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Each set's times as predicted by a model not trained on it: a model's residuals on its own training
    sets are shrunk by what it memorised of their noise, the jitter among it."""
    fold = np.random.default_rng(seed).permutation(len(sets)) % FOLDS
    pred_f, pred_b = np.empty(len(sets)), np.empty(len(sets))
    for k in range(FOLDS):
        fit, out = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        model = GBMCostModel(seed=seed).fit([sets[i] for i in fit], fwd_ms[fit], bwd_ms[fit])
        pred_f[out], pred_b[out] = model.predict([sets[i] for i in out])
    return pred_f, pred_b


def _band(pred_ms: np.ndarray) -> np.ndarray:
    """Each op's band of length (0 to len(BAND_EDGES_MS)) by its predicted ms."""
    return np.searchsorted(BAND_EDGES_MS, pred_ms, side="right")


def sample_reference_ms(df: pd.DataFrame) -> np.ndarray:
    """Each sample's reference time: the geometric mean of the reference timed just before and after it."""
    return np.sqrt(df["ref_before_ms"].to_numpy() * df["ref_after_ms"].to_numpy())


@dataclass
class HostStateAdjustment:
    """ms a sample gains per ms of reference excess, per op and band of the op's length (never below 0:
    jitter only adds time)."""

    median_reference_ms: float
    fwd_gain: np.ndarray
    bwd_gain: np.ndarray
    band_samples: dict[str, list[int]]
    _reader: GBMCostModel

    @classmethod
    def fit(cls, sets: list[list[ShardSpec]], fwd_ms: np.ndarray, bwd_ms: np.ndarray, ref_ms: np.ndarray,
            seed: int = 0) -> "HostStateAdjustment":
        """Fit on the training split (``sets`` and their labels and reference times, nothing held out)."""
        pred_f, pred_b = _out_of_fold(sets, fwd_ms, bwd_ms, seed)
        reader = GBMCostModel(seed=seed).fit(sets, fwd_ms, bwd_ms)  # bands the sets apply() is given
        median = float(np.median(ref_ms))
        excess = ref_ms - median
        gains, counts = {}, {}
        for op, pred, label in (("fwd", pred_f, fwd_ms), ("bwd", pred_b, bwd_ms)):
            band = _band(pred)
            gains[op], counts[op] = [], []
            for k in range(len(BAND_EDGES_MS) + 1):
                rows = band == k
                counts[op].append(int(rows.sum()))
                if rows.sum() < MIN_BAND_SAMPLES:
                    gains[op].append(0.0)
                    continue
                design = np.column_stack([excess[rows], np.ones(int(rows.sum()))])
                slope = np.linalg.lstsq(design, (label - pred)[rows], rcond=None)[0][0]
                gains[op].append(max(float(slope), 0.0))
        return cls(median, np.array(gains["fwd"]), np.array(gains["bwd"]), counts, reader)

    def apply(self, sets: list[list[ShardSpec]], fwd_ms: np.ndarray, bwd_ms: np.ndarray, ref_ms: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """The labels at the median host state, none below :data:`MIN_SHARE` of its time as timed: a
        reference reading can spike without the op feeling it (on the fourth H100 it read up to 3.2 ms
        beside ops of 0.6), and the linear share of such a spike would leave a label negative."""
        pred_f, pred_b = self._reader.predict(sets)
        excess = ref_ms - self.median_reference_ms
        out = []
        for pred, label, gain in ((pred_f, fwd_ms, self.fwd_gain), (pred_b, bwd_ms, self.bwd_gain)):
            out.append(np.maximum(label - gain[_band(pred)] * excess, MIN_SHARE * label))
        return out[0], out[1]

    def summary(self) -> dict[str, Any]:
        return {"median_reference_ms": self.median_reference_ms, "band_edges_ms": list(BAND_EDGES_MS),
                "fwd_ms_per_reference_ms": [round(g, 4) for g in self.fwd_gain],
                "bwd_ms_per_reference_ms": [round(g, 4) for g in self.bwd_gain],
                "training_samples_per_band": self.band_samples,
                "read_by": "gradient boosting (hand features) on the training split; its residuals regressed "
                           "on the reference's excess over its median, band by band"}

    def describe(self) -> str:
        edges = [f"{e:g}" for e in BAND_EDGES_MS]
        bands = [f"<{edges[0]}", *(f"{lo}-{hi}" for lo, hi in zip(edges, edges[1:])), f">{edges[-1]}"]
        gains = ", ".join(f"{b} ms {f:.2f}/{g:.2f}" for b, f, g in zip(bands, self.fwd_gain, self.bwd_gain))
        return (f"measured ms as timed (CUDA events), less the host's launch jitter: the reference workload's "
                f"excess over its median ({self.median_reference_ms:.4f} ms) timed beside each sample, times "
                f"the ms an op gains per ms of it, read per op and per band of the op's length on the training "
                f"split (fwd/bwd: {gains})")


def at_reference(summary: dict[str, Any], fwd_ms: np.ndarray, bwd_ms: np.ndarray,
                 reference_ms: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Predictions at a collection's median host state moved to the host state a reference reading says
    (``reference_ms``: one for all ops, or one per op), by the gains ``summary`` holds
    (:meth:`HostStateAdjustment.summary`, saved as a model's ``metadata["host_state"]``). Each op's band is
    its own predicted length. An empty set stays 0, and no op is priced below :data:`MIN_SHARE` of its
    median-state time: a quicker host than any seen cannot make an op free."""
    edges = np.asarray(summary["band_edges_ms"], float)
    excess = np.asarray(reference_ms, float) - float(summary["median_reference_ms"])
    out = []
    for ms, key in ((np.asarray(fwd_ms, float), "fwd_ms_per_reference_ms"),
                    (np.asarray(bwd_ms, float), "bwd_ms_per_reference_ms")):
        gain = np.asarray(summary[key], float)
        moved = ms + gain[np.searchsorted(edges, ms, side="right")] * excess
        out.append(np.where(ms > 0, np.maximum(moved, MIN_SHARE * ms), 0.0))
    return out[0], out[1]


def by_op(compute: Any, sets: list[list[ShardSpec]], reference_ms: float | np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """A GPU model's prices of ``sets`` at the host state of ``reference_ms`` (one for all sets, or one per
    set), op by op: a rank holding data-parallel replicas runs an op on the local batch beside one on the
    global batch (``compute.ops``), each waits on launches of its own, so each is moved by the gain of its
    own length's band (:func:`at_reference`) before the set's ops are added. Moving the sum instead bands
    two 0.6-0.8 ms ops as one 1.4 ms op, whose gain is a third of theirs: on the third H100 that left
    TorchRec's ranks of `gpu-bench-11`, timed at that host's quickest, 19% over their measurement
    (median) where op by op they are 5% over (``bench/gpu_ranks.py``)."""
    ops, owner = compute.ops(sets)
    fwd, bwd = compute.predict(ops)
    ref = np.asarray(reference_ms, float)
    fwd, bwd = at_reference(compute.metadata["host_state"], fwd, bwd, ref[owner] if ref.ndim else ref)
    return (np.bincount(owner, weights=fwd, minlength=len(sets)),
            np.bincount(owner, weights=bwd, minlength=len(sets)))


class AtHostState:
    """A GPU compute model priced at a given host state instead of its collection's median one.

    The model learnt labels at the median host state of its collection; the gains its training read
    (``metadata["host_state"]``, :meth:`HostStateAdjustment.summary`) say how many ms an op of each band of
    length gains per ms the reference workload runs over that median. Given the reference as timed on the
    host to be priced (``reference_ms``), each predicted op gets that share back (:func:`by_op`).
    The band is chosen by the model's own prediction (training banded by a gradient-boosting model that is
    not saved), and the shift is linear in the reference's excess, as read within one collection: on
    another machine, where the reference runs outside that range, it is an extrapolation
    (``bench/gpu_ranks.py`` measures how far it carries). Implements the estimator's ``ComputeModel``
    protocol.
    """

    def __init__(self, compute: Any, reference_ms: float) -> None:
        summary = (getattr(compute, "metadata", None) or {}).get("host_state")
        if not summary:
            raise InputError("host_reference_ms", f"the compute model of profile {compute.profile!r} has no host-state "
                             "gains (CPU profiles divide their measurements by the reference instead)",
                             "price a GPU profile's neural model, or leave out the host reference")
        if not np.isfinite(reference_ms) or reference_ms <= 0:
            raise InputError("host_reference_ms", f"must be a positive number of ms, got {reference_ms!r}",
                             "give the reference workload's time on the host to be priced")
        self.compute = compute
        self.profile = compute.profile
        self.metadata = compute.metadata
        self.reference_ms = float(reference_ms)

    def predict(self, sets: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray]:
        return by_op(self.compute, sets, self.reference_ms)

    # The incremental interface the NeuroShard searchers price with (``search.placer.Placer``): a rank's
    # op of the units' batch is priced from summed shard codes, the rest of the rank through ``predict``.
    @property
    def split_batches(self) -> bool:
        return bool(getattr(self.compute, "split_batches", False))

    @property
    def code_width(self) -> int:
        return self.compute.code_width

    @property
    def time_width(self) -> int:
        return self.compute.time_width

    def encode_shards(self, specs: list[ShardSpec]) -> tuple[np.ndarray, np.ndarray]:
        return self.compute.encode_shards(specs)

    def combine(self, code_sum: np.ndarray, time_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Forward and backward ms ``[m, 2]`` of ``m`` ops from their sums, each moved to this host state as
        :func:`by_op` moves an op."""
        ms = self.compute.combine(code_sum, time_sum, count)
        fwd, bwd = at_reference(self.metadata["host_state"], ms[:, 0], ms[:, 1], self.reference_ms)
        return np.stack([fwd, bwd], axis=1)


HOST_REFERENCE_READINGS = 21  # a median over this many timings of the reference (each well under 1 ms on a GPU)


def time_host_reference(profile: Any, readings: int = HOST_REFERENCE_READINGS,
                        flag: str = "--host-reference") -> tuple[float, list[float]]:
    """The reference workload timed on this machine's device for a GPU ``profile``: (median ms, every reading),
    the figure a model is priced at with ``host_reference_ms``. Refuses a CPU profile (whose measurements are
    divided by the reference instead) and a machine without CUDA, naming ``flag``, the option that asked."""
    import statistics

    from .kernel import require_device, time_reference

    if profile.device != "cuda":
        raise InputError(flag, f"{profile.name!r} is a CPU profile, whose measurements are divided by the "
                         "reference instead", "give a GPU profile (h100, h200) with --profile")
    require_device(profile.device, flag, "run it on the machine to be priced, or give that machine's reference in ms")
    times = [time_reference(profile.device) for _ in range(readings)]
    return statistics.median(times), times
