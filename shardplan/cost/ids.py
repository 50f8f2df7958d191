"""Synthetic lookups as DESIGN.md's "How a shard is measured" defines them.

Each sample looks up a bag of ids per table. Bag lengths are Poisson with mean
``pooling_factor``. Ids follow a Zipf law of exponent ``zipf_alpha`` over the
table's rows (rank k has probability proportional to k^-alpha, drawn with the
continuous inverse-CDF approximation), and the popularity rank is scattered over
the rows by a fixed bijection ``k -> (k * P + c) mod N`` (P a prime larger than
any table, c from the table's name), as hashing scatters hot ids in real models.
A row-wise shard sees only the ids that fall into its row range.

Everything is seeded: the same table, batch and seed give the same ids on every
rank and in every process, so a plan's ranks are measured on consistent inputs.

Two generators draw the same law. On CPU, NumPy's (:func:`table_bags`, what
the ``cpu-2c`` data were taken with). On a GPU, torch's on the device
(:func:`table_bags_torch`): a large GPU sample looks up some 20 million ids,
which NumPy draws on the host in about a second, longer than building and
timing the op itself. The two give different ids for the same seed, so a
profile keeps to one of them; the torch one runs on CPU too, which is how the
tests check that both draw the same law.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch

_SCATTER_PRIME = 2_654_435_761  # > any num_embeddings we accept; prime, so coprime with N


def table_seed(name: str, seed: int) -> int:
    return (zlib.crc32(name.encode()) ^ (seed * 0x9E3779B1)) & 0xFFFFFFFF


def _zipf_law(u, num_rows: int, alpha: float, floor, power):
    """Popularity ranks (unclipped floats) of uniforms ``u`` by the continuous inverse CDF; ``floor`` and
    ``power`` are NumPy's or torch's, so that both generators apply the one formula."""
    if alpha <= 1e-9:
        return floor(u * num_rows)
    if abs(alpha - 1.0) < 1e-6:
        return floor(power(float(num_rows), u)) - 1
    a1 = 1.0 - alpha
    return floor(power((float(num_rows) ** a1 - 1.0) * u + 1.0, 1.0 / a1)) - 1


def scattered(ranks, name: str, num_rows: int):
    """Where popularity ranks land among a table's rows: the fixed bijection ``(k * P + c) mod N``, with
    ``c`` from the table's name (NumPy arrays or tensors alike)."""
    return (ranks * _SCATTER_PRIME + table_seed(name, 7919) % num_rows) % num_rows


def zipf_ranks(rng: np.random.Generator, num_rows: int, alpha: float, n: int) -> np.ndarray:
    """``n`` popularity ranks in ``[0, num_rows)`` with P(k) ~ (k+1)^-alpha."""
    k = _zipf_law(rng.random(n), num_rows, alpha, np.floor, np.power)
    return np.clip(k, 0, num_rows - 1).astype(np.int64)


@dataclass(frozen=True)
class Bags:
    """Lookups of one table for a batch: ``lengths[b]`` ids for sample b, concatenated in ``ids``."""

    lengths: np.ndarray | torch.Tensor  # int64 [B] (tensors from table_bags_torch)
    ids: np.ndarray | torch.Tensor  # int64 [sum(lengths)]


def table_bags(name: str, num_rows: int, pooling_factor: float, zipf_alpha: float,
               batch_size: int, seed: int = 0) -> Bags:
    """The global batch's lookups into a whole table."""
    rng = np.random.default_rng(table_seed(name, seed))
    lengths = rng.poisson(pooling_factor, size=batch_size).astype(np.int64)
    ranks = zipf_ranks(rng, num_rows, zipf_alpha, int(lengths.sum()))
    ids = scattered(ranks, name, num_rows)
    return Bags(lengths=lengths, ids=ids)


def shard_bags(bags: Bags, row_offset: int, num_rows: int) -> Bags:
    """The part of ``bags`` a shard holding rows ``[row_offset, row_offset+num_rows)`` sees, re-based to 0."""
    keep = (bags.ids >= row_offset) & (bags.ids < row_offset + num_rows)
    sample_of = np.repeat(np.arange(len(bags.lengths)), bags.lengths)
    lengths = np.bincount(sample_of[keep], minlength=len(bags.lengths)).astype(np.int64)
    return Bags(lengths=lengths, ids=bags.ids[keep] - row_offset)


def zipf_ranks_torch(u: torch.Tensor, num_rows: int, alpha: float) -> torch.Tensor:
    """:func:`zipf_ranks`' law applied to uniforms ``u`` (float64, on any device)."""
    return _zipf_law(u, num_rows, alpha, torch.floor, torch.pow).clamp_(0, num_rows - 1).to(torch.int64)


def table_bags_torch(name: str, num_rows: int, pooling_factor: float, zipf_alpha: float,
                     batch_size: int, seed: int = 0, device: str | torch.device = "cpu") -> Bags:
    """:func:`table_bags` drawn by torch's generator on ``device``; ``lengths``/``ids`` are tensors there."""
    gen = torch.Generator(device=device)
    gen.manual_seed(table_seed(name, seed))
    rate = torch.full((batch_size,), float(pooling_factor), dtype=torch.float64, device=device)
    lengths = torch.poisson(rate, generator=gen).to(torch.int64)
    u = torch.rand(int(lengths.sum()), dtype=torch.float64, device=device, generator=gen)
    ids = scattered(zipf_ranks_torch(u, num_rows, zipf_alpha), name, num_rows)
    return Bags(lengths=lengths, ids=ids)


def shard_bags_torch(bags: Bags, row_offset: int, num_rows: int) -> Bags:
    """:func:`shard_bags` for the tensors of :func:`table_bags_torch`."""
    keep = (bags.ids >= row_offset) & (bags.ids < row_offset + num_rows)
    sample_of = torch.repeat_interleave(torch.arange(len(bags.lengths), device=bags.ids.device), bags.lengths)
    lengths = torch.bincount(sample_of[keep], minlength=len(bags.lengths)).to(torch.int64)
    return Bags(lengths=lengths, ids=bags.ids[keep] - row_offset)


_TOP_K = 4096


def zipf_probs(num_rows: int, alpha: float, k: int) -> np.ndarray:
    """Probabilities of popularity ranks ``0..k-1`` under :func:`zipf_ranks`' law."""
    x = np.arange(1, k + 2, dtype=np.float64)
    if num_rows <= 1:  # one row takes every lookup (the laws below divide by zero there)
        return np.eye(1, k).ravel()
    if alpha <= 1e-9:
        return np.full(k, 1.0 / num_rows)
    if abs(alpha - 1.0) < 1e-6:
        cdf = np.log(x) / np.log(num_rows)
    else:
        a1 = 1.0 - alpha
        cdf = (np.power(x, a1) - 1.0) / (float(num_rows) ** a1 - 1.0)
    return np.diff(np.minimum(cdf, 1.0))


def expected_shard_stats(table: str, table_rows: int, zipf_alpha: float, row_offset: int, rows: int,
                         lookups: float) -> tuple[float, float]:
    """(share of a table's lookups that land in the row range, expected distinct rows it touches).

    ``lookups`` is the number of ids drawn from the whole table. The hottest
    ranks are placed exactly with the scatter bijection of :func:`table_bags`;
    the tail is treated as uniform over the remaining rows.
    """
    k = min(table_rows, _TOP_K)
    p = zipf_probs(table_rows, zipf_alpha, k)
    pos = scattered(np.arange(k, dtype=np.int64), table, table_rows)
    inside = (pos >= row_offset) & (pos < row_offset + rows)
    p_in = p[inside]
    tail_mass = max(0.0, 1.0 - float(p.sum()))
    tail_rows = table_rows - k
    tail_rows_in = max(0, rows - int(inside.sum()))
    share = float(p_in.sum())
    distinct = float(np.sum(1.0 - np.power(1.0 - p_in, lookups)))
    if tail_rows > 0 and tail_rows_in > 0:
        per_row = tail_mass / tail_rows
        share += per_row * tail_rows_in
        distinct += tail_rows_in * (1.0 - np.exp(-lookups * per_row))
    return min(share, 1.0), distinct
