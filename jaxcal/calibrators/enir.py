r"""ENIR: ensemble of near-isotonic regressions (Naeini & Cooper, ICDM 2016).

Near-isotonic regression (Tibshirani, Hoefling & Tibshirani, Technometrics 2011) relaxes
monotonicity into a penalty. On the tie-pooled score runs :math:`1..R` (sorted by score,
run weights :math:`W_r`, mean targets :math:`\bar y_r`) it solves

.. math::  \hat\beta(\lambda) = \arg\min_\beta \tfrac12 \sum_r W_r (\bar y_r - \beta_r)^2
    + \lambda \sum_{r=1}^{R-1} (\beta_r - \beta_{r+1})_+ .

At :math:`\lambda = 0` the fit interpolates the data; as :math:`\lambda \to \infty` it becomes
the isotonic regression. The solution path is piecewise linear and is traced exactly by the
*modified PAV* algorithm: fused groups :math:`A` move with slope
:math:`d\beta_A / d\lambda = (\mathbb 1[\beta_{A^-} > \beta_A] - \mathbb 1[\beta_A >
\beta_{A^+}]) / W_A` (pushed up by a violating left neighbour, down by a violating right
one); adjacent groups fuse when they collide, and groups never split (Lemma 1 of Tibshirani
et al.), so there are at most :math:`R - 1` breakpoints.

ENIR scores the fit at every breakpoint :math:`\lambda_k` (excluding :math:`\lambda = 0`, the
interpolating fit, as the paper does) by BIC,
:math:`\mathrm{BIC}_k = -2 \log L_k + K_k \log N` (:math:`K_k` = number of fused groups,
:math:`L_k` the Bernoulli likelihood with the fit clipped to :math:`[\epsilon, 1-\epsilon]`),
and averages the models with weights :math:`\propto e^{-\mathrm{BIC}_k/2}` (normalised by a
running ``logaddexp``). Because every model is a function of the same run scores and the
average is linear, the ensemble is stored as one averaged value per run; prediction is the
linear interpolation between run scores (constant beyond the ends), clipped to [0, 1].

Implementation: one ``lax.while_loop`` over merge events, groups stored in place (as in
``jaxcal.calibrators._pav``): every event costs one vectorised ``O(R)`` pass (collision times,
``argmin``, the model's log-likelihood and the running average), so the path costs
``O(R)`` events of ``O(R)`` vector work after the ``O(n log n)`` sort. The path itself is
``O(R log R)`` with a heap, but scoring each of the ``O(R)`` models needs its likelihood over
all groups, so the total work is quadratic in the number of distinct scores (see
docs/nonparametric.md).

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=2000)
    >>> y = (rng.uniform(size=2000) < p).astype(int)
    >>> probs = jaxcal.ENIR().fit(p, y).predict(np.array([0.1, 0.5, 0.9]))
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

import jaxcal.debias.losses  # noqa: F401  (import order: debias before calibrators._base)
from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_sample_weight, check_scores
from jaxcal.calibrators._base import FittedCalibrator, maybe_check_scores, prepare_fit

__all__ = ["ENIR", "FittedENIR", "near_isotonic_regression"]


class _PathState(NamedTuple):
    lam: jax.Array  # current lambda
    alive: jax.Array  # [N] True at the first run of each fused group
    value: jax.Array  # [N] fitted value of every run (its group's value)
    lse: jax.Array  # running log-sum of the recorded models' weights
    acc: jax.Array  # [N] running weighted average of the recorded models' run values
    n_models: jax.Array
    done: jax.Array


def _groups(alive):
    """Group id (first run) of every run, and the previous / next group start of each run."""
    n = alive.shape[0]
    idx = jnp.arange(n)
    gid = lax.cummax(jnp.where(alive, idx, 0))
    starts_after = lax.cummin(jnp.where(alive, idx, n), reverse=True)
    nxt = jnp.concatenate([starts_after[1:], jnp.full(1, n)])
    starts_before = lax.cummax(jnp.where(alive, idx, -1))
    prv = jnp.concatenate([jnp.full(1, -1), starts_before[:-1]])
    return gid, nxt, prv


def _path(w, y, s1, s0, real, lam_stop, n_eff, eps):
    """Trace the near-isotonic path (modified PAV); see the module docstring.

    ``w, y, s1, s0`` are run weights, run mean targets and positive / negative weights
    (``[N]``, padding runs have ``real == False`` and weight 0). Stops at ``lam_stop``
    (returning the fit there) or when the isotonic fit is reached.
    """
    n = w.shape[0]
    idx = jnp.arange(n)
    tol = 64 * jnp.finfo(y.dtype).eps * (1.0 + jnp.max(jnp.abs(y)))
    log_n = jnp.log(n_eff)

    def seg(v, gid):
        return jax.ops.segment_sum(v, gid, num_segments=n)

    def body(st: _PathState) -> _PathState:
        gid, nxt, prv = _groups(st.alive)
        has_n = st.alive & (nxt < n) & real[jnp.clip(nxt, 0, n - 1)]
        has_p = st.alive & (prv >= 0)
        W = seg(w, gid)
        Wsafe = jnp.where(W > 0, W, 1.0)
        b = st.value
        bn = b[jnp.clip(nxt, 0, n - 1)]
        bp = b[jnp.clip(prv, 0, n - 1)]
        up = has_p & (bp > b + tol)
        down = has_n & (b > bn + tol)
        slope = jnp.where(st.alive, (up.astype(b.dtype) - down.astype(b.dtype)) / Wsafe, 0.0)
        sn = slope[jnp.clip(nxt, 0, n - 1)]
        num = b - bn
        den = sn - slope
        safe_den = jnp.where(den != 0, den, 1.0)
        t = jnp.where(
            jnp.abs(num) <= tol,
            0.0,
            jnp.where((den != 0) & (num / safe_den > 0), num / safe_den, jnp.inf),
        )
        t = jnp.where(has_n, t, jnp.inf)
        d = jnp.min(t)
        # score the current model (a breakpoint) before moving on
        pc = jnp.clip(b, eps, 1.0 - eps)
        S1, S0 = seg(s1, gid), seg(s0, gid)
        loglik = jnp.sum(jnp.where(st.alive, S1 * jnp.log(pc) + S0 * jnp.log1p(-pc), 0.0))
        df = jnp.sum(st.alive)
        final = jnp.isinf(d)
        record = (d > 0) & ((st.lam > 0) | final) & jnp.isinf(lam_stop)
        log_w = loglik - 0.5 * df * log_n
        lse = jnp.where(record, jnp.logaddexp(st.lse, log_w), st.lse)
        acc = jnp.where(record, st.acc * jnp.exp(st.lse - lse) + jnp.exp(log_w - lse) * b, st.acc)
        n_models = st.n_models + record
        # stop at lam_stop (the fit there) or at the end of the path
        stop_here = st.lam + d >= lam_stop
        step = jnp.where(final, 0.0, jnp.where(stop_here, lam_stop - st.lam, d))
        moved = b + slope[gid] * step
        join = has_n & (t <= d) & ~stop_here & ~final
        alive = st.alive & ~(join[jnp.clip(prv, 0, n - 1)] & (prv >= 0))
        gid2 = lax.cummax(jnp.where(alive, idx, 0))
        W2 = seg(w, gid2)
        merged = seg(w * moved, gid2) / jnp.where(W2 > 0, W2, 1.0)
        value = jnp.where(join.any(), merged[gid2], moved)
        return _PathState(
            lam=st.lam + step,
            alive=alive,
            value=value,
            lse=lse,
            acc=acc,
            n_models=n_models,
            done=final | stop_here,
        )

    init = _PathState(
        lam=jnp.zeros((), y.dtype),
        alive=real,
        value=y,
        lse=jnp.full((), -jnp.inf, y.dtype),
        acc=jnp.zeros_like(y),
        n_models=jnp.zeros((), jnp.int32),
        done=jnp.zeros((), bool),
    )
    return lax.while_loop(lambda st: ~st.done, body, init)


def _runs_host(scores, targets, weights):
    """Tie-pooled runs (sorted by score), dropping zero-weight points (they cannot move the
    fit); padded to a power of two so that few shapes are compiled."""
    keep = weights > 0
    s, t, w = scores[keep], targets[keep], weights[keep]
    xs, inv = np.unique(s, return_inverse=True)
    r = xs.size
    size = max(8, 1 << max(int(r - 1).bit_length(), 0))
    W = np.bincount(inv, w, r)
    tc = np.clip(t, 0.0, 1.0)
    pad = lambda a: np.concatenate([a, np.zeros(size - r)])  # noqa: E731
    return (
        xs,
        pad(W),
        pad(np.bincount(inv, w * t, r) / W),
        pad(np.bincount(inv, w * tc, r)),
        pad(np.bincount(inv, w * (1.0 - tc), r)),
        np.arange(size) < r,
    )


@jax.jit
def _enir_core(w, y, s1, s0, real, n_eff, eps):
    st = _path(w, y, s1, s0, real, jnp.asarray(jnp.inf, y.dtype), n_eff, eps)
    return st.acc, st.n_models, st.lam


@jax.jit
def _near_isotonic_core(w, y, real, lam):
    z = jnp.zeros_like(y)
    st = _path(w, y, z, z, real, lam, jnp.asarray(1.0, y.dtype), jnp.asarray(1e-12, y.dtype))
    return st.value


def near_isotonic_regression(
    y: ArrayLike, *, lam: float, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""Near-isotonic fit of a sequence at penalty ``lam`` (Tibshirani et al. 2011).

    .. math::  \arg\min_\beta \tfrac12 \sum_i w_i (y_i - \beta_i)^2
        + \lambda \sum_i (\beta_i - \beta_{i+1})_+

    traced exactly along the path (modified PAV) up to ``lam``; ``lam = inf`` gives the
    isotonic regression.

    Args:
        y: ``[n]`` finite values in sequence order.
        lam: penalty :math:`\lambda \ge 0`.
        sample_weight: ``[n]`` positive weights (default ones).

    Returns:
        ``[n]`` fitted values.

    Raises:
        ValueError: on non-finite / empty input, non-positive weights or ``lam < 0``.
    """
    yv = check_scores(y, name="y")
    w = check_sample_weight(sample_weight, yv.shape[0])
    if (w <= 0).any():
        raise ValueError("sample_weight must be positive for near_isotonic_regression.")
    if not (lam >= 0):
        raise ValueError(f"lam must be >= 0; got {lam!r}.")
    n = yv.shape[0]
    size = max(8, 1 << max(int(n - 1).bit_length(), 0))
    pad = lambda a: np.concatenate([a, np.zeros(size - n)])  # noqa: E731
    dtype = jnp.result_type(float)
    out = _near_isotonic_core(
        jnp.asarray(pad(w), dtype),
        jnp.asarray(pad(yv), dtype),
        jnp.asarray(np.arange(size) < n),
        jnp.asarray(lam, dtype),
    )
    return out[:n]


@pytree_dataclass
class FittedENIR(FittedCalibrator):
    """Fitted ENIR: BIC-averaged near-isotonic fits at the training score runs.

    Attributes:
        knots_x: ``[R]`` distinct training scores (sorted).
        knots_y: ``[R]`` ensemble probability at each (clipped to [0, 1]).
        n_models: number of near-isotonic models averaged.
    """

    knots_x: jax.Array
    knots_y: jax.Array
    n_models: jax.Array

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Linear interpolation between the runs; constant beyond the ends."""
        s = jnp.asarray(maybe_check_scores(scores)).astype(self.knots_x.dtype)
        return jnp.interp(s, self.knots_x, self.knots_y)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ENIR:
    """Ensemble of near-isotonic regressions (Naeini & Cooper 2016), BIC-weighted.

    Args:
        eps: clipping of the fitted values inside the Bernoulli log-likelihood.
    """

    eps: float = 1e-3

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> FittedENIR:
        """Trace the path, score every breakpoint by BIC and average (jitted core).

        Raises:
            ValueError: on bad inputs or ``eps`` outside (0, 0.5).
        """
        if not (0.0 < self.eps < 0.5):
            raise ValueError(f"eps must lie in (0, 0.5); got {self.eps!r}.")
        d = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        xs, W, y, s1, s0, real = _runs_host(d.scores, d.targets, d.weights)
        dtype = jnp.result_type(float)
        acc, n_models, _ = _enir_core(
            *(jnp.asarray(a, dtype) for a in (W, y, s1, s0)),
            jnp.asarray(real),
            jnp.asarray(float(np.sum(d.weights > 0)), dtype),
            jnp.asarray(self.eps, dtype),
        )
        r = xs.size
        return FittedENIR(
            knots_x=jnp.asarray(xs, dtype),
            knots_y=jnp.clip(acc[:r], 0.0, 1.0),
            n_models=n_models,
        )
