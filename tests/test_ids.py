import numpy as np
import pytest

from shardplan.cost.ids import expected_shard_stats, shard_bags, table_bags


def test_bags_are_seeded_and_poisson():
    a = table_bags("t", 10_000, 6.0, 1.1, 4096, seed=3)
    b = table_bags("t", 10_000, 6.0, 1.1, 4096, seed=3)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.lengths, b.lengths)
    assert a.lengths.mean() == pytest.approx(6.0, rel=0.05)
    assert a.ids.min() >= 0 and a.ids.max() < 10_000
    assert len(a.ids) == a.lengths.sum()
    c = table_bags("t", 10_000, 6.0, 1.1, 4096, seed=4)
    assert not np.array_equal(a.ids, c.ids)


def test_skew_concentrates_ids():
    flat = table_bags("t", 100_000, 10.0, 0.0, 2048)
    skew = table_bags("t", 100_000, 10.0, 1.3, 2048)
    assert len(np.unique(skew.ids)) < 0.3 * len(np.unique(flat.ids))


def test_shard_bags_keep_only_their_rows():
    bags = table_bags("t", 1000, 5.0, 0.9, 512)
    parts = [shard_bags(bags, off, 250) for off in (0, 250, 500, 750)]
    assert sum(len(p.ids) for p in parts) == len(bags.ids)
    assert np.array_equal(sum(p.lengths for p in parts), bags.lengths)
    assert all(p.ids.min() >= 0 and p.ids.max() < 250 for p in parts)
    # Sample 0's ids that fall in rows 250..500, re-based.
    first = bags.ids[: bags.lengths[0]]
    assert sorted(parts[1].ids[: parts[1].lengths[0]]) == sorted(first[(first >= 250) & (first < 500)] - 250)


@pytest.mark.parametrize("alpha", [0.0, 0.8, 1.0, 1.3])
def test_expected_stats_match_sampled(alpha):
    bags = table_bags("zz", 50_000, 8.0, alpha, 8192)
    part = shard_bags(bags, 10_000, 12_500)
    share, distinct = expected_shard_stats("zz", 50_000, alpha, 10_000, 12_500, float(len(bags.ids)))
    assert share == pytest.approx(len(part.ids) / len(bags.ids), rel=0.1, abs=0.01)
    assert distinct == pytest.approx(len(np.unique(part.ids)), rel=0.1)


def test_torch_twin_draws_the_same_law_and_is_seeded():
    """The GPU's id generator (torch's, run here on CPU) against NumPy's: same law, same row cut."""
    import torch

    from shardplan.cost.ids import shard_bags_torch, table_bags_torch

    a = table_bags_torch("t", 50_000, 8.0, 1.1, 8192, seed=3)
    b = table_bags_torch("t", 50_000, 8.0, 1.1, 8192, seed=3)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.lengths, b.lengths)
    assert not torch.equal(a.ids, table_bags_torch("t", 50_000, 8.0, 1.1, 8192, seed=4).ids)
    assert len(a.ids) == int(a.lengths.sum()) and 0 <= int(a.ids.min()) and int(a.ids.max()) < 50_000
    assert float(a.lengths.double().mean()) == pytest.approx(8.0, rel=0.05)
    ref = table_bags("t", 50_000, 8.0, 1.1, 8192, seed=3)
    ids, counts = np.unique(ref.ids, return_counts=True)
    top = ids[np.argsort(-counts)[:5]]  # the hottest rows sit where the scatter puts them, with their share
    for row in top:
        assert (a.ids == int(row)).double().mean().item() == pytest.approx(float(np.mean(ref.ids == row)), rel=0.15)
    assert len(torch.unique(a.ids)) == pytest.approx(len(np.unique(ref.ids)), rel=0.05)
    # the row cut is the same function of the bags
    as_np = type(ref)(lengths=a.lengths.numpy(), ids=a.ids.numpy())
    for off, rows in ((0, 12_500), (30_000, 20_000)):
        cut, cut_np = shard_bags_torch(a, off, rows), shard_bags(as_np, off, rows)
        assert np.array_equal(cut.ids.numpy(), cut_np.ids) and np.array_equal(cut.lengths.numpy(), cut_np.lengths)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 1.3])
def test_torch_twin_matches_the_expected_stats(alpha):
    from shardplan.cost.ids import shard_bags_torch, table_bags_torch

    bags = table_bags_torch("zz", 50_000, 8.0, alpha, 8192)
    part = shard_bags_torch(bags, 10_000, 12_500)
    share, distinct = expected_shard_stats("zz", 50_000, alpha, 10_000, 12_500, float(len(bags.ids)))
    assert share == pytest.approx(len(part.ids) / len(bags.ids), rel=0.1, abs=0.01)
    assert distinct == pytest.approx(len(np.unique(part.ids.numpy())), rel=0.1)
