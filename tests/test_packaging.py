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


def _imports(package: str = "expr") -> dict[str, set[str]]:
    """Module -> the symgrad modules it imports (anywhere in the file), for symgrad/<package>."""
    root = Path(sg.__file__).parent / package
    graph = {}
    for path in root.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("symgrad"):
                parts = node.module.split(".")
                found |= {f"{package}.{a.name}" for a in node.names} if node.module == f"symgrad.{package}" else \
                    {".".join(parts[1:3])}
        graph[f"{package}.{path.stem}"] = found - {f"{package}.{path.stem}"}
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The pairs of modules of ``graph`` that reach each other."""
    local = {m: {d for d in deps if d in graph} for m, deps in graph.items()}

    def reaches(a: str, b: str) -> bool:
        seen, stack = set(), [a]
        while stack:
            for n in local[stack.pop()]:
                if n == b:
                    return True
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return False

    return {tuple(sorted((a, b))) for a in local for b in local[a] if reaches(b, a)}


def test_the_symbolic_layer_imports_form_a_tree_but_for_ops_and_build():
    """symgrad.expr never imports symgrad.compile, and its modules import each other without cycles,
    except ops <-> build (op rows build nodes; building reads rows)."""
    graph = _imports("expr")
    assert not any(m.startswith("compile") for deps in graph.values() for m in deps)
    assert _cycles(graph) == {("expr.build", "expr.ops")}


def test_the_numeric_layer_imports_form_a_tree():
    """symgrad.compile's modules import each other one way: the backend interface (kernels) imports
    none of them, programs look backends up there, backends register there."""
    graph = _imports("compile")
    assert _cycles(graph) == set()
    assert not {d for d in graph["compile.kernels"] if d.startswith("compile")}


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
