"""GradBench's ``ht`` (ADBench's hand tracking): the residuals between observed points and a
skinned hand model posed by 26 angles, and their Jacobian (the 2 columns of the points' own
triangle coordinates ``us`` first when there are some, then the 26 of theta)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

import symgrad as sg
import symgrad.numpy as jnp
from symgrad.gradbench.protocol import Function

FINGERS = 5


@dataclass(frozen=True, eq=False)
class Hand:
    """The model and data, as NumPy arrays (constants for the traced functions)."""

    parents: tuple[int, ...]
    base_relatives: np.ndarray  # (bones, 4, 4)
    inverse_base_absolutes: np.ndarray  # (bones, 4, 4)
    base_positions: np.ndarray  # (vertices, 4), homogeneous
    weights: np.ndarray  # (vertices, bones)
    is_mirrored: bool
    targets: np.ndarray  # the vertex (or the triangle's 3 vertices) each point corresponds to
    points: np.ndarray  # (points, 3)


def pose_params(theta, bones: int):
    """ADBench's (3, bones + 3) pose: global rotation, scale 1, translation, then per finger the
    bend and spread of its base joint and the bends of the two others (a zero column between)."""
    columns = [theta[0:3], jnp.ones(3), theta[3:6], jnp.zeros(3), jnp.zeros(3)]
    at = 6
    for _ in range(FINGERS):
        columns.append(jnp.stack([theta[at], theta[at + 1], 0.0]))
        columns += [jnp.stack([theta[at + 2], 0.0, 0.0]), jnp.stack([theta[at + 3], 0.0, 0.0]), jnp.zeros(3)]
        at += 4
    return jnp.stack(columns[:bones + 3], axis=1)


def euler_rotation(angles):
    """Rz Ry Rx, the angles given in the order x, z, y."""
    tx, tz, ty = angles[0], angles[1], angles[2]
    cx, sx, cy, sy, cz, sz = jnp.cos(tx), jnp.sin(tx), jnp.cos(ty), jnp.sin(ty), jnp.cos(tz), jnp.sin(tz)
    rx = jnp.array([[1.0, 0.0, 0.0], [0.0, cx, -sx], [0.0, sx, cx]])
    ry = jnp.array([[cy, 0.0, sy], [0.0, 1.0, 0.0], [-sy, 0.0, cy]])
    rz = jnp.array([[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]])
    return rz @ ry @ rx


def angle_axis_rotation(angle_axis):
    """Rodrigues' rotation matrix; the identity below a norm of 1e-4, as ADBench."""
    norm = jnp.sqrt(jnp.sum(angle_axis * angle_axis))
    if norm < 1e-4:
        return jnp.eye(3)
    x, y, z = angle_axis[0] / norm, angle_axis[1] / norm, angle_axis[2] / norm
    s, c = jnp.sin(norm), jnp.cos(norm)
    return jnp.array([[x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
                      [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
                      [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c]])


def skinned_vertices(hand: Hand, pose):
    """The posed vertices (vertices, 3): each bone's absolute transform (its parent's times its
    relative one, posed), blended by the skinning weights, then the global rotation and shift."""
    absolutes = []
    for bone, parent in enumerate(hand.parents):
        turn = jnp.eye(4).at[:3, :3].set(euler_rotation(pose[:, bone + 3]))
        relative = hand.base_relatives[bone] @ turn
        absolutes.append(relative if parent == -1 else absolutes[parent] @ relative)
    transforms = jnp.stack([a @ inv for a, inv in zip(absolutes, hand.inverse_base_absolutes, strict=True)])
    blended = (hand.weights @ transforms[:, :3, :].reshape(len(hand.parents), 12)).reshape(-1, 3, 4)
    positions = jnp.sum(blended * hand.base_positions[:, None, :], axis=2)  # (vertices, 3)
    if hand.is_mirrored:
        positions = positions * np.array([-1.0, 1.0, 1.0])
    rotation = angle_axis_rotation(pose[:, 0]) * pose[:, 1][None, :]
    return positions @ rotation.T + pose[:, 2][None, :]


def residuals(hand: Hand, theta, us=None):
    """points - model points, 3 per point: the corresponding vertex, or (with ``us``) the point
    u0 v0 + u1 v1 + (1 - u0 - u1) v2 of the corresponding triangle."""
    vertices = skinned_vertices(hand, pose_params(theta, len(hand.parents)))
    if us is None:
        return (hand.points - vertices[hand.targets]).ravel()
    corners = vertices[hand.targets]  # (points, 3 corners, 3)
    u0, u1 = us[:, 0:1], us[:, 1:2]
    model = u0 * corners[:, 0] + u1 * corners[:, 1] + (1.0 - u0 - u1) * corners[:, 2]
    return (hand.points - model).ravel()


def prepare(raw: dict) -> tuple:
    """(hand, theta, us or None) from the eval's input."""
    data, model = raw["data"], raw["data"]["model"]
    us = np.asarray(raw["us"], dtype=float).reshape(-1, 2) if len(raw["us"]) else None
    correspondences = np.asarray(data["correspondences"], dtype=int)
    targets = correspondences if us is None else np.asarray(model["triangles"], dtype=int)[correspondences]
    hand = Hand(tuple(int(p) for p in model["parents"]), np.asarray(model["base_relatives"], dtype=float),
                np.asarray(model["inverse_base_absolutes"], dtype=float),
                np.asarray(model["base_positions"], dtype=float), np.asarray(model["weights"], dtype=float),
                bool(model["is_mirrored"]), targets, np.asarray(data["points"], dtype=float))
    return hand, np.asarray(raw["theta"], dtype=float), us


@functools.lru_cache(maxsize=1)
def compiled(hand: Hand) -> tuple:
    """The traced functions of one hand (the model's arrays are constants in them): the objective
    without and with us, the Jacobian without and with us."""
    return (sg.jit(lambda theta: residuals(hand, theta)), sg.jit(lambda theta, us: residuals(hand, theta, us)),
            sg.jit(sg.jacfwd(lambda theta: residuals(hand, theta))),
            sg.jit(sg.jacfwd(lambda theta, du, us: residuals(hand, theta, us + du), argnums=(0, 1))))


def objective(hand: Hand, theta, us):
    plain, with_us = compiled(hand)[:2]
    return plain(theta) if us is None else with_us(theta, us)


def jacobian(hand: Hand, theta, us):
    """(residuals, 26) or, with us, (residuals, 2 + 26): a point's residuals depend on its own
    us only, so one direction per u coordinate (all points' at once) gives those 2 columns."""
    plain, shifted = compiled(hand)[2:]
    if us is None:
        return plain(theta)
    d_theta, d_us = shifted(theta, np.zeros(2), us)
    return np.concatenate([d_us, d_theta], axis=1)


def define() -> dict[str, Function]:
    """``objective`` and ``jacobian``."""
    return {"objective": Function(prepare, objective, np.ndarray.tolist),
            "jacobian": Function(prepare, jacobian, np.ndarray.tolist)}
