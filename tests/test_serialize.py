"""Pickling (expressions, compiled and traced functions, across processes) and sg.dumps / sg.loads."""

import json
import math
import multiprocessing
import pickle

import numpy as np
import pytest
from graphs import VARS, dags
from hypothesis import HealthCheck, given, settings

import symgrad as sg

x, y = sg.symbols("x y")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_ops=12), dags(max_ops=6))
def test_dumps_loads_gives_back_the_same_nodes(f, g):
    assert sg.loads(sg.dumps(f)) is f
    assert sg.loads(sg.dumps([f, g, f])) == [f, g, f]
    arr = np.array([[f, g], [g, VARS[0]]], dtype=object)
    back = sg.loads(sg.dumps(arr, indent=1))
    assert back.shape == (2, 2) and all(a is b for a, b in zip(back.ravel(), arr.ravel()))
    assert sg.loads(sg.dumps({"f": f, "g": g})) == {"f": f, "g": g}


def test_constants_come_back_bit_for_bit():
    consts = [-0.0, 0.0, math.nan, math.inf, -math.inf, 0.1, 1e-310, 2.0 ** 0.5]
    back = sg.loads(sg.dumps([c * x for c in consts] + [sg.const(c) for c in consts]))
    assert [str(e) for e in back] == [str(c * x) for c in consts] + [str(sg.const(c)) for c in consts]
    assert math.copysign(1.0, back[-8].value) == -1.0 and math.isnan(back[-6].value)


def test_the_document_is_versioned_json():
    doc = json.loads(sg.dumps(sg.sin(x) * y))
    assert (doc["format"], doc["version"], doc["kind"]) == ("symgrad", 1, "expr")
    assert doc["nodes"][doc["outputs"][0]][0] == "mul"


def _doc(**change):
    doc = json.loads(sg.dumps(sg.sin(x) * y))
    doc.update(change)
    return json.dumps(doc)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not a symgrad JSON document"),
    (json.dumps({"format": "other"}), "no \"format\": \"symgrad\""),
    (_doc(version=2), "format version 2, newer than this symgrad reads \\(up to 1\\): upgrade"),
    (_doc(version="1"), "bad version field"),
    (_doc(nodes=[["var", "x", []], ["frobnicate", None, [0]]]), "node 1 has the unknown op 'frobnicate'"),
    (_doc(nodes=[["sin", None, [0]]]), "node 0 \\(sin\\) refers to arguments \\[0\\]"),
    (_doc(nodes=[["var", "x", []], ["add", None, [0]]]), "node 1 is malformed"),
    (_doc(nodes=[["const", "zz", []]], outputs=[0]), "node 0 is malformed"),
    (_doc(outputs=[99]), "outputs must be indices"),
    (_doc(kind="dict"), "a dict needs matching names"),
])
def test_malformed_or_newer_documents_raise_format_errors(text, message):
    with pytest.raises(sg.FormatError, match=message):
        sg.loads(text)


@pytest.mark.parametrize("backend", ["numba", "vm", "python"])
def test_compiled_functions_pickle(backend):
    vg = sg.value_and_grad(x * y + sg.sin(x), [x, y], backend=backend)
    back = pickle.loads(pickle.dumps(vg))
    assert back.backend == backend and back.program.key == vg.program.key
    value, g = back([2.0, 3.0])
    assert value == pytest.approx(6 + math.sin(2), rel=1e-15)
    assert g == pytest.approx([3 + math.cos(2), 2], rel=1e-15)


def test_a_sparse_compiled_function_pickles():
    v = sg.vector("v", 4)
    h = sg.compile(sg.hessian(np.sum(v[1:] * v[:-1] ** 3), v, sparse=True), v, backend="vm")
    back = pickle.loads(pickle.dumps(h))
    np.testing.assert_array_equal(back(np.arange(4.0)).toarray(), h(np.arange(4.0)).toarray())


def _rosen(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def _apply(args):
    fn, point = args
    return fn(point)


def test_compiled_and_traced_functions_work_in_worker_processes():
    """spawn: the workers start from nothing, so everything goes through pickle."""
    compiled = sg.value_and_grad(x * x * y, [x, y], backend="vm")
    traced = sg.grad(_rosen, backend="vm")
    points = [np.array([1.0, 2.0]), np.array([0.5, -1.0])]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        got = pool.map(_apply, [(compiled, p) for p in points] + [(traced, p) for p in points])
    for p, (value, g) in zip(points, got[:2]):
        assert value == pytest.approx(p[0] ** 2 * p[1]) and g == pytest.approx([2 * p[0] * p[1], p[0] ** 2])
    for p, g in zip(points, got[2:]):
        np.testing.assert_allclose(g, traced(p), rtol=1e-15)
