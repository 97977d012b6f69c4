"""The numbers that choose a trace's path and bound its caches: set them here (``symgrad.trace.limits``)."""

MAX_TRACES = 32  # argument signatures remembered per function (oldest dropped first)
MAX_BRANCHES = 8  # traces kept per signature, one per way Python control flow on traced values went
# Where an array argument has at least this many elements, array arguments trace as rolled arrays
# (sg.array), under the transforms that take them; smaller problems element by element
# (straight-line code is the faster at that size).
ROLLED_MIN = 64
# A rolled trace of at least NESTS_MIN scalar nodes whose elements number at most UNROLLED_MAX is
# traced element by element instead: a Python loop over short arrays (an RNN's time steps over a
# hidden state of 8) makes thousands of loop nests of a few iterations each, too many for Numba to
# compile quickly and slow on the loop VM (the rnn example: 18 ms a call rolled, 0.5 ms unrolled).
NESTS_MIN, UNROLLED_MAX = 500, 10**5
# An element trace whose lax.scan or fori_loop runs at least LONG_LOOP steps is traced rolled instead
# (its arrays as rolled arrays, whatever their size): the element trace repeats the step's nodes per step
# (an ODE's RK4 over a state of 10, gradient: 1000 steps 98 000 nodes, 17 s to the first result against
# 0.18 s rolled; 10 steps 0.27 s against 0.20, the same per call).
LONG_LOOP = 8
RETRACES_NOTE = 8  # retraces (changed captured values, new branches) before one warning says why
