"""Export the gradient and the sparse Hessian of a smooth convex function of 20 variables as C.

    python export.py [directory]     (default: this folder)

writes energy_vg.c / .h (value and gradient) and energy_h.c / .h (the Hessian's nonzeros, CasADi's
compressed columns), which newton.c calls. `make` runs this and builds ./newton.
"""

import sys

import numpy as np

import symgrad as sg

N = 20
TARGET = np.linspace(-1.0, 1.0, N)


def energy(x):
    """A chain of log-cosh wells pulled towards TARGET, coupled to their neighbours."""
    return np.sum(np.log(np.cosh(x - TARGET))) + 0.5 * np.sum((x[1:] - x[:-1]) ** 2) + 0.05 * np.sum(x ** 2)


if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else "."
    x0 = np.zeros(N)
    for path in (*sg.export_c(sg.value_and_grad(energy), x0, name="energy_vg", directory=folder),
                 *sg.export_c(sg.hessian(energy, sparse=True), x0, name="energy_h", directory=folder)):
        print(path)
