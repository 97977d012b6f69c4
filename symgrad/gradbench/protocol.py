"""GradBench's protocol (CONTRIBUTING.md there): one JSON message a line in, one response a line out."""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from symgrad.gradbench import EVALS


@dataclass
class Function:
    """One function of an eval's module: ``prepare`` turns the message's input into arguments,
    ``compute`` is what is timed, ``encode`` turns its result into the JSON the eval expects.

    >>> f = Function(lambda raw: (float(raw),), lambda x: x * x, float)
    >>> answer(f, 3.0)["output"]
    9.0
    """

    prepare: Callable[[Any], tuple]
    compute: Callable[..., Any]
    encode: Callable[[Any], Any]


def timing(name: str, start: int) -> dict:
    return {"name": name, "nanoseconds": time.perf_counter_ns() - start}


def answer(function: Function, raw: Any) -> dict:
    """Evaluate ``function`` on a message's input: one "warmup" call (tracing and compiling for
    these shapes happen here), then at least ``min_runs`` calls and ``min_seconds`` seconds of
    them, each an "evaluate" timing.

    >>> answer(Function(lambda raw: (raw["x"],), abs, float), {"x": -2, "min_runs": 2})["timings"][-1]["name"]
    'evaluate'
    """
    start = time.perf_counter_ns()
    args = function.prepare(raw)
    timings = [timing("prepare", start)]
    start = time.perf_counter_ns()
    result = function.compute(*args)
    timings.append(timing("warmup", start))
    min_runs, min_seconds = (raw.get("min_runs", 1), raw.get("min_seconds", 0.0)) if isinstance(raw, dict) \
        else (1, 0.0)
    elapsed = runs = 0
    while runs < min_runs or elapsed < min_seconds * 1e9:
        start = time.perf_counter_ns()
        result = function.compute(*args)
        timings.append(timing("evaluate", start))
        elapsed += timings[-1]["nanoseconds"]
        runs += 1
    return {"success": True, "output": function.encode(result), "timings": timings}


def failure(error: BaseException) -> dict:
    return {"success": False, "error": "".join(traceback.format_exception(error))}


class Tool:
    """The tool's state: the modules defined so far.

    >>> Tool().respond({"id": 0, "kind": "start"})
    {'id': 0, 'tool': 'symgrad'}
    """

    def __init__(self) -> None:
        self.modules: dict[str, dict[str, Function]] = {}

    def define(self, module: str) -> dict:
        if module not in EVALS:
            return {"success": False, "error": f"symgrad has no module {module!r}"}
        start = time.perf_counter_ns()
        try:
            self.modules[module] = importlib.import_module(f"symgrad.gradbench.{module}").define()
        except Exception as error:  # noqa: BLE001 (the eval is told, and stops)
            return failure(error)
        return {"success": True, "timings": [timing("define", start)]}

    def evaluate(self, message: dict) -> dict:
        module, name = message.get("module"), message.get("function")
        if module not in self.modules:
            return {"success": False, "error": f"module {module!r} is not defined (a define message first)"}
        if name not in self.modules[module]:
            return {"success": False, "error": f"{module} has no function {name!r}: it has "
                                               f"{', '.join(sorted(self.modules[module]))}"}
        try:
            return answer(self.modules[module][name], message.get("input"))
        except Exception as error:  # noqa: BLE001 (the eval is told; the session goes on)
            return failure(error)

    def respond(self, message: dict) -> dict:
        """The response to one message.

        >>> Tool().respond({"id": 1, "kind": "evaluate", "module": "lse", "function": "primal"})["error"]
        "module 'lse' is not defined (a define message first)"
        """
        response = {"id": message.get("id")}
        kind = message.get("kind")
        if kind == "start":
            response["tool"] = "symgrad"
        elif kind == "define":
            response |= self.define(message.get("module"))
        elif kind == "evaluate":
            response |= self.evaluate(message)
        return response


def serve(lines: IO[str], out: IO[str]) -> None:
    """Answer each message line of ``lines`` on ``out``, flushed, until the input ends; a line that
    is not a JSON object is answered with an error naming it."""
    tool = Tool()
    for line in lines:
        if line.strip():
            try:
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError("not a JSON object")
            except ValueError as error:
                response = {"id": None, "success": False,
                            "error": f"unreadable message {line.strip()[:80]!r}: {error}"}
            else:
                response = tool.respond(message)
            print(json.dumps(response), file=out, flush=True)


def main() -> None:
    try:
        serve(sys.stdin, sys.stdout)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
