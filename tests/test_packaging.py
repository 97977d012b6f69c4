"""The package as users import it: names, subpackages that are also functions, lazy SymPy, typing marker."""

import ast
import importlib.resources
import inspect
import subprocess
import sys
from pathlib import Path

import symgrad as sg


def test_star_import_does_not_shadow_builtins():
    names: dict = {}
    exec("from symgrad import *", names)  # noqa: S102 - what a user's module does
    assert not {"abs", "compile", "format"} & set(names)
    assert {"grad", "value_and_grad", "parse", "ParseError", "to_dot", "to_sympy", "sin"} <= set(names)
    assert set(sg.__all__) <= set(dir(sg)) | {"to_sympy", "from_sympy"}


def test_compile_and_parse_are_both_modules_and_functions():
    import symgrad.compile.cache
    import symgrad.parse

    x, y = sg.symbols("x y")
    assert sg.compile(x * y, [x, y], backend="vm")([2.0, 3.0]) == 6.0
    assert symgrad.compile.cache.cache_dir is sg.compile.cache.cache_dir
    assert sg.parse("x*y") is x * y and symgrad.parse.ParseError is sg.ParseError
    assert str(__import__("inspect").signature(sg.compile)).startswith("(outputs")


def test_import_does_not_load_sympy_until_it_is_used():
    script = ("import sys, symgrad as sg; assert 'sympy' not in sys.modules; x = sg.Var('x'); "
              "sg.grad(x * sg.sin(x), [x]); assert 'sympy' not in sys.modules; "
              "print(sg.to_sympy(sg.stop_gradient(x) + abs(x))); assert 'sympy' in sys.modules")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "StopGradient(x) + Abs(x)", out.stderr


def test_the_typing_marker_ships():
    assert importlib.resources.files("symgrad").joinpath("py.typed").is_file()


ROOT = Path(sg.__file__).parent
# The layers, bottom up: each imports only itself and the layers below it. Every other module (the public
# API in __init__, check, parse, cli, distributed, solvers/, ports/, fuzz/) sits above them all.
LAYERS = ("util", "expr", "compile", "trace")


def test_public_module_names_are_the_modules_wherever_they_live():
    """`import symgrad.numpy as jnp`, `from symgrad.scipy.special import logsumexp`, `symgrad.tree_util`,
    `sg.optimize.Problem`: each public name is the one module (not a copy), and SciPy's special functions
    and sparse matrices load only when used (a fresh process). The modules' places before the function layer
    became a package still import (pickles name them: symgrad.compile.loops.LoopProgram ...)."""
    script = ("import sys, symgrad as sg; assert 'scipy.special' not in sys.modules; "
              "assert 'scipy.sparse' not in sys.modules; import symgrad.numpy as jnp, symgrad.ports.numpy; "
              "import symgrad.scipy.special as ss, symgrad.ports.scipy.special as real; "
              "from symgrad.tree_util import tree_map; from symgrad import lax, nn, config, ad_checkpoint; "
              "assert jnp is symgrad.ports.numpy and ss is real and sg.scipy.special is real; "
              "assert tree_map is sg.pytree.tree_map and sg.tree is sg.pytree and nn.softmax is sg.softmax; "
              "import symgrad.optimize, symgrad.ipopt; assert sg.optimize.minimize is sg.minimize; "
              "import symgrad.batched, symgrad.compile.loops, symgrad.trace.batched, symgrad.compile.loop_program;"
              " "
              "assert symgrad.batched is symgrad.trace.batched and sg.compile.loops is sg.compile.loop_program; "
              "assert sg.distributed.lazy_sum and sg.nn.softmax is sg.softmax and sg.scipy.special is real; "
              "print('ok')")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every symgrad module -> the symgrad modules it imports: at the top, inside functions, anywhere, but for
    ``if TYPE_CHECKING:`` blocks (annotations only: they never run). ``from symgrad.x import y`` counts as
    ``symgrad.x.y`` where that is a module, else as ``symgrad.x``."""
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and
                       getattr(node.test, "id", None) == "TYPE_CHECKING" for b in node.body for n in ast.walk(b)}
        found = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == "symgrad"}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "symgrad":
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                          for a in node.names}
        graph[name] = {m for m in found if m in modules} - {name}
    return graph


def _layer(module: str) -> int:
    """0 for util, 1 for expr, 2 for compile, 3 for trace: the index in LAYERS; above them all: len(LAYERS)."""
    part = module.split(".")[1] if "." in module else ""
    return LAYERS.index(part) if part in LAYERS else len(LAYERS)


def _circles(graph: dict[str, set[str]]) -> set[frozenset]:
    """The sets of two or more nodes of ``graph`` that all reach each other (Tarjan's strongly connected
    components, with an explicit stack)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], set(), [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = set()
                while True:
                    member = stack.pop()
                    on.discard(member)
                    part.add(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.add(frozenset(part))
    return found


def test_no_module_imports_another_that_imports_it_back():
    """No circle of modules, counting imports inside functions, except ops <-> build (op rows build nodes;
    building reads rows): one unit in two files."""
    assert _circles(_imports()) == {frozenset({"symgrad.expr.build", "symgrad.expr.ops"})}


def test_no_circle_of_packages():
    """symgrad's subpackages and top-level modules, as wholes, import each other one way (the package's
    __init__, the public API, imports them all and is imported by none of them but the fuzzer and the CLI,
    which sit on top)."""
    top = {m: {d.split(".")[1] for d in deps if "." in d} - {m.split(".")[1]}
           for m, deps in _imports().items() if "." in m}
    packages: dict[str, set[str]] = {}
    for m, deps in top.items():
        packages.setdefault(m.split(".")[1], set()).update(deps)
    assert _circles({p: deps & set(packages) for p, deps in packages.items()}) == set()


def test_each_layer_imports_only_the_layers_below_it():
    """util <- expr <- compile <- trace <- the rest: no module imports one of a layer above its own (Dask
    plugs in through util.chunks, which the public API installs; nothing below it imports distributed)."""
    upward = sorted(f"{m} -> {d}" for m, deps in _imports().items() for d in deps if _layer(d) > _layer(m))
    assert upward == []


def test_the_layers_are_where_the_test_looks_for_them():
    """(The checks above would pass vacuously if a layer moved.)"""
    graph = _imports()
    assert all(any(m.startswith(f"symgrad.{layer}.") for m in graph) for layer in LAYERS)
    assert "symgrad.distributed" in graph and "symgrad.trace.function" in graph["symgrad.trace.api"]


def test_the_checker_finds_circles_and_upward_imports():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert _layer("symgrad.expr.diff") < _layer("symgrad.compile.lower") < _layer("symgrad.trace.api") < \
        _layer("symgrad.distributed")


MODULE_MAX = 800  # lines: a module past this holds several jobs (aim for 600)


def test_no_module_is_longer_than_one_job():
    long = {_module(p): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > MODULE_MAX}
    assert long == {}


def test_docstrings_read_as_written_in_help_and_the_api_pages():
    """No Sphinx roles (mkdocstrings and help() print them raw), the sg.* op functions show their
    arguments, help(sg.compile) starts with the function."""
    import re

    roles = [f"{p}: {m.group(0)}" for p in Path(sg.__file__).parent.rglob("*.py")
             for m in re.finditer(r":(func|class|meth|mod|attr):`", p.read_text())]
    assert not roles, roles
    assert str(inspect.signature(sg.where)) == "(c: Any, x: Any, y: Any, /) -> Any"
    assert list(inspect.signature(sg.atan2).parameters) == ["x", "y"]
    assert sg.compile.__doc__.startswith("compile(outputs") and "Compile expressions" in sg.compile.__doc__
    assert sg.parse.__doc__.startswith("parse(text")


def test_a_trace_limit_read_where_it_no_longer_is_says_where_it_is():
    import pytest

    import symgrad.trace

    with pytest.raises(AttributeError, match="symgrad.trace.limits.ROLLED_MIN"):
        symgrad.trace.ROLLED_MIN  # noqa: B018


def test_the_faq_shows_the_error_of_a_script_beside_an_uninstalled_clone(tmp_path):
    """The clone's folder imported as a namespace package (symgrad cannot catch it: none of its code runs):
    the FAQ quotes Python's error word for word. -S -E -s: no site-packages, so no installed symgrad."""
    (tmp_path / "symgrad" / "symgrad").mkdir(parents=True)  # a clone's layout: the package one folder down
    (tmp_path / "script.py").write_text("import symgrad\nsymgrad.grad\n")
    out = subprocess.run([sys.executable, "-S", "-E", "-s", "script.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    error = out.stderr.strip().splitlines()[-1]
    assert error == "AttributeError: module 'symgrad' has no attribute 'grad'"
    assert error in (ROOT.parent / "docs" / "faq.md").read_text()
