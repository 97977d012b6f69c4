"""Pickling (expressions, compiled and traced functions, across processes) and sg.dumps / sg.loads."""

import dataclasses
import json
import math
import multiprocessing
import pickle
import tracemalloc

import numpy as np
import pytest
from graphs import VARS, dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


def test_every_nan_is_one_constant_and_comes_back():
    """JSON writes any NaN "nan" (float.hex drops its sign and payload): all NaN constants are one
    node, so a graph holding -nan (0 * -inf gives it) loads as the same nodes (hypothesis found x + -nan
    loading as a different node)."""
    negative_nan = np.frombuffer(np.uint64(0xFFF8000000000000).tobytes(), dtype=np.float64)[0]
    assert math.isnan(negative_nan) and np.signbit(negative_nan)
    f = x + sg.const(float(negative_nan))
    assert sg.const(float(negative_nan)) is sg.const(math.nan)
    assert sg.loads(sg.dumps(f)) is f and sg.structural_hash(f) == sg.structural_hash(x + math.nan)


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
    (_doc(nodes=[["const", "zz", []]], outputs=[0]), "node 0: a constant is written as float.hex"),
    (_doc(outputs=[99]), "outputs must be indices"),
    (_doc(kind="dict"), "a dict needs one name \\(a string\\) per output"),
    ("[" * 100000 + "]" * 100000, "not a symgrad JSON document"),
    (_doc(nodes=[["var", "x", []], ["sin", None, [[[[[0]]]]] * 2000]]), "refers to arguments"),
    (_doc(nodes=[["const", "0x1p+99999", []]], outputs=[0]), "too large for a float"),
    (_doc(nodes=[["const", "1" * 5000, []]], outputs=[0]), "a constant is written as float.hex"),
    (_doc().replace('"outputs": [', '"outputs": [' + "1" * 5000 + ", "), "too large to be an index"),
    ('{"format": "symgrad", "version": ' + "9" * 5000 + "}", "too large to be an index"),
    (_doc(nodes=[["var", "\udcff", []]], outputs=[0]), "a variable needs a printable name"),
    (_doc(nodes=[["var", "x\u0000", []]], outputs=[0]), "a variable needs a printable name"),
    (_doc(kind="array", shape=[1e8]), "an array's shape must be sizes whose product is the number of outputs"),
    (_doc(kind="array", shape=[100000000]), "an array's shape must be sizes"),
    (_doc(kind="array", shape=[], nodes=[["var", "x", []], ["var", "y", []]], outputs=[0, 1, 0, 1]),
     "number of outputs \\(4\\), got \\[\\]"),
    (_doc(kind="dict", names=["a", "a"], nodes=[["var", "x", []], ["var", "y", []]], outputs=[0, 1]),
     "the dict names \\['a'\\] more than once"),
    (_doc(nodes=[["var", "x", []], ["sin", 3.0, [0]]]), "only var, const, index, array, table, scatter"),
    (b"\xff\xfe", "not a symgrad JSON document"), (_doc() + " trailing", "extra text after the document"),
    (json.dumps({"nodes": [["var", "x", []]], "format": "symgrad", "version": 1}), "before the nodes"),
])
def test_malformed_or_newer_documents_raise_format_errors(text, message):
    with pytest.raises(sg.FormatError, match=message):
        sg.loads(text)


def test_a_decimal_constant_is_refused_not_read_as_hex():
    doc = _doc(nodes=[["const", "1.5", []]], outputs=[0])
    with pytest.raises(sg.FormatError, match="got '1.5'"):
        sg.loads(doc)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60) | st.binary(max_size=60) | st.builds(
    lambda doc, cut, junk: doc[:cut] + junk, st.just(sg.dumps({"f": x * y + 1.5, "g": sg.sin(x)})),
    st.integers(0, 120), st.text(max_size=5)))
def test_random_documents_load_or_raise_format_error(text):
    try:
        sg.loads(text)
    except sg.FormatError as e:
        assert "\n" not in str(e) and len(str(e)) < 400


def test_loading_takes_memory_near_the_graph_not_the_document():
    v = sg.vector("v", 20000)
    f = np.sum(np.sin(v[1:] * v[:-1]) + v[1:] ** 2)
    text = sg.dumps(f)
    tracemalloc.start()
    back = sg.loads(text)  # f's nodes exist (hash-consing): what is allocated is the reading itself
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert back is f and peak < len(text) / 2, (peak, len(text))


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
        # (a task a worker fails to unpickle kills that worker and is lost: without a timeout map waits forever)
        got = pool.map_async(_apply, [(compiled, p) for p in points] + [(traced, p) for p in points]).get(300)
    for p, (value, g) in zip(points, got[:2]):
        assert value == pytest.approx(p[0] ** 2 * p[1]) and g == pytest.approx([2 * p[0] * p[1], p[0] ** 2])
    for p, g in zip(points, got[2:]):
        np.testing.assert_allclose(g, traced(p), rtol=1e-15)


def test_a_pickled_program_is_checked_and_rekeyed():
    from symgrad.compile.lower import lower
    from symgrad.compile.program import OPS_ID

    program = lower([x * y + sg.sin(x)], [x, y])
    data = pickle.dumps(program)
    with pytest.raises(ValueError, match="op table .* compile it again here"):
        pickle.loads(data.replace(OPS_ID.encode(), b"0" * len(OPS_ID)))  # another symgrad's op table
    forged = pickle.dumps(dataclasses.replace(program, key='x"""\nimport os'))
    assert pickle.loads(forged).key == program.key  # the key names generated code: never trusted
    bad = dataclasses.replace(program, code=program.code.copy())
    bad.code[0, 2] = 10**6  # an input index out of range would read past the VM's arrays
    with pytest.raises(ValueError, match="malformed"):
        pickle.loads(pickle.dumps(bad))
    vg = pickle.loads(pickle.dumps(sg.value_and_grad(x * y + sg.sin(x), [x, y], backend="vm")))
    assert vg([2.0, 3.0])[0] == pytest.approx(6 + math.sin(2.0), rel=1e-15)


def test_a_document_cannot_hold_a_custom_node():
    """dumps refuses a custom_jvp's rule; loads refuses the op (a mutated document made one with no rule)."""
    text = ('{"format": "symgrad", "version": 1, "kind": "expr", "nodes": [["var", "x", []], '
            '["custom", null, [0, 0]]], "outputs": [1]}')
    with pytest.raises(sg.FormatError, match="custom_jvp"):
        sg.loads(text)


def test_a_scan_saved_with_a_stack_of_one_row_repeated_loads_as_one_reading_it_whole():
    """Documents saved before scans read a stack whose rows are all one whole (the step reading the row) load as
    the scan make builds now, the same values."""
    from symgrad.expr import rolled, scans

    c, x = scans.placeholder((3,)), scans.placeholder((3,))
    v, i, j = rolled.array("v", 3), rolled.index("i", 5), rolled.index("j", 3)
    saved = scans._node(c * x, c, rolled.array("c0", 3), [(x, rolled.tensor(v[j], i, j))], [], 5, False)
    loaded = sg.loads(sg.dumps(saved))
    assert not scans._parts(loaded)[4] and scans._parts(saved)[4]
    values = {"v": np.array([1.0, 2.0, 3.0]), "c0": np.array([1.0, -1.0, 0.5])}
    np.testing.assert_array_equal(sg.evaluate(loaded, values), sg.evaluate(saved, values))
    np.testing.assert_array_equal(sg.evaluate(loaded, values)[-1], [1.0, -32.0, 0.5 * 3.0 ** 5])
