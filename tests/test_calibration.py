"""Neighbour calibration (shardplan.cost.calibration) on a fake kernel with a known, tilted host."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shardplan.cost import calibration
from shardplan.cost.kernel import KernelTiming
from shardplan.cost.profiles import get_profile, reference_ms
from shardplan.errors import InputError

REFERENCE_SLOWDOWN = 3.0


def tilted(label_ms: float) -> float:
    """A busy host: the reference 3x slow, short ranks slowed most, long ones least (2x at 1 ms, 1.3x at 45)."""
    return 2.0 * label_ms ** -0.113


@pytest.fixture
def fake_host(monkeypatch):
    """Every stored rank runs at its label times the tilt; calls are counted."""
    prof = get_profile("cpu-2c")
    pool = calibration.labelled_pool(prof)
    label = {r.specs: r.label_ms for r in pool.ranks}
    built: list[tuple] = []

    class FakeOp:
        def __init__(self, specs, *args):
            self.ms = label[tuple(specs)] * tilted(label[tuple(specs)])
            built.append(tuple(specs))

        def run(self, warmup, repeats):
            samples = (self.ms / 2,) * repeats
            return KernelTiming(self.ms / 2, self.ms / 2, samples, samples)

    monkeypatch.setattr(calibration, "RankOp", FakeOp)
    monkeypatch.setattr(calibration, "time_reference", lambda device="cpu": reference_ms(prof) * REFERENCE_SLOWDOWN)
    return prof, pool, built


def test_neighbours_give_back_the_label_where_the_reference_cannot(fake_host):
    prof, pool, built = fake_host
    by_size = np.argsort(pool.features[:, 0])
    for target in (int(by_size[len(by_size) // 10]), int(by_size[9 * len(by_size) // 10])):  # short, long
        r = pool.ranks[target]
        c = calibration.calibrated_timing(list(r.specs), r.optimizer, r.dtype, r.id_seed, prof,
                                          exclude_task=pool.tasks[target])
        assert (c.fwd_ms + c.bwd_ms) == pytest.approx(r.label_ms, rel=0.06)
        # one divisor for every rank is off by the tilt: about 1.6x too low for a 2 ms rank, 2.2x for 30 ms
        assert abs(c.reference_divided_ms / r.label_ms - 1) > 0.3
        assert len(c.neighbours) == calibration.NEIGHBOURS and target not in c.neighbours
        assert all(pool.tasks[i] != pool.tasks[target] for i in c.neighbours)
        assert 1 <= c.passes <= calibration.PASSES


def test_a_second_pass_follows_the_estimate_to_ranks_of_the_right_size(fake_host):
    """The reference-divided first guess of a long rank is far too short; the neighbours' factor moves it,
    so the second pass times ranks near the rank's true size."""
    prof, pool, built = fake_host
    target = int(np.argsort(pool.features[:, 0])[9 * len(pool.ranks) // 10])
    r = pool.ranks[target]
    c = calibration.calibrated_timing(list(r.specs), r.optimizer, r.dtype, r.id_seed, prof,
                                      exclude_task=pool.tasks[target])
    assert c.passes == 2
    first_guess = r.label_ms * tilted(r.label_ms) / REFERENCE_SLOWDOWN
    final = np.exp(pool.features[list(c.neighbours), 0])
    assert np.all(np.abs(np.log(final / r.label_ms)) < np.abs(np.log(first_guess / r.label_ms)))
    assert len(built) == 1 + 2 * calibration.NEIGHBOURS  # the rank once, two neighbour sets


def test_nearest_leaves_out_the_excluded_task_and_is_deterministic():
    pool = calibration.labelled_pool(get_profile("cpu-2c"))
    task = pool.tasks[0]
    specs = list(pool.ranks[0].specs)
    a = calibration.nearest(pool, 10.0, specs, 5, exclude_task=task)
    assert a == calibration.nearest(pool, 10.0, specs, 5, exclude_task=task)
    assert len(a) == 5 and all(pool.tasks[i] != task for i in a)
    near = np.exp(pool.features[list(a), 0])
    assert np.all((near > 3.0) & (near < 30.0))  # ranks of about that size
    assert (near < 10.0).sum() == 2 and (near >= 10.0).sum() == 3  # from both sides
    edge = np.exp(pool.features[list(calibration.nearest(pool, 1e4, specs, 4)), 0])
    assert len(edge) == 4  # past the pool's longest rank, all from the one side there is


def test_neighbours_can_be_chosen_by_named_features_only():
    pool = calibration.labelled_pool(get_profile("cpu-2c"))
    specs = list(pool.ranks[0].specs)
    point = calibration.rank_point(specs, pool.ranks[0].label_ms)
    assert np.allclose(point, pool.features[0])  # the pool's points are the ranks' own, at their labels
    by_rate = calibration.nearest(pool, 10.0, specs, 6, features=("ms", "touched_per_ms"))
    assert by_rate != calibration.nearest(pool, 10.0, specs, 6)  # another feature, other neighbours
    with pytest.raises(InputError, match="features"):
        calibration.nearest(pool, 10.0, specs, 6, features=("ms", "bytes"))


def test_neighbours_that_outgrow_memory_are_timed_in_turns(fake_host, monkeypatch):
    """With room for about one neighbour at a time, each is built and visited beside the rank alone, and
    the figure is the same (the fake host has no drift)."""
    prof, pool, built = fake_host
    target = int(np.argsort(pool.features[:, 0])[len(pool.ranks) // 2])
    r = pool.ranks[target]
    roomy = calibration.calibrated_timing(list(r.specs), r.optimizer, r.dtype, r.id_seed, prof)
    biggest = max(calibration.weight_bytes(list(pool.ranks[i].specs)) for i in roomy.neighbours)
    monkeypatch.setattr(calibration, "available_memory_gb", lambda: biggest * 1.1 / calibration.MEMORY_SHARE / 1e9)
    batches = calibration._fitting_batches(pool, roomy.neighbours)
    assert len(batches) > 1 and sorted(sum(batches, ())) == sorted(roomy.neighbours)
    tight = calibration.calibrated_timing(list(r.specs), r.optimizer, r.dtype, r.id_seed, prof)
    assert tight.neighbours == roomy.neighbours
    assert tight.fwd_ms + tight.bwd_ms == pytest.approx(roomy.fwd_ms + roomy.bwd_ms)


def test_a_profile_without_stored_ranks_is_an_input_error_naming_the_file(monkeypatch):
    from shardplan.errors import InputError

    prof = get_profile("cpu-2c")
    monkeypatch.setattr(calibration, "labelled_pool",
                        lambda p: calibration.LabelledPool((), (), np.zeros((0, 3)), np.ones(3)))
    with pytest.raises(InputError, match="compute-ranks.parquet.*no quiet-gated stored ranks"):
        calibration.calibrated_timing([], "sgd", "fp32", 0, prof)


def _gated_profile(monkeypatch, tmp_path):
    """``cpu-2c`` moved to ``tmp_path`` with a quiet reference of 1 ms and five stored plan ranks: t0 and t2
    passed the quiet gate; t1 (2.4x quiet) and t3 (1.3x) failed it; t4 was taken under the probe's looser limit."""
    import json

    from shardplan.cost import profiles

    monkeypatch.setattr(profiles, "PROFILE_DIR", tmp_path)
    prof = get_profile("cpu-2c")
    prof.dir.mkdir(parents=True)
    (prof.dir / "reference.json").write_text(json.dumps({"reference_ms": 1.0}))
    rows = [(1.05, 1.10, 1.2), (2.3, 2.4, 1.2), (1.0, 1.19, 1.2), (1.0, 1.30, 1.2), (1.5, 1.5, 2.0)]
    pd.DataFrame([{"source": "plan-rank", "task": f"t{i}", "fwd_ms": 3.0, "bwd_ms": 6.0, "ref_before_ms": before,
                   "ref_after_ms": after, "slow_limit": limit} for i, (before, after, limit) in enumerate(rows)]
                 ).to_parquet(prof.dir / "compute-ranks.parquet")
    return prof


def test_only_labels_that_passed_the_quiet_gate_are_labelled(monkeypatch, tmp_path):
    """A rank the collector gave up retrying (its references still over the gate, or a burst between them)
    and one the fitness probe let in are neither neighbours nor probe ranks; a quiet one is."""
    from shardplan.cost import fitness

    prof = _gated_profile(monkeypatch, tmp_path / "profiles")
    df = fitness.labelled_ranks(prof)
    assert list(df.task) == ["t0", "t2"]  # t1: 2.4x quiet; t3: 1.3x; t4: taken under the probe's looser limit
    assert df.label.tolist() == pytest.approx([9.0 / 1.075, 9.0 / 1.095])


def _stored_ranks(n: int) -> tuple[list, np.ndarray, np.ndarray]:
    """The first ``n`` of ``cpu-2c``'s labelled stored ranks: their shards, labels and tasks (for the replays)."""
    pool = calibration.labelled_pool(get_profile("cpu-2c"))
    ranks = pool.ranks[:n]
    return [list(r.specs) for r in ranks], np.array([r.label_ms for r in ranks]), np.array(pool.tasks[:n])


def test_a_replayed_calibration_divides_a_hosts_slowdown_out_and_shows_one_bad_label(load_script):
    """bench/calibration_replay.py: ranks re-timed on a host 1.4x slow are given back their labels by their
    neighbours' factor, and a rank whose label is 30% long reads as that, not hidden by its neighbours."""
    replay = load_script("bench/calibration_replay.py")
    specs, labels, tasks = _stored_ranks(60)
    raw = 1.4 * labels
    assert replay.replay(labels, raw, specs, tasks, k=6) == pytest.approx(np.zeros(60), abs=1e-9)
    bad = labels.copy()
    bad[10] *= 1.3
    err = replay.replay(bad, raw, specs, tasks, k=6)
    assert err[10] == pytest.approx(1 / 1.3 - 1)  # its neighbours are of other tasks: their labels are right
    assert np.median(np.abs(np.delete(err, 10))) < 1e-9  # only the few it serves as a neighbour move


def test_the_pooled_replay_divides_out_a_slowdown_that_runs_with_rank_length(load_script):
    """The pooled recipe fits the factor over every other task's rank: a host 1.4x slow everywhere is divided out
    exactly (the level is not shrunk), and one that slows short ranks more to a few per cent a rank."""
    replay = load_script("bench/calibration_replay.py")
    specs, labels, tasks = _stored_ranks(80)
    assert replay.pooled_replay(labels, 1.4 * labels, specs, tasks) == pytest.approx(np.zeros(80), abs=1e-9)
    tilted = labels * 2.0 * (labels / np.median(labels)) ** -0.3  # short ranks lose the most
    err = replay.pooled_replay(labels, tilted, specs, tasks)
    assert np.median(np.abs(err)) < 0.03  # the ridge shrinks the slope a little
    one_factor = tilted / labels / np.median(tilted / labels) - 1  # what a single divisor would leave
    assert np.median(np.abs(err)) < np.median(np.abs(one_factor)) / 3


def test_the_replay_reports_short_and_long_ranks_apart(load_script):
    """The instrument's floor is the short ranks': the replay's bands split the ranks by label, each once."""
    replay = load_script("bench/calibration_replay.py")
    labels = np.array([2.0, 9.99, 10.0, 40.0])
    bands = dict(replay.length_bands(labels, 10.0))
    assert list(bands) == ["all", "under 10 ms", "10 ms or more"]
    assert bands["under 10 ms"].tolist() == [True, True, False, False]
    assert (bands["under 10 ms"] ^ bands["10 ms or more"]).all() and bands["all"].all()
    cols = replay.error_columns(np.array([0.2, -0.06, 0.1, -0.12]))
    assert cols["ranks"] == 4 and cols["within 15%"] == "75%" and cols["within 10%"] == "50%"
    assert cols["mean error"] == "+3.0%" and cols["mean abs error"] == "12.0%"
    assert replay.error_columns(np.array([])) == {"ranks": 0}


def test_the_instrument_check_keeps_the_label_window_and_times_each_visit_count_in_turn(load_script, monkeypatch,
                                                                                         tmp_path):
    nc = load_script("bench/neighbour_calibration.py")
    calls = []

    def fake_timing(specs, optimizer, dtype, id_seed, profile, k, visits, passes, exclude_task, features):
        calls.append(visits)
        return calibration.CalibratedTiming(1.0, 1.0, 2.0, 1.0, (), 1)

    monkeypatch.setattr(nc, "calibrated_timing", fake_timing)
    monkeypatch.setattr("sys.argv", ["neighbour_calibration.py", "--profile", "cpu-2c", "--targets", "8",
                                     "--label-ms", "1", "10", "--visits", "3", "--visits", "12",
                                     "--out", str(tmp_path), "--name", "t"])
    nc.main()
    df = pd.read_csv(tmp_path / "neighbour-calibration-cpu-2c-t.csv")
    assert df.label_ms.between(1, 10, inclusive="left").all()
    assert calls[:2] == [3, 12] and len(calls) == 2 * df.target.nunique()
    assert (df.groupby("target").visits.apply(sorted).apply(tuple) == (3, 12)).all()
    report = (tmp_path / "neighbour-calibration-cpu-2c-t.md").read_text()
    assert "3 visits" in report and "12 visits" in report
    monkeypatch.setattr("sys.argv", ["neighbour_calibration.py", "--profile", "cpu-2c", "--label-ms", "500", "600",
                                     "--out", str(tmp_path)])
    with pytest.raises(InputError, match="--label-ms"):
        nc.main()


def test_a_data_folder_without_the_failed_labels_keeps_the_rest(load_script, monkeypatch, tmp_path):
    bench = load_script("bench/gate_failures.py")
    prof = _gated_profile(monkeypatch, tmp_path / "profiles")
    (prof.dir / "comm.parquet").write_text("x")
    lines = bench.write_passed("cpu-2c", tmp_path / "passed")
    kept = pd.read_parquet(tmp_path / "passed" / "compute-ranks.parquet")
    assert list(kept.task) == ["t0", "t2", "t4"]  # t4 is no collector's row: the probe's own rule kept it
    assert (tmp_path / "passed" / "comm.parquet").is_symlink()
    assert lines == ["`compute-ranks.parquet`: 5 rows, 2 left out"]


def test_gate_failures_bands_rows_by_how_slow_the_reference_read(load_script):
    bench = load_script("bench/gate_failures.py")
    df = pd.DataFrame({"ref_before_ms": [1.0, 1.30, 1.5, 2.4, 1.0], "ref_after_ms": [1.1, 1.30, 1.6, 2.5, 1.19 * 1.3]})
    # passed; failed at 1.3x; at 1.6x; at 2.5x; a burst (1.0 then 1.55: unsteady) at 1.55x
    assert list(bench.gate_band(df, 1.0)) == [bench.BANDS[0], bench.BANDS[1], bench.BANDS[2], bench.BANDS[3],
                                              bench.BANDS[2]]
