"""Make cases.json.gz: small inputs, generated as GradBench's evals generate theirs (same code, same
seeds, smaller sizes), each with the answer of GradBench's reference (its C++ ``manual`` tool)
or the eval's own expected value (particle, saddle).

``python tests/data/gradbench/make_cases.py DIR``, DIR a GradBench checkout whose
``tools/manual/bin`` is built (``python -m symgrad.gradbench.run EVAL --gradbench DIR`` builds it).
"""

import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(ROOT / "python/gradbench"))

from gradbench import cpp  # noqa: E402
from gradbench.evals.ba.run import parse  # noqa: E402
from gradbench.evals.gmm.run import generate  # noqa: E402
from gradbench.evals.ht import io  # noqa: E402
from gradbench.evals.lstm.run import gen_lstm  # noqa: E402


def reference(module, function, input):
    import os
    os.chdir(ROOT)
    answer = cpp.evaluate(tool="manual", module=module, function=function, input=input | {"min_runs": 1,
                                                                                          "min_seconds": 0})
    assert answer["success"], answer
    return answer["output"]


def small_hand(variant, points):
    """hand1 of GradBench's small model, its first ``points`` points."""
    data_dir = ROOT / f"evals/ht/data/{variant}_small"
    fn = next(data_dir.glob("hand1_*.txt"))
    raw = io.read_hand_instance(data_dir / "model", fn, variant == "complicated").to_dict()
    raw["data"]["correspondences"] = raw["data"]["correspondences"][:points]
    raw["data"]["points"] = raw["data"]["points"][:points]
    raw["us"] = raw["us"][:points]
    return raw


def inputs():
    np.random.seed(31337)
    x = np.random.rand(50).tolist()
    yield "lse", {"x": x}
    np.random.seed(31337)
    yield "llsq", {"x": np.random.rand(8).tolist(), "n": 16}
    np.random.seed(31337)
    points = np.random.rand(20, 2).tolist()
    yield "kmeans", {"points": points, "centroids": points[-3:]}
    np.random.seed(31337)
    yield "ode", {"x": np.random.rand(10).tolist(), "s": 2}
    np.random.seed(31337)
    yield "det", {"A": np.random.rand(25).tolist(), "ell": 5}
    yield "gmm", generate(seed=31337, d=2, k=3, n=20, m=0, gamma=1.0)
    ba = parse(next((ROOT / "evals/ba/data").glob("ba1_*.txt")))
    yield "ba", ba | {"n": 3, "m": 5, "p": 10}
    yield "ht", small_hand("simple", 10)
    yield "ht", small_hand("complicated", 10)
    np.random.seed(31337)
    text = (ROOT / "evals/lstm/data/lstm_full.txt").read_text(encoding="utf8")
    yield "lstm", gen_lstm(text, 1, 8).to_dict()


FUNCTIONS = {"lse": ("primal", "gradient"), "llsq": ("primal", "gradient"), "kmeans": ("cost", "dir"),
             "ode": ("primal", "gradient"), "det": ("primal", "gradient"), "gmm": ("objective", "jacobian"),
             "ba": ("objective", "jacobian"), "ht": ("objective", "jacobian"), "lstm": ("objective", "jacobian")}


def main():
    cases = [{"eval": name, "function": f, "input": raw, "expected": reference(name, f, raw)}
             for name, raw in inputs() for f in FUNCTIONS[name]]
    cases += [{"eval": "particle", "function": f, "input": {"w": 0.0}, "expected": 0.2071918746486116}
              for f in ("rr", "ff", "fr", "rf")]
    cases += [{"eval": "saddle", "function": f, "input": {"start": [1.0, 1.0]},
               "expected": [8.246324826140356e-06] * 4} for f in ("rr", "ff", "fr", "rf")]
    out = Path(__file__).with_name("cases.json.gz")
    with gzip.open(out, "wt") as f:
        json.dump(cases, f)
    print(out, len(cases), out.stat().st_size)


main()
