"""What arrives from elsewhere: pickled loop programs (checked like Programs: format, op table, the
graph loaded by sg.loads, source generated again) and sg.loads documents that sg.dumps never writes
(hand-written, and valid documents mutated at random): a FormatError, never a wrong number."""

import copyreg
import json
import os
import pickle
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rolled_graphs import nested_sums, rolled_sums

import symgrad as sg
from symgrad.compile import cache
from symgrad.compile.loop_program import LoopProgram
from symgrad.compile.program import OPS_ID
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import topo_order

RNG = np.random.default_rng(3)


def rosen(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rnn(w, xs):
    h, ys = sg.scan(lambda h, x: (np.tanh(w * h + x), np.sum(h * x)), np.zeros(3), xs)
    return np.sum(h ** 2) + np.sum(ys)


CASES = [(rosen, (np.linspace(-1.0, 1.0, 100),)), (rnn, (np.array([0.3, -0.2, 0.5]), RNG.normal(size=(40, 3))))]


def _compiled(fn, args, backend):
    return sg.value_and_grad(fn, backend=backend).trace(*args).compiled


class _Forged:
    """Pickles as ``fn(*args)``: a pickle someone made by hand."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _reduced(program: LoopProgram) -> tuple:
    fn, args = program.__reduce__()
    assert fn == LoopProgram._unpickled
    return list(args)


@pytest.fixture
def nothing_runs(monkeypatch):
    """Generating or loading a module while a tampered pickle is read is a failure in itself."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("generated code was loaded while unpickling a tampered program")
    monkeypatch.setattr(cache, "load", refuse)
    monkeypatch.setattr(LoopProgram, "source", property(refuse))


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
@pytest.mark.parametrize("fn, args", CASES, ids=["rosen", "scan"])
def test_pickled_loop_programs_give_the_same_values(fn, args, backend):
    compiled = _compiled(fn, args, backend)
    assert isinstance(compiled.program, LoopProgram)
    data = pickle.dumps(compiled)
    assert b"def kernel" not in data and b"njit" not in data  # the graph travels, not the source
    back = pickle.loads(data)
    assert back.backend == backend and back.program.roots == compiled.program.roots
    vg = sg.value_and_grad(fn, backend=backend)
    trace = vg.trace(*args)
    trace.compiled = compiled
    want = vg(*args)
    trace.compiled = back  # (a cached property) the same call path, on the unpickled program
    got = vg(*args)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])


def test_a_loop_program_pickle_from_another_format_or_op_table_is_refused(nothing_runs):
    program = _compiled(rosen, CASES[0][1], "python").program
    args = _reduced(program)
    args[0] = 2
    with pytest.raises(ValueError, match="format 2 and op table .* compile it again"):
        pickle.loads(pickle.dumps(_Forged(LoopProgram._unpickled, tuple(args))))
    data = pickle.dumps(program)
    with pytest.raises(ValueError, match="op table '0+'.* compile it again"):
        pickle.loads(data.replace(OPS_ID.encode(), b"0" * len(OPS_ID)))


def test_a_pickle_carrying_source_is_refused(nothing_runs):
    """The old form: the dataclass's state with its cached source, which was loaded as it was."""
    program = _compiled(rosen, CASES[0][1], "python").program
    state = {"roots": program.roots, "inputs": program.inputs, "params": program.params, "n_out": program.n_out,
             "returns_value": program.returns_value, "source": "import os\nos.system('echo pwned')\n"}
    forged = pickle.dumps(_StateForged(state))
    assert b"pwned" in forged
    with pytest.raises(ValueError, match="carries its state .* instead of its graph"):
        pickle.loads(forged)


class _StateForged:
    def __init__(self, state):
        self.state = state

    def __reduce__(self):
        return copyreg._reconstructor, (LoopProgram, object, None), self.state  # (as protocol 0 writes it)


def _first(doc: dict, op: str) -> int:
    return next(k for k, n in enumerate(doc["nodes"]) if n[0] == op)


def _appended(doc: dict, node: list) -> int:
    doc["nodes"].append(node)
    return len(doc["nodes"]) - 1


def _root(doc: dict, node: list) -> None:
    """``node`` appended, as the program's value."""
    doc["outputs"][0] = _appended(doc, node)


@pytest.mark.parametrize("change, message", [
    (lambda d: _root(d, ["sin", None, [_first(d, "array")]]), "node .* \\(sin\\).* whole array x"),
    (lambda d: _root(d, ["load", None, [_first(d, "array"), _appended(d, ["const", "0x1.9p+6", []])]]),
     "node .* \\(load\\): x\\[100\\]: the index 100 takes values 100..100, outside 0..99"),
    (lambda d: d.__setitem__("version", 7), "format version 7"),
    (lambda d: d["nodes"].insert(0, ["array", ["x\"\"\"; import os", [3]], []]), "node [0-9]+"),  # (shifted)
])
def test_a_corrupted_graph_in_a_loop_program_pickle_is_refused(nothing_runs, change, message):
    program = _compiled(rosen, CASES[0][1], "python").program
    args = _reduced(program)
    doc = json.loads(args[2])
    change(doc)
    args[2] = json.dumps(doc)
    with pytest.raises(sg.FormatError, match=message):
        pickle.loads(pickle.dumps(_Forged(LoopProgram._unpickled, tuple(args))))


@pytest.mark.parametrize("roles, returns_value", [((1, 1, 5), True), ((0, 1, 0), True), ([1, 1, 0], True),
                                                  ((1, 1, 0), "yes")])
def test_loop_program_pickles_with_wrong_roles_are_refused(nothing_runs, roles, returns_value):
    program = _compiled(rosen, CASES[0][1], "python").program
    args = _reduced(program)
    args[3], args[4] = roles, returns_value
    with pytest.raises(ValueError, match="malformed"):
        pickle.loads(pickle.dumps(_Forged(LoopProgram._unpickled, tuple(args))))


def test_a_loop_program_pickle_whose_roots_read_what_is_no_input_is_refused(nothing_runs):
    x, y = sg.array("x", 3), sg.array("y", 3)
    i = sg.index("i", 3)
    f = sg.sum(x[i] * y[i], i)
    program = LoopProgram.make([f], [x, y], [], True)
    args = _reduced(program)
    doc = json.loads(args[2])
    doc["outputs"] = doc["outputs"][:-1]  # y dropped from the inputs
    args[2], args[3] = json.dumps(doc), (1, 1, 0)
    with pytest.raises(ValueError, match="not among the inputs"):
        pickle.loads(pickle.dumps(_Forged(LoopProgram._unpickled, tuple(args))))


# ---- documents sg.dumps never writes --------------------------------------------------------------

def _doc(nodes: list, outputs: list) -> str:
    return json.dumps({"format": "symgrad", "version": 1, "kind": "list", "nodes": nodes, "outputs": outputs})


X3 = ["array", ["x", [3]], []]
ONE, FIVE = ["const", "0x1.0p+0", []], ["const", "0x1.4p+2", []]


@pytest.mark.parametrize("text, message", [
    (_doc([X3, ["sin", None, [0]]], [1]), "node 1 \\(sin\\): sin\\(\\) of the whole array x"),
    (_doc([X3, ["var", "v", []], ["mod", None, [1, 0]]], [2]), "node 2 \\(mod\\).*whole array x"),
    (_doc([X3, X3, ["add", None, [0, 1]]], [2]), "node 2 \\(add\\).*whole array"),
    (_doc([["array", ["A", [3, 2]], []], ONE, ["load", None, [0, 1]]], [2]), "indexed with 1"),
    (_doc([X3, ONE, ["load", None, [0, 1, 1]]], [2]), "indexed with 2"),
    (_doc([X3, FIVE, ["load", None, [0, 1]]], [2]), "takes values 5..5, outside 0..2"),
    (_doc([X3, ["index", ["i", 4], []], ["load", None, [0, 1]]], [2]), "takes values 0..3, outside 0..2"),
    (_doc([X3, ["var", "v", []], ["load", None, [0, 1]]], [2]), "index expression"),
    (_doc([X3, X3, ["load", None, [0, 1]]], [2]), "node 2 \\(load\\) takes scalars, got the array x"),
    (_doc([X3, ["index", ["i", 3], []], ["tensor", None, [0, 1]]], [2]), "node 2 \\(tensor\\) takes scalars"),
    (_doc([X3, ["index", ["i", 3], []], ["sum", None, [0, 1]]], [2]), "node 2 \\(sum\\) takes scalars"),
    (_doc([ONE, ["var", "v", []], ["sum", None, [0, 1]]], [2]), "reduce over an index symbol"),
    (_doc([ONE, ["index", ["i", 3], []], ["tensor", None, [0, 1, 1]]], [2]), "appears twice"),
    (_doc([X3, ["var", "v", []], ["as_index", None, [1, 1]]], [2]), "as_index\\) needs a positive integer"),
    (_doc([X3, ONE, ["as_index", None, [0, 1]]], [2]), "as_index\\) takes scalars"),
    (_doc([ONE, ["index", ["i", 3], []], ["scatter", [[], 0], [0, 1, 1]]], [2]), "scatter's shape"),
    (_doc([X3, ["index", ["i", 3], []], ["scatter", [[3], 1], [0, 1, 1]]], [2]), "scatter\\) takes scalars"),
    (_doc([X3, ["cumsum", [1, False], [0]]], [1]), "not an axis"),
    (_doc([X3, ["sin", None, [0, 0]]], [1]), "sin takes 1 argument"),
    (_doc([X3, ["tensor", None, [0]]], [1]), "tensor takes 2 or more"),
    (_doc([["index", ["i", 0], []]], [0]), "size must be a positive integer"),
])
def test_hostile_documents_raise_format_errors(text, message):
    with pytest.raises(sg.FormatError, match=message):
        sg.loads(text)


def _scan_doc():
    X = sg.array("X", (4, 2))
    W = sg.array("W", 2)
    hT, _ = sg.scan(lambda h, x: (np.tanh(W * h + x), None), sg.array("h0", 2), X)
    return hT, json.loads(sg.dumps(hT))


def _step(doc: dict) -> list:
    return next(n for n in doc["nodes"] if n[0] == "scan")[1]


def _rename(step_doc: dict, old: str, new: str) -> None:
    for n in step_doc["nodes"]:
        if n[0] == "array" and n[1][0] == old:
            n[1][0] = new


@pytest.mark.parametrize("change, message", [
    (lambda s: _rename(s[2], "scan#k0", "W"), "reads only its placeholders"),  # an outer array, not bound
    (lambda s: _rename(s[2], "scan#x0", "scan#x1"), "placeholders \\['scan#c', 'scan#x0'"),
    (lambda s: _rename(s[2], "scan#c", "scan#k0"), "placeholders"),
    (lambda s: s[2]["nodes"].insert(0, ["var", "v", []]), "holds no var"),
    (lambda s: s.__setitem__(3, 2), "placeholders \\[.scan#c., .scan#x0., .scan#x1.\\]"),
    (lambda s: s.__setitem__(0, 0), "malformed"),
    (lambda s: s[2]["outputs"].pop(), "placeholders"),
    (lambda s: s[2]["outputs"].reverse(), "placeholders"),
])
def test_hostile_scan_steps_raise_format_errors(change, message):
    _, doc = _scan_doc()
    change(_step(doc))
    with pytest.raises(sg.FormatError, match=message):
        sg.loads(json.dumps(doc))


def test_a_document_array_named_like_a_placeholder_is_an_ordinary_input():
    """A document whose input is called scan#c (the carry placeholder's role name): loaded, it is
    another node than the step's carry, and every backend reads it as the input it is."""
    hT, doc = _scan_doc()
    assert sg.loads(json.dumps(doc)) is hT
    for n in doc["nodes"]:
        if n[0] == "array" and n[1][0] == "X":
            n[1][0] = "scan#c"
    back = sg.loads(json.dumps(doc))
    C, W, h0 = sg.array("scan#c", (4, 2)), sg.array("W", 2), sg.array("h0", 2)
    values = {C: RNG.normal(size=(4, 2)), W: RNG.normal(size=2), h0: RNG.normal(size=2)}
    h = values[h0]
    for t in range(4):
        h = np.tanh(values[W] * h + values[C][t])
    np.testing.assert_allclose(sg.evaluate(back, values), h, rtol=1e-14)
    for backend in ("vm", "numba"):
        f = sg.compile(back, [h0], [C, W], backend=backend)
        np.testing.assert_allclose(f(values[h0], np.concatenate([values[C].ravel(), values[W]])), h, rtol=1e-14)


# ---- valid documents mutated at random -----------------------------------------------------------

_OP_NAMES = sorted(OPS)


def _mutate(doc: dict, rng: random.Random) -> None:
    """One random change to one node (inside a scan's step, sometimes)."""
    nodes = doc["nodes"]
    k = rng.randrange(len(nodes))
    node = nodes[k]
    if node[0] == "scan" and rng.random() < 0.5 and isinstance(node[1], list) and len(node[1]) == 4:
        return _mutate(node[1][2], rng)
    kind = rng.randrange(6)
    if kind == 0:
        node[0] = rng.choice(_OP_NAMES)
    elif kind == 1 and node[2]:
        node[2][rng.randrange(len(node[2]))] = rng.randrange(max(k, 1))
    elif kind == 2 and k:
        node[2].append(rng.randrange(k))
    elif kind == 3 and node[2]:
        node[2].pop(rng.randrange(len(node[2])))
    elif kind == 4:
        node[1] = rng.choice(nodes)[1]
    else:
        node[1] = rng.choice([None, "guarded", 0, -1, 2, [], ["i", 2], ["x", [2]], [[2], 1], [0, True], "x"])
    return None


def _sources():
    X, h0, W = sg.array("X", (5, 2)), sg.array("h0", 2), sg.array("W", 2)
    hT, ys = sg.scan(lambda h, x: (np.sin(W * h) + x, np.sum(h * x)), h0, X, reverse=True)
    loss = np.sum(hT ** 2) + sg.sum(ys)
    return [[loss, *sg.grad(loss, [W])], [hT, ys]]


_SCANS = _sources()


@settings(max_examples=int(os.environ.get('HOSTILE_EXAMPLES', 300)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1), n_changes=st.integers(1, 3))
def test_mutated_documents_load_checked_or_raise_format_error(data, seed, n_changes):
    source = data.draw(st.sampled_from(["sums", "nested", "scan"]))
    if source == "sums":
        f, x = data.draw(rolled_sums())
        exprs = [f, *sg.grad(f, [x])]
    elif source == "nested":
        f, A, x = data.draw(nested_sums())
        exprs = [f, *sg.grad(f, [A, x])]
    else:
        exprs = data.draw(st.sampled_from(_SCANS))
    doc = json.loads(sg.dumps(exprs))
    rng = random.Random(seed)
    for _ in range(n_changes):
        _mutate(doc, rng)
    try:
        back = sg.loads(json.dumps(doc))
    except sg.FormatError as e:
        assert "\n" not in str(e) and len(str(e)) < 600
        return
    _check_meaningful(back)


def _check_meaningful(back: list) -> None:
    """A graph loads back as itself, and the loop VM computes what the interpreter does."""
    assert sg.loads(sg.dumps(back)) == back
    roots = [r for r in back if not r.free]
    leaves = sorted({n for n in topo_order(roots) if n.op.name in ("var", "array")}, key=str)
    gathers = any(n.op.name == "as_index" for n in topo_order(roots))  # (data as addresses: may be out of range)
    if not roots or gathers or len({str(v) for v in leaves}) != len(leaves):
        return
    rng = np.random.default_rng(0)
    values = {v: rng.uniform(0.5, 1.5, size=v.shape) if v.op.array_valued else rng.uniform(0.5, 1.5)
              for v in leaves}
    try:
        want = sg.evaluate(roots, values)
    except ValueError as e:  # (more index symbols than NumPy has axes)
        assert "axis" in str(e) or "64" in str(e)
        return
    f = sg.compile(roots, leaves, backend="vm")
    got = f(np.concatenate([np.ravel(values[v]) for v in leaves]) if leaves else np.zeros(0))
    flat = np.concatenate([np.ravel(w) for w in want]) if len(roots) > 1 or np.ndim(want[0]) else np.ravel(want)
    np.testing.assert_allclose(np.ravel(got), flat, rtol=1e-9, atol=1e-12, equal_nan=True)
