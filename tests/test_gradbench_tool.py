"""The GradBench tool (python -m symgrad.gradbench) speaks GradBench's protocol and its answers pass
GradBench's checks: on small inputs generated as GradBench's evals generate theirs, against the
answers of GradBench's reference (its C++ manual tool; for particle and saddle the evals' own
values), compared as GradBench's ``mismatch`` validator does (``compare_json_objects``,
vendored below, tolerance 1e-4). tests/data/gradbench/make_cases.py made the cases."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CASES = json.loads(gzip.open(Path(__file__).parent / "data/gradbench/cases.json.gz", "rt").read())


def difference(x, y):
    """GradBench's comparison.py (from ADBench's JacobianComparison.cs)."""
    return np.abs(x - y) / np.clip(np.abs(x) + np.abs(y), a_min=1, a_max=None)


def mismatches(expected, actual, tolerance=1e-4, path=""):
    """GradBench's compare_json_objects: the places where ``actual`` differs from ``expected``."""
    if type(expected) is int and type(actual) is float:
        expected = float(expected)
    if type(expected) is float and type(actual) is int:
        actual = float(actual)
    if type(expected) is not type(actual):
        return [f"{path}: type {type(expected)} expected, got {type(actual)}"]
    if isinstance(expected, dict):
        if set(expected) != set(actual):
            return [f"{path}: keys {sorted(expected)} expected, got {sorted(actual)}"]
        return [m for key in expected
                for m in mismatches(expected[key], actual[key], tolerance, f"{path}.{key}")]
    if isinstance(expected, list):
        if len(expected) != len(actual):
            return [f"{path}: length {len(expected)} expected, got {len(actual)}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual))
                for m in mismatches(e, a, tolerance, f"{path}[{i}]")]
    if isinstance(expected, float):
        far = difference(np.array(actual), np.array(expected)) > tolerance
        return [f"{path}: {expected} != {actual}"] if far else []
    return [] if expected == actual else [f"{path}: {expected} != {actual}"]


def session(messages: list[dict]) -> list[dict]:
    """The tool's responses to ``messages``, one tool process, as GradBench's CLI runs it."""
    lines = "".join(json.dumps(m) + "\n" for m in messages)
    done = subprocess.run([sys.executable, "-m", "symgrad.gradbench"], input=lines, capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parents[1])
    return [json.loads(line) for line in done.stdout.splitlines()]


def run_cases(cases: list[dict]) -> list[tuple[dict, dict]]:
    """Start, define each eval once, evaluate each case (one run): (case, response) pairs."""
    messages = [{"id": 0, "kind": "start"}]
    for name in dict.fromkeys(case["eval"] for case in cases):
        messages.append({"id": len(messages), "kind": "define", "module": name})
    asked = {}
    for case in cases:
        asked[len(messages)] = case
        messages.append({"id": len(messages), "kind": "evaluate", "module": case["eval"],
                         "function": case["function"], "input": case["input"] | {"min_runs": 1, "min_seconds": 0}})
    responses = session(messages)
    assert [r["id"] for r in responses] == [m["id"] for m in messages]
    assert responses[0]["tool"] == "symgrad"
    assert all(r["success"] for r in responses[1:len(messages) - len(cases)])
    return [(asked[r["id"]], r) for r in responses if r["id"] in asked]


def check(case: dict, response: dict) -> None:
    assert response["success"], response.get("error")
    names = [t["name"] for t in response["timings"]]
    assert names.count("evaluate") >= 1 and all(t["nanoseconds"] >= 0 for t in response["timings"])
    found = mismatches(case["expected"], response["output"])
    assert not found, f"{case['eval']} {case['function']}: {found[:5]}"


def test_hello_as_the_eval_runs_it():
    x, inputs = 1.0, []
    for _ in range(4):  # as GradBench's hello eval: y = square(x), x = double(y)
        inputs += [("square", x), ("double", x * x)]
        x = 2 * x * x
    messages = [{"id": 0, "kind": "start", "eval": "hello"}, {"id": 1, "kind": "define", "module": "hello"}]
    messages += [{"id": 2 + i, "kind": "evaluate", "module": "hello", "function": function, "input": value}
                 for i, (function, value) in enumerate(inputs)]
    messages.append({"id": len(messages), "kind": "analysis", "of": 2, "valid": True})
    responses = session(messages)
    assert responses[-1] == {"id": len(messages) - 1}
    assert [r["output"] for r in responses[2:-1]] == [1.0, 2.0, 4.0, 8.0, 64.0, 128.0, 16384.0, 32768.0]


def test_unknown_module_and_function_fail_without_ending_the_session():
    responses = session([{"id": 0, "kind": "define", "module": "nope"},
                         {"id": 1, "kind": "define", "module": "lse"},
                         {"id": 2, "kind": "evaluate", "module": "lse", "function": "nope", "input": {"x": [1.0]}},
                         {"id": 3, "kind": "evaluate", "module": "lse", "function": "primal",
                          "input": {"x": [1.0]}}])
    assert [r["success"] for r in responses] == [False, True, False, True]
    assert responses[3]["output"] == 1.0
    assert responses[2]["error"] == "lse has no function 'nope': it has gradient, primal"


def test_malformed_messages_are_answered_not_fatal():
    """A line that is not JSON, a define without a module, an evaluate before its define: each gets
    an error, and the session goes on."""
    lines = "nonsense\n" + "".join(json.dumps(m) + "\n" for m in (
        {"id": 1, "kind": "define"}, {"id": 2, "kind": "evaluate", "module": "lse", "function": "primal"},
        {"id": 3, "kind": "start"}))
    done = subprocess.run([sys.executable, "-m", "symgrad.gradbench"], input=lines, capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parents[1])
    responses = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in responses] == [None, 1, 2, 3] and responses[3]["tool"] == "symgrad"
    assert "unreadable message 'nonsense'" in responses[0]["error"]
    assert responses[2]["error"] == "module 'lse' is not defined (a define message first)"


@pytest.mark.parametrize("evals", [("lse", "llsq", "kmeans", "ode", "det", "gmm", "lstm"), ("ba",), ("ht",)])
def test_answers_pass_gradbench_checks(evals):
    cases = [case for case in CASES if case["eval"] in evals]
    assert cases
    for case, response in run_cases(cases):
        check(case, response)


@pytest.mark.parametrize("name, modes", [("saddle", ("ff", "fr", "rf", "rr")), ("particle", ("ff", "rr"))])
def test_nested_descent(name, modes):
    """The mode pairs: forward or reverse outside, forward or reverse inside (particle's traced
    through ~100 Euler steps for each w the descent tries: ff and rr, the two kinds at both levels)."""
    answers = run_cases([c for c in CASES if c["eval"] == name and c["function"] in modes])
    assert len(answers) == len(modes)
    for case, response in answers:
        check(case, response)


def test_a_wrong_answer_is_caught():
    assert mismatches([1.0, {"a": 2.0}], [1.00001, {"a": 2.001}]) == ["[1].a: 2.0 != 2.001"]
    assert mismatches({"rows": [0, 15]}, {"rows": [0, 14]}) == [".rows[1]: 15 != 14"]
