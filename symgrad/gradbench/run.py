"""Run one of GradBench's evals against this tool, relaying messages as GradBench's CLI does.

``python -m symgrad.gradbench.run EVAL --gradbench DIR [-- EVAL OPTIONS]``: DIR is a GradBench
checkout; its eval (``python/gradbench/gradbench/evals/EVAL/run.py``, run from DIR as GradBench's
Docker images do) checks every answer, most against GradBench's C++ ``manual`` tool
(``tools/manual/bin/EVAL``, built here with make when missing; it needs nlohmann's json.hpp as
``cpp/json.hpp``). Prints one line for each evaluation: its validity and timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

NEEDS_MANUAL = ("gmm", "ba", "ht", "lstm", "ode", "kmeans", "llsq", "lse", "det")


def build_reference(root: Path, eval_name: str) -> None:
    """GradBench's reference binary for the eval, built as its Dockerfiles do (not for this CPU)."""
    if eval_name not in NEEDS_MANUAL or (root / "tools/manual/bin" / eval_name).exists():
        return
    header = Path("/usr/include/nlohmann/json.hpp")
    if not (root / "cpp/json.hpp").exists() and header.exists():
        shutil.copytree(header.parent, root / "cpp/nlohmann", dirs_exist_ok=True)
        shutil.copy(header, root / "cpp/json.hpp")
    subprocess.run(["make", "-C", str(root / "tools/manual"), f"bin/{eval_name}", "NATIVE=no"], check=True,
                   stdout=subprocess.DEVNULL)


def relay(eval_cmd: list[str], tool_cmd: list[str], cwd: Path, env: dict, log=None) -> list[dict]:
    """Pass each eval message to the tool and each response back, until the eval ends; return one
    record per evaluation: the message, the response and the eval's analysis of it."""
    evaluation = subprocess.Popen(eval_cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
    tool = subprocess.Popen(tool_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    records: dict[int, dict] = {}
    for line in evaluation.stdout:
        message = json.loads(line)
        tool.stdin.write(line if line.endswith("\n") else line + "\n")
        tool.stdin.flush()
        if message["kind"] == "end":
            break
        reply = tool.stdout.readline()
        if log is not None:
            log.write(json.dumps({"message": message}) + "\n" + json.dumps({"response": json.loads(reply)}) + "\n")
        if message["kind"] == "evaluate":
            records[message["id"]] = {"message": message, "response": json.loads(reply)}
        elif message["kind"] == "analysis":
            records[message["of"]]["analysis"] = message
        evaluation.stdin.write(reply)
        evaluation.stdin.flush()
    for process in (evaluation, tool):
        process.stdin.close()
        process.wait()
    return list(records.values())


def summary(record: dict) -> str:
    """One line: function, input description, validity, warmup and best evaluate time."""
    message, response = record["message"], record["response"]
    times = {}
    for t in response.get("timings", []):
        times.setdefault(t["name"], []).append(t["nanoseconds"] / 1e9)
    analysis = record.get("analysis", {})
    verdict = "valid" if analysis.get("valid") else f"INVALID {analysis.get('error') or response.get('error', '')}"
    timing = " ".join(f"{name}={min(v):.4g}s" + (f"(x{len(v)})" if len(v) > 1 else "")
                      for name, v in times.items())
    return f"{message['function']:10} {message.get('description', ''):24} {verdict:6} {timing}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("eval")
    parser.add_argument("--gradbench", required=True, type=Path, help="a GradBench checkout")
    parser.add_argument("--log", type=Path, help="write every message and response here")
    argv = sys.argv[1:] if argv is None else argv
    ours, eval_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    root = args.gradbench.resolve()
    build_reference(root, args.eval)
    env = dict(os.environ, PYTHONPATH=str(root / "python/gradbench"))
    eval_cmd = [sys.executable, str(root / f"python/gradbench/gradbench/evals/{args.eval}/run.py"), *eval_args]
    here = str(Path(__file__).resolve().parents[2])  # the tool runs this symgrad, installed or not
    tool_env_path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    tool_cmd = ["env", f"PYTHONPATH={tool_env_path}", sys.executable, "-m", "symgrad.gradbench"]
    log = args.log.open("w") if args.log else None
    records = relay(eval_cmd, tool_cmd, root, env, log)
    for record in records:
        print(summary(record), flush=True)
    valid = sum(bool(r.get("analysis", {}).get("valid")) for r in records)
    print(f"{args.eval}: {valid} of {len(records)} evaluations valid")
    return 0 if records and valid == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
