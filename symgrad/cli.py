"""The ``symgrad`` command: a formula's derivatives, value, gradient and check at a point; ``symgrad
export``: a formula's or a Python function's derivatives as standalone C.

    symgrad "x*y + sin(x)" --at x=2,y=3
    symgrad "a*exp(-b*t)" --wrt a,b --at a=1,b=2,t=0.5 --hessian --json
    symgrad export "x*y + sin(x)" --wrt x,y --name f --to out/
    symgrad export mymodule:loss --shapes 10,3x4 --transform value_and_grad --to out/
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import timeit
from typing import Any

import numpy as np

import symgrad
from symgrad.check import check_grad
from symgrad.compile.c_backend import CompilerError
from symgrad.compile.function import BACKENDS, compile, value_and_grad
from symgrad.expr.build import Var
from symgrad.expr.diff import grad, hessian
from symgrad.expr.printing import format as format_exprs
from symgrad.expr.printing import latex
from symgrad.expr.traverse import free_variables
from symgrad.parse import ParseError, parse


class CliError(Exception):
    """A problem with the command line, reported as one line."""


def _point(text: str) -> dict[str, float]:
    point = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--at: expected name=value, got {item!r}")
        try:
            point[name.strip()] = float(value)
        except ValueError:
            raise CliError(f"--at: the value of {name.strip()!r} is not a number: {value!r}") from None
    return point


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, as every other error (argparse adds the usage)
        raise CliError(f"{message} (see symgrad --help)".replace("\n", "\\n"))  # (an argument may hold one)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="symgrad", description="Exact derivatives of a formula, checked. A formula that starts "
                "with '-' can be written as it is or after --: symgrad -- \"-x*y\" --at x=1,y=2")
    p.add_argument("formula", help='for example "x*y + sin(x)"')
    p.add_argument("--at", default="", help="the point, for example x=2,y=3")
    p.add_argument("--wrt", default=None, help="differentiate with respect to these (default: every variable); "
                   "the others are parameters that still need a value in --at")
    p.add_argument("--hessian", action="store_true", help="also the Hessian: formulas and values")
    p.add_argument("--latex", action="store_true", help="also LaTeX for the formula and its derivatives")
    p.add_argument("--check", action="store_true", help="exit with status 1 if the gradient check fails")
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="what evaluates the compiled function")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--version", action="version", version=f"symgrad {symgrad.__version__}")
    return p


def _per_call(fn, x: np.ndarray, p: np.ndarray) -> float:
    """Seconds per call, the best of 3 runs of about 0.1 s each."""
    timer = timeit.Timer(lambda: fn(x, p))
    number, _ = timer.autorange()
    return min(timer.repeat(3, max(1, number // 2))) / max(1, number // 2)


def _wrt(text: str | None, variables: list) -> list:
    if text is None:
        return variables
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise CliError("--wrt: no variable names given (leave --wrt out to differentiate by every variable)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CliError(f"--wrt: {', '.join(map(repr, twice))} listed twice")
    used = set(variables)
    unused = [n for n in names if Var(n) not in used]
    if unused:
        raise CliError(f"--wrt: the formula does not use {', '.join(map(repr, unused))}")
    return [Var(n) for n in names]


def _number(v: float) -> Any:
    """A float for JSON: non-finite values as the strings "nan", "inf", "-inf"."""
    v = float(v)
    return v if math.isfinite(v) else str(v)


def derivatives(argv: list[str]) -> dict[str, Any]:
    """Carry out the command and return its results as a dict (what --json prints).

    >>> derivatives(["x*y", "--wrt", "x"])["gradient"]
    {'x': 'y'}
    """
    return _results(_parser().parse_args(_formula_last(argv)))[0]


def _results(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON-ready results, and the expressions and check report the text form prints."""
    f = parse(args.formula)
    variables = free_variables(f)
    wrt = _wrt(args.wrt, variables)
    differentiated = set(wrt)
    params = [v for v in variables if v not in differentiated]
    names, pnames = [v.name for v in wrt], [v.name for v in params]
    g = grad(f, wrt)
    out: dict[str, Any] = {"formula": str(f), "variables": [v.name for v in variables], "wrt": names,
                           "gradient": {n: str(e) for n, e in zip(names, g)}}
    H = hessian(f, wrt) if args.hessian else None
    if H is not None:
        out["hessian"] = [[str(e) for e in row] for row in H]
    if args.latex:
        out["latex"] = {"f": latex(f), **{f"df/d{n}": latex(e) for n, e in zip(names, g)}}
        if H is not None:
            out["latex"] |= {f"d2f/d{a}d{b}": latex(H[i, j]) for i, a in enumerate(names)
                             for j, b in enumerate(names) if j >= i}
    objects: dict[str, Any] = {"f": f, "g": g, "H": H}
    if not args.at:
        if args.check:
            raise CliError("--check needs a point: give one with --at (nothing was checked)")
        return out, objects
    point = _point(args.at)
    unknown = sorted(set(point) - {v.name for v in variables})
    if unknown:
        uses = f"uses only {', '.join(v.name for v in variables)}" if variables else "has no variables"
        raise CliError(f"--at gives {', '.join(map(repr, unknown))}, but the formula {uses}")
    missing = [v.name for v in variables if v.name not in point]
    if missing:
        raise CliError(f"--at gives no value for {', '.join(missing)}")
    start = time.perf_counter()
    vg = value_and_grad(f, wrt, params, backend=args.backend)
    x, p = np.array([point[n] for n in names]), np.array([point[n] for n in pnames])
    value, gvals = vg(x, p)
    ready = time.perf_counter() - start
    per_call = _per_call(vg.ready(), x, p)  # (on the kernels that stay: "auto" starts on the C compiler's)
    out.update(at=point, value=_number(value), gradient_values=dict(zip(names, map(_number, gvals))),
               backend=vg.backend, n_ops=vg.n_ops, ready_s=ready, per_call_us=per_call * 1e6)
    if H is not None:
        hvals = compile(H, wrt, params, backend=args.backend)(x, p) if wrt else np.zeros((0, 0))
        out["hessian_values"] = [[_number(v) for v in row] for row in hvals]
    report = check_grad(f, wrt, point)
    out["check"] = {"ok": report.ok, "status": dict(zip(report.names, report.status)),
                    "errors": dict(zip(report.names, map(_number, report.error)))}
    objects["report"] = report
    return out, objects


def _render(args: argparse.Namespace, out: dict[str, Any], objects: dict[str, Any]) -> str:
    if args.json:
        return json.dumps(out, indent=2)
    f, g, H = objects["f"], objects["g"], objects["H"]
    names = out["wrt"]
    lines = [f"f({', '.join(out['variables'])}) = {f}"]
    lines += [_labelled(f"df/d{n}", format_exprs(e)) for n, e in zip(names, g)]
    if H is not None:
        lines += [_labelled(f"d2f/d{a}d{b}", format_exprs(H[i, j])) for i, a in enumerate(names)
                  for j, b in enumerate(names) if j >= i]
    if "latex" in out:
        lines += [f"latex {k}: {v}" for k, v in out["latex"].items()]
    if "value" not in out:
        return "\n".join(lines)
    lines.append(f"at {', '.join(f'{n} = {v:g}' for n, v in out['at'].items())}:" if out["at"] else
                 "value (no variables):")
    lines.append(f"  f = {_shown(out['value'])}")
    lines += [f"  df/d{n} = {_shown(v)}" for n, v in out["gradient_values"].items()]
    if H is not None:
        lines += [f"  d2f/d{a}d{b} = {_shown(out['hessian_values'][i][j])}" for i, a in enumerate(names)
                  for j, b in enumerate(names) if j >= i]
    lines.append(f"compiled value-and-gradient ({out['backend']}, {out['n_ops']} ops): ready in "
                 f"{out['ready_s']:.2f} s, {out['per_call_us']:.2f} us per call")
    lines.append("gradient check against central finite differences:")
    lines += ["  " + line for line in str(objects["report"]).splitlines()]
    return "\n".join(lines)


def _labelled(label: str, text: str) -> str:
    """``label = text``; a let-form (several lines) under its label, indented.

    >>> print(_labelled("df/dx", "t1 = sin(x)\\nt1*t1"))
    df/dx =
        t1 = sin(x)
        t1*t1
    """
    if "\n" not in text:
        return f"{label} = {text}"
    return f"{label} =\n" + "\n".join("    " + line for line in text.splitlines())


def _shown(v: float | str) -> str:
    """A value as Python writes a float: -1.0, nan, inf (JSON's strings for those without quotes)."""
    return v if isinstance(v, str) else repr(v)


def run(argv: list[str]) -> str:
    """Carry out the command and return its output text (JSON with ``--json``).

    >>> print(run(["x*y", "--at", "x=2,y=3"]).splitlines()[0])
    f(x, y) = x*y
    """
    args = _parser().parse_args(_formula_last(argv))
    return _render(args, *_results(args))


def _formula_last(argv: list[str]) -> list[str]:
    """The formula moved behind ``--`` when it starts with '-' (``-x*y``), given after ``--`` or not.

    >>> _formula_last(["-x*y", "--at", "x=1,y=2"])
    ['--at', 'x=1,y=2', '--', '-x*y']
    """
    if "--" in argv:
        k = argv.index("--")
        return argv[:k] + argv[k + 2:] + argv[k:k + 2]
    for k, arg in enumerate(argv):
        if arg.startswith("-") and not arg.startswith("--") and arg != "-h" and (k == 0 or argv[k - 1] not in
                                                                                  _VALUED):
            return argv[:k] + argv[k + 1:] + ["--", arg]
    return argv


_VALUED = {"--at", "--wrt", "--backend"}


def _export_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="symgrad export", description="Write a formula's or a Python function's derivatives as "
                "standalone C (CasADi's calling convention; docs/export.md)")
    p.add_argument("what", help='a formula ("x*y + sin(x)") or module:function (traced at --shapes)')
    p.add_argument("--wrt", default=None, help="a formula's variables to differentiate (default: all; the "
                   "others are parameters, inputs after them)")
    p.add_argument("--shapes", default="", help="module:function's argument shapes, comma-separated: 1000, "
                   "3x4, or 1 for a scalar")
    p.add_argument("--transform", default="value_and_grad", choices=sorted(_TRANSFORMS),
                   help="what to export (hessian_sparse: the Hessian's nonzeros, compressed columns)")
    p.add_argument("--name", default="f", help="the C function's name (and of its files)")
    p.add_argument("--to", default=".", help="the directory to write NAME.c and NAME.h to")
    return p


_TRANSFORMS = {"value_and_grad", "grad", "jit", "hessian", "hessian_sparse", "jacobian"}


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise CliError(f"--shapes: expected sizes such as 1000 or 3x4, got {text!r}") from None
    if any(d < 1 for d in shape):
        raise CliError(f"--shapes: sizes must be positive, got {text!r}")
    return () if shape == (1,) else shape


def export(argv: list[str]) -> tuple[Any, Any]:
    """``symgrad export``: write the C file and header; returns their paths.

    >>> import tempfile
    >>> [p.name for p in export(["x*y + sin(x)", "--name", "f", "--to", tempfile.mkdtemp()])]
    ['f.c', 'f.h']
    """
    args = _export_parser().parse_args(argv)
    if ":" in args.what and not args.wrt:
        import importlib

        module, _, name = args.what.partition(":")
        if "" not in sys.path and os.getcwd() not in sys.path:  # (as python -m: modules beside the caller)
            sys.path.insert(0, os.getcwd())
        try:
            fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise CliError(f"cannot load {args.what!r}: {e}") from None
        shapes = [_shape(t) for t in args.shapes.split(",") if t.strip()]
        rng = np.random.default_rng(0)
        example = [float(rng.normal()) if s == () else rng.normal(size=s) for s in shapes]
        transform = getattr(symgrad, args.transform.removesuffix("_sparse"))
        traced = transform(fn, sparse=True) if args.transform == "hessian_sparse" else transform(fn)
        return symgrad.export_c(traced, *example, name=args.name, directory=args.to)
    f = parse(args.what)
    variables = free_variables(f)
    wrt = _wrt(args.wrt, variables)
    params = [v for v in variables if v not in set(wrt)]
    if args.transform in ("hessian", "hessian_sparse"):
        fun = compile(symgrad.hessian(f, wrt, sparse=args.transform == "hessian_sparse"), wrt, params)
    elif args.transform in ("grad", "jacobian"):
        fun = compile(grad(f, wrt), wrt, params)
    else:
        fun = value_and_grad(f, wrt, params) if args.transform == "value_and_grad" else compile(f, wrt, params)
    return symgrad.export_c(fun, name=args.name, directory=args.to)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``symgrad`` console script: exit 0, 1 when ``--check`` fails, 2 for bad input.

    >>> main(["x**2", "--wrt", "x,x"])
    2
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export"]:
        try:
            written = export(argv[1:])
        except SystemExit as done:
            return int(done.code or 0)
        except (CliError, ParseError, ValueError, TypeError, NotImplementedError, RuntimeError) as err:
            _print_safely(f"symgrad export: {err}", sys.stderr)
            return 2
        _output("\n".join(map(str, written)))
        return 0
    try:
        args = _parser().parse_args(_formula_last(argv))
        out, objects = _results(args)
        text = _render(args, out, objects)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    except (CliError, ParseError, ValueError, TypeError, OverflowError, CompilerError) as err:
        _print_safely(f"symgrad: {err}", sys.stderr)
        return 2
    except (MemoryError, RecursionError) as err:
        _print_safely(f"symgrad: the formula is too large for this machine ({type(err).__name__})", sys.stderr)
        return 2
    _output(text)
    if not args.check:
        return 0
    checked = "ok" in out["check"]["status"].values() or "FAIL" in out["check"]["status"].values()
    if not checked:
        _print_safely("symgrad: --check: nothing could be checked at this point (every partial derivative is "
                      "non-finite or at a kink)", sys.stderr)
    return 0 if out["check"]["ok"] and checked else 1


def _output(text: str) -> None:
    """Print ``text`` to stdout; a reader that stops early (``symgrad ... | head -1``) ends it quietly."""
    try:
        _print_safely(text, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader has what it wanted (Python's recipe; the interpreter's last flush would
        # print a traceback): no failure of ours, so the exit status stays 0 or the check's (`set -o pipefail`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _print_safely(text: str, stream: Any) -> None:
    """Print, escaping what the stream cannot encode (bytes of invalid UTF-8 arrive as surrogates)."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    print(text.encode(encoding, "backslashreplace").decode(encoding, "replace"), file=stream)


if __name__ == "__main__":
    sys.exit(main())
