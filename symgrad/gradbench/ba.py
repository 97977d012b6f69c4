"""GradBench's ``ba`` (ADBench's bundle adjustment): reprojection and weight errors, and the
Jacobian in ADBench's sparse layout (GradBench keeps its first 30 entries and the last)."""

from __future__ import annotations

import numpy as np

import symgrad as sg
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.protocol import Function

SHOWN = 30  # GradBench's outputs: the first 30 entries of each list and the last


def ba_reprojection(J, cam, X, w, feat):
    """One observation's weighted reprojection error: ``cam`` = rotation (Rodrigues), centre, focal
    length, principal point, radial distortion (11 numbers); ``X`` a point; ``w`` its weight."""
    rot, centre, focal, x0, rad = cam[0:3], cam[3:6], cam[6], cam[7:9], cam[9:11]
    p = X - centre
    sqtheta = J.np.sum(rot ** 2)
    theta = J.np.sqrt(sqtheta)
    k = rot / theta
    cos, sin = J.np.cos(theta), J.np.sin(theta)
    turned = p * cos + J.np.cross(k, p) * sin + k * (J.np.dot(k, p) * (1.0 - cos))
    turned = J.np.where(sqtheta != 0.0, turned, p + J.np.cross(rot, p))
    proj = turned[0:2] / turned[2]
    rsq = J.np.sum(proj ** 2)
    distorted = proj * (1.0 + rad[0] * rsq + rad[1] * rsq * rsq)
    return w * (distorted * focal + x0 - feat)


def ba_residuals(J, z, obs, feats, n, m):
    """GradBench's BA objective on the flat unknowns z = (cameras, points, weights): the reprojection
    errors (2 per observation), then the weight errors 1 - w^2."""
    cams, X, w = z[:11 * n].reshape(n, 11), z[11 * n:11 * n + 3 * m].reshape(m, 3), z[11 * n + 3 * m:]
    errors = J.vmap(lambda c, x, wi, f: ba_reprojection(J, c, x, wi, f))(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    return J.np.concatenate([errors.reshape(-1), 1.0 - w ** 2])


def prepare(raw: dict) -> tuple:
    """GradBench's (and ADBench's) expansion: n copies of the camera, m of the point, p of the
    weight and feature; observation i sees camera i mod n and point i mod m."""
    n, m, p = raw["n"], raw["m"], raw["p"]
    cams = np.tile(np.asarray(raw["cam"], dtype=float), (n, 1))
    X = np.tile(np.asarray(raw["x"], dtype=float), (m, 1))
    w = np.full(p, float(raw["w"]))
    feats = np.tile(np.asarray(raw["feat"], dtype=float), (p, 1))
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1)
    return cams, X, w, feats, obs


def objective():
    """(reprojection errors (p, 2), weight errors (p,)) from (cams, X, w, feats, obs)."""
    errors = sg.jit(sg.vmap(lambda c, x, wi, f: ba_reprojection(SG, c, x, wi, f)))
    weight = sg.jit(lambda w: 1.0 - w ** 2)
    return lambda cams, X, w, feats, obs: (errors(cams[obs[:, 0]], X[obs[:, 1]], w, feats), weight(w))


def encode_objective(result) -> dict:
    errors, w_err = result
    return {"reproj_error": {"elements": errors[0].tolist(), "repeated": len(errors)},
            "w_err": {"element": float(w_err[0]), "repeated": len(w_err)}}


def jacobian():
    """The sparse Jacobian as ADBench's manual tool lays it out: row pointers (CSR), then for each
    observation's two rows the 11 camera, 3 point and 1 weight entries, then -2 w for each weight error."""
    one = sg.jit(sg.vmap(sg.jacrev(lambda c, x, wi, f: ba_reprojection(SG, c, x, wi, f), argnums=(0, 1, 2))))
    weight = sg.jit(sg.vmap(sg.grad(lambda wi: 1.0 - wi ** 2)))

    def compute(cams, X, w, feats, obs):
        n, m, p = len(cams), len(X), len(w)
        dc, dx, dw = one(cams[obs[:, 0]], X[obs[:, 1]], w, feats)  # (p, 2, 11), (p, 2, 3), (p, 2)
        vals = np.concatenate([np.concatenate([dc, dx, dw[:, :, None]], axis=2).ravel(), weight(w)])
        cols = np.concatenate([11 * obs[:, :1] + np.arange(11), 11 * n + 3 * obs[:, 1:] + np.arange(3),
                               11 * n + 3 * m + np.arange(p)[:, None]], axis=1)  # (p, 15)
        cols = np.concatenate([np.repeat(cols, 2, axis=0).ravel(), 11 * n + 3 * m + np.arange(p)])
        rows = np.concatenate([15 * np.arange(2 * p + 1), 30 * p + 1 + np.arange(p)])
        return rows, cols, vals

    return compute


def encode_jacobian(result) -> dict:
    return {name: np.concatenate([a[:SHOWN], a[-1:]]).tolist() for name, a in zip(("rows", "cols", "vals"), result,
                                                                                   strict=True)}


def define() -> dict[str, Function]:
    """``objective`` and ``jacobian``.

    >>> raw = {"n": 1, "m": 1, "p": 2, "cam": [0.1, 0.0, 0.0, 0.0, 0.0, -5.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    ...        "x": [0.0, 0.0, 0.0], "w": 2.0, "feat": [0.0, 0.0]}
    >>> f = define()["jacobian"]
    >>> f.encode(f.compute(*f.prepare(raw)))["rows"]
    [0, 15, 30, 45, 60, 61, 62, 62]
    """
    return {"objective": Function(prepare, objective(), encode_objective),
            "jacobian": Function(prepare, jacobian(), encode_jacobian)}
