r"""The model of CMTRF (:mod:`jaxcal.recsys._cmtrf_core`) and one sweep of its fit.

:class:`Config` holds a fit's static settings and :class:`State` one model's parameters;
:func:`scores` and :func:`predict_ratings` evaluate a state, :func:`validation_mse` scores
it on the validation ratings. A :func:`sweep` refits the global offset, solves the user
then the item half-step (:mod:`jaxcal.recsys._cmtrf_als`) and refits every group's
transform (:mod:`jaxcal.recsys._cmtrf_transform`), reassigning clustered users first.
Pure functions of arrays (jittable, ``vmap``-able).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxcal.recsys import _cmtrf_transform as cmtrf_transform
from jaxcal.recsys._cmtrf_als import Pairs, _half_step, half_step_dense, pair_dots

__all__ = [
    "Config",
    "Problem",
    "State",
    "scores",
    "predict_ratings",
    "validation_mse",
    "initial_state",
    "dense_ratings",
    "user_stats",
    "sweep",
]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Config:
    """Static settings of a fit (part of the compiled program's key)."""

    n_users: int
    n_items: int
    n_levels: int
    rank: int
    transform: str = "global"  # "none" | "global" | "per_user" | "clustered"
    loss: str = "squared"  # "squared" | "poisson"
    anchor: bool = True
    biases: bool = False
    n_clusters: int = 5
    n_sweeps: int = 50
    n_newton: int = 8
    kmeans_iters: int = 100
    init_scale: float = 0.1
    batch_size: int | None = None  # grid points per vmap chunk (None: one after another)
    dense: bool = False  # half-steps on dense [n_users, n_items] masks (small matrices)
    native: bool = False  # ridge systems and pair scores by the compiled CPU kernels (_native)
    offset: bool = True  # a global offset mu in theta (unpenalised, refitted every sweep)
    warm_start: bool = False  # grid points in order, each from the previous one's factors


class Problem(NamedTuple):
    """The training ratings sorted by user and by item, and the validation ratings
    (``row`` = user, ``col`` = item)."""

    by_user: Pairs
    by_item: Pairs
    validation: Pairs


class State(NamedTuple):
    """Parameters of one model: factors, biases, transforms ``[G, L]`` and groups."""

    user_factors: jax.Array  # [n_users, d]
    item_factors: jax.Array  # [n_items, d]
    user_bias: jax.Array  # [n_users]
    item_bias: jax.Array  # [n_items]
    transforms: jax.Array  # [G, L]
    group: jax.Array  # [n_users] int32
    offset: jax.Array  # [] global offset mu of theta (unpenalised; 0 unless cfg.offset)


def scores(state: State, users: jax.Array, items: jax.Array, *, native: bool = False) -> jax.Array:
    r"""Natural parameters :math:`\theta_{ui}` of ``(users, items)`` (``native``: 1-D ids,
    the products by the compiled kernel in CPU programs)."""
    if native:
        theta = pair_dots(state.user_factors, state.item_factors, users, items, native=True)
    else:
        theta = jnp.sum(state.user_factors[users] * state.item_factors[items], axis=-1)
    return theta + state.user_bias[users] + state.item_bias[items] + state.offset


def predict_ratings(state: State, users, items, *, loss: str, native: bool = False) -> jax.Array:
    """Predicted ratings: :func:`inverse_transform` of :math:`f(\\theta)` through each user's
    group transform (no clipping; ``native`` as in :func:`scores`)."""
    s = cmtrf_transform.link(scores(state, users, items, native=native), loss)
    return cmtrf_transform.inverse_transform(s, state.transforms[state.group[users]])


def dense_ratings(problem: Problem, cfg: Config):
    """``[n_users, n_items]`` weights and levels of the training ratings (dense path)."""
    pu = problem.by_user
    shape = (cfg.n_users, cfg.n_items)
    weight = jnp.zeros(shape, pu.weight.dtype).at[pu.row, pu.col].add(pu.weight)
    level = jnp.zeros(shape, jnp.int32).at[pu.row, pu.col].max(pu.level)
    return weight, level


def _half_steps(state: State, problem: Problem, l2_user, l2_item, cfg: Config, dense=None) -> State:
    """The global offset (``cfg.offset``), the user half-step (every user from the same item
    side), then the item half-step: exact coordinate minimisation, so the item factors that
    come out are stationary."""
    if cfg.offset:
        state = _refit_offset(state, problem, cfg)
    tr = state.transforms
    if dense is None:
        solver = functools.partial(_half_step, native=cfg.native)
    else:
        solver = half_step_dense
    solver = functools.partial(solver, loss=cfg.loss, n_newton=cfg.n_newton)

    def solve(x, bias, other, other_bias, data, l2):
        start = jnp.concatenate([x, bias[:, None]], 1) if cfg.biases else x
        if cfg.biases:
            other = jnp.concatenate([other, jnp.ones_like(other[:, :1])], axis=1)
        else:
            other_bias = jnp.zeros_like(other_bias)
        other_bias = other_bias + state.offset
        if dense is None:
            pairs, target = data
            new = solver(start, other, pairs.col, other_bias[pairs.col], target, pairs, l2)
        else:
            new = solver(start, other, other_bias, *data, l2)
        return (new[:, :-1], new[:, -1]) if cfg.biases else (new, bias)

    if dense is None:
        pu, pi = problem.by_user, problem.by_item
        data_u = (pu, tr[state.group[pu.row], pu.level])
    else:
        weight, level = dense
        target = jnp.take_along_axis(tr[state.group], level, axis=1)  # [n_users, n_items]
        data_u = (target, weight)
    u, bu = solve(
        state.user_factors, state.user_bias, state.item_factors, state.item_bias, data_u, l2_user
    )
    data_i = (pi, tr[state.group[pi.col], pi.level]) if dense is None else (target.T, weight.T)
    v, bi = solve(state.item_factors, state.item_bias, u, bu, data_i, l2_item)
    return state._replace(user_factors=u, user_bias=bu, item_factors=v, item_bias=bi)


def _refit_offset(state: State, problem: Problem, cfg: Config) -> State:
    r"""The global offset :math:`\mu` minimising the loss with everything else fixed (exact:
    the mean residual for squared loss, :math:`\log \sum t - \log \sum e^{\theta - \mu}`
    for the I-divergence)."""
    pu = problem.by_user
    theta = scores(state, pu.row, pu.col, native=cfg.native)
    target = state.transforms[state.group[pu.row], pu.level]
    w = pu.weight
    if cfg.loss == "squared":
        shift = jnp.sum(w * (target - theta)) / jnp.sum(w)
    else:
        shift = jnp.log(jnp.sum(w * target)) - jnp.log(jnp.sum(w * jnp.exp(theta)))
    return state._replace(offset=state.offset + shift)


def user_stats(state: State, problem: Problem, cfg: Config):
    pu = problem.by_user
    theta = scores(state, pu.row, pu.col, native=cfg.native)
    return cmtrf_transform.level_stats(theta, pu, cfg.n_users, cfg.n_levels)


def _refit_transforms(state, count_u, total_u, n_groups, epsilon, cfg: Config) -> State:
    """Transforms of the groups in ``state.group`` from per-user level statistics; a group
    without ratings keeps its transform."""
    count = jax.ops.segment_sum(count_u, state.group, num_segments=n_groups)
    total = jax.ops.segment_sum(total_u, state.group, num_segments=n_groups)
    new = cmtrf_transform.transform_step(count, total, epsilon, loss=cfg.loss, anchor=cfg.anchor)
    keep = jnp.any(count > 0, axis=1, keepdims=True)
    return state._replace(transforms=jnp.where(keep, new, state.transforms))


def _reassign(state: State, count_u, total_u, cfg: Config) -> State:
    r"""Each user to the cluster whose transform gives its training ratings the smallest
    loss: :math:`\arg\min_c \sum_r n_{ur}\phi(z_{cr}) - z_{cr} s_{ur}`."""
    z = state.transforms
    loss = count_u @ cmtrf_transform.phi(z, cfg.loss).T - total_u @ z.T
    return state._replace(group=jnp.argmin(loss, axis=1).astype(jnp.int32))


def sweep(
    state: State,
    problem: Problem,
    l2_user,
    l2_item,
    epsilon,
    cfg: Config,
    dense=None,
    *,
    reassign: bool = False,
) -> State:
    """One sweep: :func:`_half_steps` (``dense``: :func:`dense_ratings`, or None for the
    pairs), then, unless ``cfg.transform`` is ``"none"``, every group's transform refitted
    (with ``reassign``, after each user moved to its best cluster)."""
    state = _half_steps(state, problem, l2_user, l2_item, cfg, dense)
    if cfg.transform == "none":
        return state
    count_u, total_u = user_stats(state, problem, cfg)
    if reassign:
        state = _reassign(state, count_u, total_u, cfg)
    return _refit_transforms(state, count_u, total_u, state.transforms.shape[0], epsilon, cfg)


def validation_mse(state: State, problem: Problem, cfg: Config) -> jax.Array:
    """Weighted mean squared error of the predicted ratings on the validation pairs."""
    pv = problem.validation
    pred = predict_ratings(state, pv.row, pv.col, loss=cfg.loss, native=cfg.native)
    err = jnp.where(pv.weight > 0, (pred - (pv.level + 1.0)) ** 2, 0.0)
    return jnp.sum(pv.weight * err) / jnp.maximum(jnp.sum(pv.weight), 1.0)


def initial_state(key: jax.Array, epsilon, cfg: Config) -> State:
    """The random start of a fit (``key``: raw key data, as :func:`fit_one`'s): zero user
    factors, item factors drawn with standard deviation ``cfg.init_scale``, the evenly
    spaced transform."""
    k_init, _ = jax.random.split(jax.random.wrap_key_data(key))
    dtype = jnp.result_type(float)
    g = {"none": 1, "global": 1, "per_user": cfg.n_users, "clustered": cfg.n_users}[cfg.transform]
    return State(
        user_factors=jnp.zeros((cfg.n_users, cfg.rank), dtype),
        item_factors=cfg.init_scale * jax.random.normal(k_init, (cfg.n_items, cfg.rank), dtype),
        user_bias=jnp.zeros(cfg.n_users, dtype),
        item_bias=jnp.zeros(cfg.n_items, dtype),
        transforms=jnp.broadcast_to(
            cmtrf_transform.initial_transform(cfg.n_levels, epsilon, dtype), (g, cfg.n_levels)
        ),
        group=jnp.zeros(cfg.n_users, jnp.int32)
        if g == 1
        else jnp.arange(cfg.n_users, dtype=jnp.int32),
        offset=jnp.zeros((), dtype),
    )
