"""The ``symgrad`` command: a formula's derivatives, value, gradient and check at a point.

    symgrad "x*y + sin(x)" --at x=2,y=3
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit

import numpy as np

from symgrad.check import check_grad
from symgrad.compile.function import BACKENDS, value_and_grad
from symgrad.expr.diff import grad
from symgrad.expr.printing import format as format_exprs
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="symgrad", description="Exact derivatives of a formula, checked.")
    p.add_argument("formula", help='for example "x*y + sin(x)"')
    p.add_argument("--at", default="", help="the point, for example x=2,y=3")
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="what evaluates the compiled function")
    return p


def _per_call(fn, x: np.ndarray) -> float:
    """Seconds per call, the best of 3 runs of about 0.1 s each."""
    timer = timeit.Timer(lambda: fn(x))
    number, _ = timer.autorange()
    return min(timer.repeat(3, max(1, number // 2))) / max(1, number // 2)


def run(argv: list[str]) -> str:
    """Carry out the command and return its output text.

    >>> print(run(["x*y", "--at", "x=2,y=3"]).splitlines()[0])
    f(x, y) = x*y
    """
    args = _parser().parse_args(argv)
    f = parse(args.formula)
    xs = free_variables(f)
    names = [v.payload for v in xs]
    g = grad(f, xs)
    lines = [f"f({', '.join(names)}) = {f}"]
    lines += [f"df/d{n} = {format_exprs(e)}" for n, e in zip(names, g)]
    if not args.at:
        return "\n".join(lines)
    point = _point(args.at)
    unknown = sorted(set(point) - set(names))
    if unknown:
        raise CliError(f"--at gives {', '.join(unknown)}, which the formula does not use")
    missing = [n for n in names if n not in point]
    if missing:
        raise CliError(f"--at gives no value for {', '.join(missing)}")
    start = time.perf_counter()
    vg = value_and_grad(f, xs, backend=args.backend)
    x = np.array([point[n] for n in names])
    value, gvals = vg(x)
    ready = time.perf_counter() - start
    lines.append(f"at {', '.join(f'{n} = {point[n]:g}' for n in names)}:")
    lines.append(f"  f = {value!r}")
    lines += [f"  df/d{n} = {float(v)!r}" for n, v in zip(names, gvals)]
    lines.append(f"compiled value-and-gradient ({vg.backend}, {vg.n_ops} ops): ready in {ready:.2f} s, "
                 f"{_per_call(vg, x) * 1e6:.2f} us per call")
    report = check_grad(f, xs, [point[n] for n in names])
    lines.append("gradient check against central finite differences:")
    lines += ["  " + line for line in str(report).splitlines()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``symgrad`` console script."""
    try:
        print(run(sys.argv[1:] if argv is None else argv))
    except (CliError, ParseError) as err:
        print(f"symgrad: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
