"""symgrad as a GradBench tool (github.com/gradbench/gradbench).

``python -m symgrad.gradbench`` reads GradBench's messages (one JSON object a line) on stdin and
answers each on stdout; every eval of the suite has a module here of the same name, whose
``define()`` returns its functions. ``python -m symgrad.gradbench.run EVAL --gradbench DIR`` runs
one of GradBench's own evals (from a checkout) against the tool, as GradBench's CLI does.
"""

EVALS = ("hello", "gmm", "ba", "ht", "lstm", "ode", "kmeans", "llsq", "lse", "det", "particle", "saddle")
