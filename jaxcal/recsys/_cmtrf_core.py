r"""The pure core of CMTRF (clustered monotone transforms for rating factorisation).

Hiranandani, Somani, Koyejo and Acharyya, "Clustered Monotone Transforms for Rating
Factorization", WSDM 2019. A rating :math:`r_{ui} \in \{1, \dots, L\}` is modelled through a
monotone transform :math:`z_g` of the rating scale, shared by a group :math:`g(u)` of users
(one group, one per user, or one per cluster), and a low-rank natural parameter
:math:`\theta_{ui} = \langle x_u, y_i \rangle (+ b_u + c_i)`:

.. math::
    \min_{X, Y, b, c, z} \sum_{(u, i)} D_\phi\big(z_{g(u)}[r_{ui}] \,\|\, f(\theta_{ui})\big)
    + \tfrac{\lambda_u}{2} \sum_u \lVert (x_u, b_u) \rVert^2
    + \tfrac{\lambda_i}{2} \sum_i \lVert (y_i, c_i) \rVert^2,
    \quad z_g[r + 1] - z_g[r] \ge \varepsilon,

with :math:`D_\phi` the squared loss (:math:`\phi = z^2/2`, :math:`f = \mathrm{id}`) or the
generalised I-divergence (:math:`\phi = z \log z - z`, :math:`f = \exp`) and, when anchored,
:math:`z_g[1] = 1`, :math:`z_g[L] = L`.

Everything here is a pure function of arrays (jittable, ``vmap``-able, float32 or float64),
in modules by concern, all re-exported here:

* :func:`half_step` (``_cmtrf_als``): one side's factors given the other's (ridge closed
  form / damped Newton; with ``Config.native``, CPU programs solve the per-row systems and
  score the pairs with the compiled kernels ``jaxcal._native.ridge_rows_cpu`` /
  ``pair_scores_cpu``, other programs with ``segment_sum`` and gathers);
* :func:`level_stats`, :func:`transform_step` (``_cmtrf_transform``): the exact transform
  step (min-max formula of isotonic regression on :math:`y_r = z_r - \varepsilon (r - 1)`,
  clipped to the anchors); :func:`inverse_transform`: ratings from scores;
* :func:`kmeans_plus_plus`, :func:`kmeans` (``_kmeans``): k-means over per-user transforms;
* :class:`Config`, :class:`State`, :func:`predict_ratings`, :func:`sweep`
  (``_cmtrf_sweep``): the model, its predictions and one sweep of its fit;
* here: :func:`fit_one`, one model with early stopping on validation; :func:`fit_grid`:
  many; :func:`replay`: a chosen one again, on more ratings.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxcal._jit import jit
from jaxcal.recsys._cmtrf_als import (
    Pairs,
    _half_step,  # noqa: F401  (tests reach the private steps through this module)
    half_step,
    half_step_dense,
)
from jaxcal.recsys._cmtrf_sweep import (
    Config,
    Problem,
    State,
    _refit_offset,  # noqa: F401
    dense_ratings,
    initial_state,
    predict_ratings,
    scores,
    sweep,
    user_stats,
    validation_mse,
)
from jaxcal.recsys._cmtrf_transform import (
    initial_transform,
    inverse_transform,
    level_stats,
    link,
    phi,
    transform_step,
)
from jaxcal.recsys._kmeans import kmeans, kmeans_plus_plus

__all__ = [
    "Config",
    "Pairs",
    "Problem",
    "State",
    "FitOutput",
    "phi",
    "link",
    "half_step",
    "half_step_dense",
    "level_stats",
    "transform_step",
    "initial_transform",
    "kmeans_plus_plus",
    "kmeans",
    "inverse_transform",
    "scores",
    "predict_ratings",
    "validation_mse",
    "initial_state",
    "fit_one",
    "fit_grid",
    "replay",
    "replay_starts",
]


class FitOutput(NamedTuple):
    """One fit: the best-validation state, its sweep, the per-sweep validation MSEs (nan
    after stopping) and, for ``clustered``, those of the per-user pre-training phase."""

    state: State
    best_sweep: jax.Array
    best_mse: jax.Array
    history: jax.Array  # [n_sweeps]
    pretrain_history: jax.Array  # [n_sweeps] (nan unless clustered)


def _early_stopping(step, state: State, evaluate, n_sweeps: int, patience, tol):
    """Run ``step`` up to ``n_sweeps`` times, stopping after ``patience`` sweeps without
    progress: a validation MSE more than ``tol`` (relative) below the one of the last
    progress; returns the best state (lowest validation MSE), its sweep, MSE and the
    history."""
    dtype = state.user_factors.dtype
    history = jnp.full(n_sweeps, jnp.nan, dtype)

    def cond(c):
        t, _, _, _, _, _, ref_t, _ = c
        return (t < n_sweeps) & (t - 1 - ref_t < patience)

    def body(c):
        t, cur, best, best_mse, best_t, ref_mse, ref_t, history = c
        cur = step(cur)
        mse = evaluate(cur)
        better = mse < best_mse
        progress = mse < ref_mse * (1 - tol)
        best = jax.tree.map(lambda a, b: jnp.where(better, a, b), cur, best)
        return (
            t + 1,
            cur,
            best,
            jnp.where(better, mse, best_mse),
            jnp.where(better, t, best_t),
            jnp.where(progress, mse, ref_mse),
            jnp.where(progress, t, ref_t),
            history.at[t].set(mse),
        )

    inf = jnp.asarray(jnp.inf, dtype)
    init = (jnp.int32(0), state, state, inf, jnp.int32(-1), inf, jnp.int32(-1), history)
    _, _, best, best_mse, best_t, _, _, history = lax.while_loop(cond, body, init)
    return best, best_t, best_mse, history


def fit_one(
    problem: Problem,
    key: jax.Array,
    l2_user,
    l2_item,
    epsilon,
    patience,
    tol,
    cfg: Config,
    start: State | None = None,
    sweeps: tuple[jax.Array, jax.Array] | None = None,
) -> tuple[FitOutput, State]:
    """One CMTRF fit (module docstring) with early stopping on the validation MSE.

    ``transform="clustered"``: the per-user fit first (early-stopped), k-means++ and Lloyd
    over its transforms (users with training ratings), then sweeps of (ALS half-steps,
    reassignment of every user by training loss, refit of each cluster's transform), again
    early-stopped. ``key``: raw key data (``jax.random.key_data``). ``start``: a state whose
    factors, biases, offset and transforms replace the random ones of
    :func:`initial_state` (warm start; for ``clustered``, of the per-user phase).
    ``sweeps``: ``(first, second)`` numbers of sweeps of the first and (``clustered``) the
    second phase, run without early stopping (a replay of a chosen fit; the validation MSEs
    are then ``nan``). Returns the fit and the state a next warm-started fit starts from
    (the best state; for ``clustered``, of its per-user phase)."""
    dtype = jnp.result_type(float)
    state = initial_state(key, epsilon, cfg)
    _, k_means = jax.random.split(jax.random.wrap_key_data(key))
    if start is not None:
        state = state._replace(
            user_factors=start.user_factors,
            item_factors=start.item_factors,
            user_bias=start.user_bias,
            item_bias=start.item_bias,
            offset=start.offset,
            transforms=start.transforms,
        )
    evaluate = functools.partial(validation_mse, problem=problem, cfg=cfg)
    dense = dense_ratings(problem, cfg) if cfg.dense else None

    def step(state, reassign=False):
        return sweep(state, problem, l2_user, l2_item, epsilon, cfg, dense, reassign=reassign)

    def phase(step, state, n_fixed):
        if sweeps is None:
            return _early_stopping(step, state, evaluate, cfg.n_sweeps, patience, tol)
        nan = jnp.full(cfg.n_sweeps, jnp.nan, dtype)
        end = lax.fori_loop(0, n_fixed, lambda _, s: step(s), state)
        return end, n_fixed - 1, jnp.asarray(jnp.nan, dtype), nan

    first, second = (None, None) if sweeps is None else sweeps
    best, best_t, best_mse, history = phase(step, state, first)
    pre = jnp.full(cfg.n_sweeps, jnp.nan, dtype)
    carry = best
    if cfg.transform == "clustered":
        pre = history
        count_u, _ = user_stats(best, problem, cfg)
        rated = (jnp.sum(count_u, axis=1) > 0).astype(dtype)
        per_user = best.transforms
        centres = kmeans_plus_plus(k_means, per_user, rated, cfg.n_clusters)
        centres, labels = kmeans(per_user, rated, centres, cfg.kmeans_iters)
        state = best._replace(transforms=centres, group=labels)
        best, best_t, best_mse, history = phase(
            functools.partial(step, reassign=True), state, second
        )
    return FitOutput(best, best_t, best_mse, history, pre), carry


@functools.partial(jit, static_argnames=("cfg",))
def fit_grid(
    problem: Problem, keys, l2_user, l2_item, epsilon, patience, tol, restart=None, *, cfg: Config
):
    """:func:`fit_one` for every grid point (``keys`` ``[P, 2]`` raw key data, ``l2_user``,
    ``l2_item`` ``[P]``), ``vmap``-ped in chunks of ``cfg.batch_size`` points (``None``:
    one point after another). With ``cfg.warm_start``, one after another in the given
    order, each starting from the state :func:`fit_one` returns for the previous point, or,
    where ``restart`` (``[P]`` bool; the first point always) is set, from its own random
    start. Returns the fits and, with ``cfg.warm_start``, the state each point started
    from (``None`` otherwise: the random start of its key)."""
    if cfg.warm_start:

        def chain(prev, args):
            key, lu, li, fresh = args
            start = jax.tree.map(
                lambda a, b: jnp.where(fresh, a, b), initial_state(key, epsilon, cfg), prev
            )
            out, carry = fit_one(problem, key, lu, li, epsilon, patience, tol, cfg, start)
            return carry, (out, start)

        first = initial_state(keys[0], epsilon, cfg)
        fresh = jnp.zeros(keys.shape[0], bool) if restart is None else jnp.asarray(restart)
        _, (out, starts) = lax.scan(chain, first, (keys, l2_user, l2_item, fresh))
        return out, starts

    def one(args):
        key, lu, li = args
        return fit_one(problem, key, lu, li, epsilon, patience, tol, cfg)[0]

    return lax.map(one, (keys, l2_user, l2_item), batch_size=cfg.batch_size), None


def _replayed(problem: Problem, key, l2_user, l2_item, epsilon, start, sweeps, cfg: Config):
    """The state :func:`fit_one` ends in with the given ``sweeps`` per phase (no early
    stopping)."""
    zero = jnp.zeros((), jnp.result_type(float))
    out, _ = fit_one(problem, key, l2_user, l2_item, epsilon, 0, zero, cfg, start, sweeps)
    return out.state


@functools.partial(jit, static_argnames=("cfg",))
def replay(problem: Problem, key, l2_user, l2_item, epsilon, start, sweeps, *, cfg: Config):
    """A chosen grid point's fit run again on ``problem`` (typically its training and
    validation ratings together): the same random start (``key``) or warm ``start``, the
    same penalties and the given ``sweeps`` (:func:`fit_one`) per phase, no early
    stopping."""
    return _replayed(problem, key, l2_user, l2_item, epsilon, start, sweeps, cfg)


@functools.partial(jit, static_argnames=("cfg",))
def replay_starts(problem: Problem, keys, l2_user, l2_item, epsilon, sweeps, *, cfg: Config):
    """:func:`replay` from several random starts (``keys`` ``[S, 2]`` raw key data, ``sweeps``
    a pair of ``[S]`` sweep counts) at the same penalties, in chunks of ``cfg.batch_size``
    (as :func:`fit_grid`); returns the states stacked along a leading ``[S]`` axis."""

    def one(args):
        key, first, second = args
        return _replayed(problem, key, l2_user, l2_item, epsilon, None, (first, second), cfg)

    return lax.map(one, (keys, *sweeps), batch_size=cfg.batch_size)
