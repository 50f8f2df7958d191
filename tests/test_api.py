"""The REST service, started for real (uvicorn on loopback) and spoken to over HTTP."""
from __future__ import annotations

import copy
import json
import threading
import time

import httpx
import pytest
import schemathesis
from schemathesis import checks
from hypothesis import HealthCheck, given, settings

from shardplan.api.launch import running_service
from shardplan.formats import load_plan
from shardplan.validate import validate_plan

from conftest import ROOT

DEFAULT_TASK = json.loads((ROOT / "data" / "tasks" / "default.json").read_text())
MAX_BODY = 400_000  # small enough that a test can send one larger
MAX_TABLES = 40


@pytest.fixture(scope="module")
def server() -> str:
    with running_service("--max-body-bytes", str(MAX_BODY), "--max-tables", str(MAX_TABLES),
                         "--max-world-size", "64", "--max-budget-s", "20") as url:
        yield url


def test_service_lists_searchers_profiles_and_health(server: str) -> None:
    searchers = httpx.get(server + "/v1/searchers").json()
    assert [s["name"] for s in searchers if s["default"]] == ["neuroshard"]
    assert {"torchrec", "greedy-cost", "random"} <= {s["name"] for s in searchers}
    profiles = {p["name"]: p for p in httpx.get(server + "/v1/profiles").json()}
    names = ["cpu-2c", "cpu-2c-nested", "cpu-2c-nested-rowwise-adagrad", "cpu-2c-xeon", "cpu-2c-zen4", "h100", "h200"]
    for name in names:  # each with its own trained model
        assert profiles[name]["loaded"] and profiles[name]["compute_model"].startswith("neural")
    assert [name for name, p in profiles.items() if p["default"]] == ["cpu-2c"]
    # which optimizer and weight type each prices: a task of another kind is refused, not priced as this one
    assert profiles["cpu-2c"]["optimizers"] == ["sgd"] and profiles["cpu-2c"]["dtypes"] == ["fp32"]
    assert profiles["cpu-2c-nested-rowwise-adagrad"]["optimizers"] == ["rowwise_adagrad"]
    assert httpx.get(server + "/healthz").json()["profiles"] == names


def test_a_gpu_profile_plans_with_the_model_it_names(server: str, task_dict: dict) -> None:
    # a CPU task is not priced by a GPU profile: the answer names the field and the fix
    r = httpx.post(server + "/v1/plans", params={"profile": "h100"}, json=task_dict, timeout=60)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "topology", "device"], r.text
    gpu_task = dict(task_dict, topology={**task_dict["topology"], "device": "cuda"})
    r = httpx.post(server + "/v1/plans", params={"profile": "h100", "searcher": "neuroshard-tw"}, json=gpu_task,
                   timeout=60)
    assert r.status_code == 200, r.text
    # evaluated as it was priced unless told another profile
    again = httpx.post(server + "/v1/evaluations", json=r.json(), timeout=60)
    assert again.status_code == 200 and again.json()["cost"]["profile"] == "h100", again.text
    assert r.json()["cost"]["compute_model"].startswith("neural") and r.json()["cost"]["profile"] == "h100"
    # priced at a slow host's state: every rank's compute costs more, and the cost names the state
    slow = httpx.post(server + "/v1/evaluations", params={"profile": "h100", "host_reference_ms": 1.5},
                      json=dict(r.json(), cost=None), timeout=60)
    assert slow.status_code == 200, slow.text
    assert "host reference of 1.500 ms" in slow.json()["cost"]["compute_model"]
    compute = [[q["fwd_compute_ms"] + q["bwd_compute_ms"] for q in c["per_rank"]]
               for c in (r.json()["cost"], slow.json()["cost"])]
    assert all(s > p for s, p in zip(compute[1], compute[0]) if p > 0)
    # a CPU profile has no host-state gains: a 422 naming the field
    bad = httpx.post(server + "/v1/plans", params={"profile": "cpu-2c", "host_reference_ms": 0.8}, json=task_dict,
                     timeout=60)
    assert bad.status_code == 422 and "host_reference_ms" in bad.text
    # a task the profile has no costs for points at its field: in a task body, and in a plan body's task
    fp16 = httpx.post(server + "/v1/plans", json=dict(task_dict, dtype="fp16"), timeout=60)
    assert _error(fp16, 422)["loc"] == ["body", "dtype"] and "--dtype fp16" in fp16.text
    cpu_plan = httpx.post(server + "/v1/plans", json=task_dict, timeout=60).json()
    moved = dict(cpu_plan, task=dict(cpu_plan["task"], topology={**cpu_plan["task"]["topology"], "device": "cuda"}))
    assert _error(httpx.post(server + "/v1/evaluations", params={"profile": "cpu-2c"}, json=moved, timeout=60),
                  422)["loc"] == ["body", "task", "topology", "device"]


def test_plan_then_evaluate_round_trip(server: str, task_dict: dict) -> None:
    r = httpx.post(server + "/v1/plans", params={"searcher": "greedy-cost", "seed": 3}, json=task_dict, timeout=60)
    assert r.status_code == 200, r.text
    plan = load_plan(r.json())
    validate_plan(plan)
    assert plan.search["searcher"] == "greedy-cost" and plan.search["seed"] == 3
    assert plan.cost.kind == "predicted" and len(plan.cost.per_rank) == 2
    again = httpx.post(server + "/v1/plans", params={"searcher": "greedy-cost", "seed": 3}, json=task_dict,
                       timeout=60).json()
    assert again["tables"] == r.json()["tables"]  # deterministic for a seed
    body = dict(r.json(), cost=None)
    ev = httpx.post(server + "/v1/evaluations", json=body, timeout=60)
    assert ev.status_code == 200, ev.text
    assert ev.json()["cost"]["max_ms"] == pytest.approx(r.json()["cost"]["max_ms"], rel=1e-6)


def test_plan_restricted_to_the_types_gloo_runs(server: str, task_dict: dict) -> None:
    types = ["table_wise", "column_wise", "data_parallel"]
    r = httpx.post(server + "/v1/plans", params={"sharding_types": types}, json=task_dict, timeout=60)
    assert r.status_code == 200, r.text
    assert {t["sharding_type"] for t in r.json()["tables"]} <= set(types)
    r = httpx.post(server + "/v1/plans", params={"searcher": "random", "sharding_types": types}, json=task_dict)
    assert r.status_code == 200, r.text  # every searcher takes the restriction
    r = httpx.post(server + "/v1/plans", params={"searcher": "random", "sharding_types": types[1:]}, json=task_dict)
    assert _error(r, 422)["loc"] == ["query", "sharding_types"]  # no table_wise: not a usable restriction
    pinned = dict(task_dict, tables=[dict(task_dict["tables"][0], sharding_types=["data_parallel"]),
                                     *task_dict["tables"][1:]])  # a trainer's per-table constraint, in the body
    for searcher in ("neuroshard", "greedy-size"):
        r = httpx.post(server + "/v1/plans", params={"searcher": searcher}, json=pinned, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["tables"][0]["sharding_type"] == "data_parallel", searcher
        assert r.json()["task"]["tables"][0]["sharding_types"] == ["data_parallel"]  # the plan's task keeps it


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    (item,) = r.json()["detail"]
    return item


def test_bad_requests_get_4xx_naming_the_field(server: str, task_dict: dict, plan_dict: dict) -> None:
    bad = copy.deepcopy(task_dict)
    bad["tables"][1]["embedding_dim"] = -8
    assert _error(httpx.post(server + "/v1/plans", json=bad), 422)["loc"] == ["body", "tables", 1, "embedding_dim"]
    malformed = httpx.post(server + "/v1/plans", content=b'{"format": ', headers={"content-type": "application/json"})
    assert _error(malformed, 422)["type"] == "json_invalid"
    assert _error(httpx.post(server + "/v1/plans", params={"searcher": "nope"}, json=task_dict), 422)["loc"] == [
        "query", "searcher"]
    item = _error(httpx.post(server + "/v1/plans", params={"profile": "nope"}, json=task_dict), 422)
    assert item["loc"] == ["query", "profile"] and "cpu-2c" in item["msg"]
    huge = copy.deepcopy(task_dict)
    huge["tables"][0]["num_embeddings"] = 10**9  # 64 GB at dim 16, over 2 ranks of 10 MB
    item = _error(httpx.post(server + "/v1/plans", json=huge, timeout=60), 422)
    assert item["type"] == "infeasible" and item["loc"] == ["body", "tables", 0]  # a path into the body
    for searcher in ("greedy-size", "neuroshard"):  # the baselines' and the beam's refusals alike
        item = _error(httpx.post(server + "/v1/plans", params={"searcher": searcher}, json=huge, timeout=60), 422)
        assert item["loc"][:3] == ["body", "tables", 0] and repr(task_dict["tables"][0]["name"]) in item["msg"]
    wide = copy.deepcopy(task_dict)
    wide["tables"] = [dict(task_dict["tables"][0], name=f"t{i}") for i in range(MAX_TABLES + 1)]
    item = _error(httpx.post(server + "/v1/plans", json=wide), 422)
    assert item["loc"] == ["body", "tables"] and str(MAX_TABLES) in item["msg"]
    item = _error(httpx.post(server + "/v1/plans", content=b" " * (MAX_BODY + 1),
                             headers={"content-type": "application/json"}), 413)
    assert "--max-body-bytes" in item["msg"]
    overlap = copy.deepcopy(plan_dict)
    overlap["tables"][0]["shards"][0]["num_rows"] = 10  # rows 10.. of table a are not covered
    assert _error(httpx.post(server + "/v1/evaluations", json=overlap), 422)["loc"][:2] == ["body", "tables"]
    # NaN and Infinity are no JSON, but Python's parser reads them: the 422 echoes them as text (it was a 500)
    for value in (float("nan"), float("inf")):
        odd = copy.deepcopy(task_dict)
        odd["tables"][0]["pooling_factor"] = value
        body = json.dumps(odd)  # writes NaN / Infinity
        item = _error(httpx.post(server + "/v1/plans", content=body, headers={"content-type": "application/json"}),
                      422)
        assert item["loc"] == ["body", "tables", 0, "pooling_factor"] and item["input"] == str(value)


def test_time_budget_stops_a_long_search(server: str) -> None:
    r = httpx.post(server + "/v1/plans", params={"searcher": "neuroshard", "budget_s": 0.05}, json=DEFAULT_TASK,
                   timeout=60)
    item = _error(r, 422)
    assert item["type"] == "time_budget" and item["loc"] == ["query", "budget_s"]
    too_long = httpx.post(server + "/v1/plans", params={"budget_s": 1000}, json=DEFAULT_TASK)
    assert _error(too_long, 422)["loc"] == ["query", "budget_s"]


def test_planning_does_not_stall_the_event_loop(server: str) -> None:
    slow = threading.Thread(target=httpx.post, args=(server + "/v1/plans",),
                            kwargs={"params": {"searcher": "neuroshard"}, "json": DEFAULT_TASK, "timeout": 60})
    slow.start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    assert httpx.get(server + "/healthz", timeout=10).status_code == 200
    answered_in = time.perf_counter() - t0
    slow.join()
    assert answered_in < 1.0


OPERATIONS = [("GET", "/healthz"), ("GET", "/v1/searchers"), ("GET", "/v1/profiles"),
              ("POST", "/v1/plans"), ("POST", "/v1/evaluations")]


@pytest.mark.parametrize("method,path", OPERATIONS)
def test_schemathesis_finds_no_server_error_or_schema_break(server: str, method: str, path: str) -> None:
    """Requests generated from the OpenAPI document: no 5xx, every response valid against it."""
    schema = schemathesis.openapi.from_url(server + "/openapi.json")
    operation = schema[path][method]

    @settings(max_examples=40 if method == "POST" else 5, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def check(case) -> None:
        if (case.query or {}).get("budget_s", 0) > 5:
            case.query["budget_s"] = 5  # keep the run short; the budget itself is tested above
        # Semantic 422s (a plan that does not tile, a task over memory) are right answers to
        # schema-valid requests, so "positive data accepted" is not one of the checks.
        case.call_and_validate(timeout=60, checks=[
            checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
            checks.response_schema_conformance, checks.response_headers_conformance])

    check()
