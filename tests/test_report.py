"""``shardplan report``: the self-contained HTML plan report."""
from __future__ import annotations

import json
import re

from shardplan.cli import main


def test_report_draws_every_plan_and_compares_them(tmp_path, task_dict, model_path) -> None:
    (tmp_path / "task.json").write_text(json.dumps(task_dict))
    paths = []
    for searcher in ("greedy-cost", "round-robin"):
        out = tmp_path / f"{searcher}.json"
        assert main(["plan", str(tmp_path / "task.json"), "--searcher", searcher, "--model", str(model_path),
                     "-o", str(out)]) == 0
        paths.append(str(out))
    unpriced = json.loads(open(paths[1]).read())
    del unpriced["cost"]  # the report prices a plan that has no cost block
    (tmp_path / "unpriced.json").write_text(json.dumps(unpriced))
    report = tmp_path / "r" / "report.html"
    assert main(["report", paths[0], str(tmp_path / "unpriced.json"), "--model", str(model_path),
                 "-o", str(report)]) == 0
    page = report.read_text()
    assert page.count("<svg") == 2  # one figure per plan, inline
    assert not re.search(r"(src|href)=[\"']https?://", page)  # nothing fetched from the network
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    assert len(rows) == 3 and "greedy-cost" in rows[1] and "round-robin" in rows[2]
    assert "capacity" in page and "bwd compute" in page


def test_report_of_an_invalid_plan_exits_2_and_writes_nothing(tmp_path, plan_dict, model_path) -> None:
    plan_dict["tables"][0]["shards"][0]["rank"] = 7  # no such rank
    (tmp_path / "bad.json").write_text(json.dumps(plan_dict))
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "bad.json"), "--model", str(model_path), "-o", str(out)]) == 2
    assert not out.exists()


def test_a_measured_block_says_when_the_host_ran_the_labels_far_off() -> None:
    from shardplan.domain import PlanCost, RankCost
    from shardplan.report_text import FAR_FACTOR, measured_note

    def block(factors, ref=4.27):
        ranks = tuple(RankCost(r, 1.0, 2.0, 0.1, 0.1, 0.5) for r in range(len(factors)))
        return PlanCost("measured", "cpu-2c", ranks, {"compute": "measured: neighbour calibration",
                                                      "comm_model": "fitted", "reference_slowdown": ref,
                                                      "calibration_factor_per_rank": factors})

    near = measured_note(block([0.9, 1.1, 1.3, None]))  # a rank with no shards has no factor
    assert near == "compute: measured: neighbour calibration; comm: fitted"
    far = measured_note(block([1.99, 2.28, 2.40, 2.13])).splitlines()
    assert len(far) == 2 and "1.99-2.40x their labels" in far[1] and "4.27x quiet" in far[1]
    assert "about 2.2x" in far[1]  # the median factor: what a raw figure would have read
    assert "scatters about twice" in far[1] and "profiles --probe" in far[1]  # and how far to trust it
    assert len(measured_note(block([1 / (FAR_FACTOR + 0.1)] * 3)).splitlines()) == 2  # fast hosts too
    uncalibrated = block([])
    del uncalibrated.extra["calibration_factor_per_rank"]
    assert len(measured_note(uncalibrated).splitlines()) == 1  # reference-divided: no factors to read
