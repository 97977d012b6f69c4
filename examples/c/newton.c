/* Newton's method on the exported energy: its gradient and sparse Hessian (CasADi's calling convention,
   compressed columns) from energy_vg.c and energy_h.c, the linear system solved dense (20 unknowns).
   Prints each iterate's energy and gradient norm, then the minimiser. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "energy_h.h"
#include "energy_vg.h"

#define N 20

static void solve(double a[N][N], double b[N]) {  /* Gaussian elimination, partial pivoting: a x = b */
    for (int k = 0; k < N; ++k) {
        int p = k;
        for (int i = k + 1; i < N; ++i) if (fabs(a[i][k]) > fabs(a[p][k])) p = i;
        for (int j = 0; j < N; ++j) { double t = a[k][j]; a[k][j] = a[p][j]; a[p][j] = t; }
        double t = b[k]; b[k] = b[p]; b[p] = t;
        for (int i = k + 1; i < N; ++i) {
            double m = a[i][k] / a[k][k];
            for (int j = k; j < N; ++j) a[i][j] -= m * a[k][j];
            b[i] -= m * b[k];
        }
    }
    for (int i = N - 1; i >= 0; --i) {
        for (int j = i + 1; j < N; ++j) b[i] -= a[i][j] * b[j];
        b[i] /= a[i][i];
    }
}

int main(void) {
    double x[N] = {0}, value, grad[N], nonzeros[N * N], hessian[N][N], step[N];
    const double* arg[1] = {x};
    double* vg_res[2] = {&value, grad};
    double* h_res[1] = {nonzeros};
    const long long* sp = energy_h_sparsity_out(0);  /* nrow, ncol, colind[ncol + 1], row[nnz] */
    for (int iteration = 0; iteration < 8; ++iteration) {
        if (energy_vg(arg, vg_res, 0, 0, 0) || energy_h(arg, h_res, 0, 0, 0)) return 1;
        double norm = 0.0;
        for (int i = 0; i < N; ++i) norm += grad[i] * grad[i];
        printf("iteration %d: energy %.15f, |gradient| %.3e\n", iteration, value, sqrt(norm));
        memset(hessian, 0, sizeof hessian);
        for (long long c = 0; c < sp[1]; ++c)
            for (long long k = sp[2 + c]; k < sp[2 + c + 1]; ++k) hessian[sp[2 + sp[1] + 1 + k]][c] = nonzeros[k];
        for (int i = 0; i < N; ++i) step[i] = -grad[i];
        solve(hessian, step);
        for (int i = 0; i < N; ++i) x[i] += step[i];
    }
    printf("x =");
    for (int i = 0; i < N; ++i) printf(" %.17g", x[i]);
    printf("\n");
    return 0;
}
