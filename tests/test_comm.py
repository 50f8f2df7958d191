import pytest

from shardplan.cost.comm import AlphaBetaCommModel, FittedCommModel, rank_volumes
from shardplan.cost.comm_collect import collect_comm
from shardplan.cost.profiles import get_profile
from shardplan.formats import load_plan


def test_table_wise_volumes_by_hand(plan_dict):
    plan_dict["tables"] = [plan_dict["tables"][0]] + [
        {"name": "b", "sharding_type": "table_wise", "shards": [
            {"rank": 1, "row_offset": 0, "num_rows": 500, "col_offset": 0, "num_cols": 8}]},
        {"name": "c", "sharding_type": "table_wise", "shards": [
            {"rank": 1, "row_offset": 0, "num_rows": 2000, "col_offset": 0, "num_cols": 32}]}]
    vols = rank_volumes(load_plan(plan_dict))
    b_l = 64
    # rank 0 holds a (16 cols): sends rank 1 its 64 x 16 slice; receives b and c slices (8 + 32 cols).
    assert vols[0].send == b_l * 16 * 4 and vols[0].recv == b_l * 40 * 4
    assert vols[1].send == b_l * 40 * 4 and vols[1].recv == b_l * 16 * 4
    assert vols[0].send_inter == 0  # one host


def _reference_volumes(plan):
    """The volume rules applied message by message (slow, obviously right)."""
    from shardplan.cost.comm import RankVolume

    task, topo = plan.task, plan.task.topology
    vols = [RankVolume() for _ in range(topo.world_size)]

    def p2p(src, dst, nbytes):
        if src == dst:
            return
        if topo.host_of(src) == topo.host_of(dst):
            vols[src].send_intra += nbytes
            vols[dst].recv_intra += nbytes
        else:
            vols[src].send_inter += nbytes
            vols[dst].recv_inter += nbytes

    for ts in plan.tables:
        if ts.sharding_type == "data_parallel":
            t = task.table(ts.name)
            for v in vols:
                v.allreduce += 2 * (topo.world_size - 1) / topo.world_size * t.num_embeddings * t.embedding_dim * 4
            continue
        for sh in ts.shards:
            slice_bytes = task.batch_size_per_rank * sh.num_cols * 4
            for q in range(topo.world_size):
                same = topo.host_of(q) == topo.host_of(sh.rank)
                share = 1 if ts.sharding_type != "table_row_wise" or same else 1 / len(ts.shards)
                p2p(sh.rank, q, slice_bytes * share)
    return vols


def test_volumes_match_message_by_message_rules(plan_dict):
    full = {"row_offset": 0, "col_offset": 0}
    plan_dict["task"]["topology"] = {"world_size": 4, "local_world_size": 2, "memory_per_rank_gb": 1.0}
    plan_dict["tables"] = [
        {"name": "a", "sharding_type": "table_wise", "shards": [dict(full, rank=3, num_rows=1000, num_cols=16)]},
        {"name": "b", "sharding_type": "table_row_wise", "shards": [
            dict(full, rank=2, num_rows=250, num_cols=8), {"rank": 3, "row_offset": 250, "num_rows": 250,
                                                          "col_offset": 0, "num_cols": 8}]},
        {"name": "c", "sharding_type": "column_wise", "shards": [
            dict(full, rank=0, num_rows=2000, num_cols=16),
            dict(full, rank=1, num_rows=2000, num_cols=8, col_offset=16),
            dict(full, rank=3, num_rows=2000, num_cols=8, col_offset=24)]}]
    got = rank_volumes(load_plan(plan_dict))
    want = _reference_volumes(load_plan(plan_dict))
    for g, w in zip(got, want):
        assert (g.send_intra, g.send_inter, g.recv_intra, g.recv_inter) == pytest.approx(
            (w.send_intra, w.send_inter, w.recv_intra, w.recv_inter))


def test_data_parallel_is_allreduce_only(plan_dict):
    full = {"row_offset": 0, "num_rows": 500, "col_offset": 0, "num_cols": 8}
    plan_dict["tables"] = [{"name": "b", "sharding_type": "data_parallel",
                            "shards": [dict(full, rank=0), dict(full, rank=1)]}]
    vols = rank_volumes(load_plan(plan_dict))
    assert vols[0].send == 0 and vols[0].allreduce == pytest.approx(2 * 1 / 2 * 500 * 8 * 4)


def test_fitted_model_recovers_a_linear_law():
    rows = []
    for w in (2, 3, 4):
        for config, (s, r) in enumerate([(s, r) for s in (1e4, 1e5, 1e6, 4e6) for r in (2e4, 3e5, 2e6)]):
            # Two ranks per collective: this one and a busier peer that sets the peak.
            peak = max(s, r, 3e6 * (config % 3))
            for send, recv in ((s, r), (peak, peak)):
                rows.append({"world_size": w, "config": config, "send_bytes": send, "recv_bytes": recv,
                             "ms": 0.2 + 0.05 * (w - 1) + (0.8 * send + 0.3 * recv + 0.5 * peak) / 1e6})
    m = FittedCommModel.fit(rows, "cpu-2c")
    assert m.coef == pytest.approx((0.2, 0.05, 0.8, 0.3, 0.5), rel=1e-3, abs=1e-6)
    assert m.fit_report["mape"] < 1e-3


def test_alpha_beta_prefers_nvlink_to_network():
    from shardplan.cost.comm import RankVolume
    from shardplan.domain import Topology

    m = AlphaBetaCommModel(profile="h100")
    one_host = m.rank_comm_ms([RankVolume(send_intra=1e8, recv_intra=1e8)] * 8, Topology(8, 8))
    two_hosts = m.rank_comm_ms([RankVolume(send_inter=1e8, recv_inter=1e8)] * 16, Topology(16, 8))
    assert one_host[0][0] == pytest.approx(0.01 + 1e8 / 450e9 * 1e3)
    assert two_hosts[0][0] > 5 * one_host[0][0]


def test_collect_comm_on_gloo(tmp_path):
    df = collect_comm(get_profile("cpu-2c"), tmp_path / "comm.parquet", world_sizes=(2,),
                      configs_per_world=2, repeats=2)
    assert len(df) == 4  # 2 configs x 2 ranks
    assert (df["ms"] > 0).all() and (df["send_bytes"] > 0).all()
    again = collect_comm(get_profile("cpu-2c"), tmp_path / "comm.parquet", world_sizes=(2,),
                         configs_per_world=2, repeats=2)
    assert len(again) == 4
