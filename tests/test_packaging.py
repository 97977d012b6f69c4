"""The package as users import it: names, subpackages that are also functions, lazy SymPy, typing marker."""

import importlib.resources
import subprocess
import sys

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
