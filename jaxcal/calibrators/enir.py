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

Implementation. Where the default backend is a CPU and the compiled kernel of
``jaxcal._native`` is available (``JAXCAL_NATIVE=0`` turns it off), both passes below run in
one XLA FFI custom call (``jaxcal/_native/enir_cpu.cc``): the same algorithm, sequential and in
double precision whatever the input dtype, with an indexed 4-ary heap in place of the
tournament tree (the same merges in the same order), the pairs that are equal already
merged at ``lambda = 0`` in one sweep, and each segment's least log-loss recorded when the
segment ends. It gives the same models, the same scored models and the same averaged
values to rounding (1e-12 in the float64 tests), in about 2 ms at ``n = 1e4`` where the JAX
loops below take ~75 ms (each ``while_loop`` iteration costs a few microseconds on a CPU).
``near_isotonic_regression`` uses the kernel's path in the same way (on tracers it is the
pure path, ``_enir_path.near_isotonic_values``). GPU and TPU programs
run the pure-JAX passes (jitted, ``O(n log n)``): after the sort, two ``lax.while_loop``
passes.

1. *The path*, one merge per iteration in ``O(log R)``: the next merge is the root of a
   tournament tree over the adjacent pairs' collision lambdas; a merge changes only the
   merged group's slope (a neighbour's slope depends on which side of the merged group it
   lies, and the two merging groups are equal when they merge), so three leaves change.
   Each breakpoint is logged with a lower bound on its BIC,
   :math:`2 \sum_g h_g + K_k \log N`, where :math:`h_g` is the smallest log-loss any fitted
   value in :math:`[\epsilon, 1-\epsilon]` can give group :math:`g`; the sum changes by three
   terms per merge.
2. *The average*: the final (isotonic) model's BIC :math:`U` is computed exactly. A
   breakpoint whose bound exceeds :math:`U + 2(40 + \log M)` (:math:`M` models) has weight
   below :math:`e^{-40}/M` of the best model's, so all of them together move the average by
   less than :math:`e^{-40} \approx 4 \cdot 10^{-18}` relative: below float64 resolution, so
   the result is the full average to rounding. The remaining ``S`` breakpoints are scored
   exactly from the path's *segments* (a group between the merge that makes it and the
   merge that ends it, moving linearly in :math:`\lambda`): segments that do not move add
   a constant over their span of models, moving ones are evaluated at each scored model in
   their span (``T`` pairs), and the averaged run values come from per-segment prefix sums
   of the model weights, pushed to the runs through a difference array.

The cost is ``O(n log n + R log R + T)``, where ``T`` counts the (moving group, scored
model) pairs: about 1.5 per run with IPS targets at ``n = 1e5``, far below the ``S R`` of
scoring every run at every surviving breakpoint. With 0/1 labels ``S`` stays in the tens up
to ``n = 1e6``, because the ``K log N`` term grows with ``N``; with IPS targets the bound is
looser (thousands of breakpoints at ``1e6``), which ``T`` absorbs. See
docs/nonparametric.md.

On tracers (inside a caller's ``jit``, ``vmap``, ``grad``, ``jax.export``) ``ENIR.fit`` is
the pure fit: the runs found in JAX and the JAX passes (never the kernel), knots ``[n]``
padded by repeating the last run. Its derivative in the scores is exact (the values depend
on the order of the scores only; the knots move with them); in the targets and weights the
model selection is not differentiable, and the derivative is that of the selected models:
breakpoint lambdas, BIC weights and fused groups held fixed
(``_enir_path.enir_average_differentiable``).

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=2000)
    >>> y = (rng.uniform(size=2000) < p).astype(int)
    >>> probs = jaxcal.ENIR().fit(p, y).predict(np.array([0.1, 0.5, 0.9]))
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import FitData, PureFitData
from jaxcal._jit import jit
from jaxcal._native import enir_cpu_available, enir_fit_cpu, near_isotonic_cpu
from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_real, check_sample_weight, check_scores, nan_where, pure_1d
from jaxcal.calibrators._base import Calibrator, FittedCalibrator
from jaxcal.calibrators._enir_path import (
    average_path,
    enir_average_differentiable,
    near_isotonic_values,
    trace_path,
)
from jaxcal.calibrators._knots import knot_map, traced_identity_scaling
from jaxcal.calibrators._scaling import ORDER, ScoreScaling, fit_scaling, identity_scaling
from jaxcal.fitting.pav import clip_to_bounds

__all__ = ["ENIR", "FittedENIR", "near_isotonic_regression"]


def _runs_host(scores, targets, weights):
    """Tie-pooled runs (sorted by score), dropping zero-weight points (they cannot move the
    fit); padded to their bucket size (``jaxcal._shapes``) with runs flagged not ``real``."""
    keep = weights > 0
    s, t, w = scores[keep], targets[keep], weights[keep]
    xs, inv = np.unique(s, return_inverse=True)
    r = xs.size
    size = _shapes.padded_size(r)
    W = np.bincount(inv, w, r)
    tc = np.clip(t, 0.0, 1.0)
    pad = lambda a: _shapes.pad_axis(a, size)  # noqa: E731
    return (
        xs,
        pad(W),
        pad(np.bincount(inv, w * t, r) / W),
        pad(np.bincount(inv, w * tc, r)),
        pad(np.bincount(inv, w * (1.0 - tc), r)),
        np.arange(size) < r,
    )


# Two programs. The path loop (one merge per iteration, many small operations) keeps XLA's
# default CPU emitters (``xla_defaults``): with the classic ones it runs 1.5x slower
# (n = 1e4 and 1e5). Pass 2 compiles twice as fast with them, at the same run time at
# n = 1e4 (1.5x slower at 1e5, where the path dominates the fit).
@partial(jit, xla_defaults=True)
def _path_core(w, y, s1, s0, real):
    return trace_path(w, y, s1, s0, real, jnp.asarray(jnp.inf, y.dtype))


_average_core = jit(average_path)


@jit
def _native_core(w, y, s1, s0, real, n_eff, eps):
    """Both passes in the compiled CPU kernel (``jaxcal._native``): one custom call."""
    return enir_fit_cpu(w, y, s1, s0, real, n_eff, eps)


@jit
def _near_isotonic_native(w, y, real, lam):
    """``_near_isotonic_core`` in the compiled CPU kernel: one custom call."""
    return near_isotonic_cpu(w, y, real, lam)


def _use_kernel() -> bool:
    """The compiled CPU kernel for a program compiled by an eager call (arrays on the
    default device): where it is available and the default backend is a CPU."""
    return jax.default_backend() == "cpu" and enir_cpu_available()


_near_isotonic_core = jit(near_isotonic_values, xla_defaults=True)  # emitters as _path_core


def _near_isotonic_pure(y, lam, sample_weight):
    """``near_isotonic_regression`` on tracers: no padding, no kernel, the NaN policy."""
    yv = pure_1d(y, "y")
    w = jnp.ones_like(yv) if sample_weight is None else pure_1d(sample_weight, "sample_weight")
    if w.shape != yv.shape:
        raise ValueError(f"length mismatch: {yv.shape[0]} values but {w.shape[0]} weights.")
    lam = jnp.asarray(lam, yv.dtype)
    if lam.ndim != 0:
        raise ValueError(f"lam must be a scalar; got shape {lam.shape}.")
    invalid = ~jnp.all(jnp.isfinite(yv)) | jnp.any(~jnp.isfinite(w) | (w <= 0)) | ~(lam >= 0)
    out = near_isotonic_values(
        jnp.where(invalid, 1.0, w),  # inputs the path runs through, whatever the data
        jnp.where(invalid, 0.0, yv),
        jnp.ones(yv.shape, bool),
        jnp.where(invalid, 0.0, lam),
    )
    return nan_where(invalid, out)


def near_isotonic_regression(
    y: ArrayLike, *, lam: float, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""Near-isotonic fit of a sequence at penalty ``lam`` (Tibshirani et al. 2011).

    .. math::  \arg\min_\beta \tfrac12 \sum_i w_i (y_i - \beta_i)^2
        + \lambda \sum_i (\beta_i - \beta_{i+1})_+

    traced exactly along the path (modified PAV) up to ``lam``; ``lam = inf`` gives the
    isotonic regression.

    On tracers (inside ``jit``, ``vmap``, ``grad``, ``jax.export``; any of ``y``,
    ``sample_weight``, ``lam`` traced) it runs the pure-JAX path, never the compiled
    kernel, with no padding, and differentiates in ``y``, the weights and ``lam``: the
    derivative of the fit with its fused groups held fixed, exact wherever they do not
    change (``_enir_path.near_isotonic_values``). Data that would raise gives NaN there
    (a non-finite value or weight, a weight ``<= 0``, ``lam`` negative or NaN); shapes
    still raise ``ValueError``.

    Args:
        y: ``[n]`` finite values in sequence order.
        lam: penalty :math:`\lambda \ge 0`.
        sample_weight: ``[n]`` positive weights (default ones).

    Returns:
        ``[n]`` fitted values.

    Raises:
        ValueError: on non-finite / empty input, non-positive weights or ``lam < 0``
            (concrete inputs; traced ones give NaN).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxcal.calibrators import near_isotonic_regression
        >>> y = jnp.array([1.0, 3.0, 2.0, 4.0])
        >>> jax.jit(lambda y: near_isotonic_regression(y, lam=0.2))(y)
        Array([1. , 2.8, 2.2, 4. ], dtype=float32)
    """
    if _shapes.is_traced(y, sample_weight, lam):
        return _near_isotonic_pure(y, lam, sample_weight)
    yv = check_scores(y, name="y")
    w = check_sample_weight(sample_weight, yv.shape[0])
    if (w <= 0).any():
        raise ValueError("sample_weight must be positive for near_isotonic_regression.")
    if not (lam >= 0):
        raise ValueError(f"lam must be >= 0; got {lam!r}.")
    n = yv.shape[0]
    size = _shapes.padded_size(n)
    dtype = jnp.result_type(float)
    core = _near_isotonic_native if _use_kernel() else _near_isotonic_core
    out = core(
        *(jax.device_put(np.asarray(_shapes.pad_axis(a, size), dtype)) for a in (w, yv)),
        np.arange(size) < n,
        np.asarray(lam, dtype),
    )
    return _shapes.unpad(out, n)


@pytree_dataclass
class FittedENIR(FittedCalibrator):
    """Fitted ENIR: BIC-averaged near-isotonic fits at the training score runs.

    Attributes:
        knots_x: ``[R]`` distinct training scores (sorted), transformed:
            :math:`s' = s\\,2^{-k} - c` (``scaling``; the identity unless the working
            precision could not hold the training scores, ``jaxcal.calibrators._scaling``).
        knots_y: ``[R]`` ensemble probability at each (clipped to [0, 1]).
        n_models: number of near-isotonic models on the path (breakpoints, lambda = 0 excluded).
        n_scored: how many of them were scored exactly; the others' BIC lower bound put
            their total weight below e^-40 of the best model's (see ``_enir_average``).
        scaling: the :class:`~jaxcal.calibrators._scaling.ScoreScaling` of the scores.

    Every float leaf has the dtype of the training scores.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([0.1, 0.2, 0.3, 0.6, 0.8, 0.9]), np.array([0, 1, 0, 1, 0, 1])
        >>> fitted = jaxcal.ENIR().fit(s, y)
        >>> fitted.knots_x.shape[0] >= 6  # the runs (padded to a bucket size)
        True
        >>> bool(np.all((fitted.predict(s) >= 0) & (fitted.predict(s) <= 1)))
        True
    """

    knots_x: jax.Array
    knots_y: jax.Array
    n_models: jax.Array
    n_scored: jax.Array
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Linear interpolation between the runs; constant beyond the ends."""
        return knot_map(self.scaling.apply(scores), self.knots_x, self.knots_y)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ENIR(Calibrator[FittedENIR]):
    """Ensemble of near-isotonic regressions (Naeini & Cooper 2016), BIC-weighted; ``fit``
    returns a :class:`FittedENIR`.

    Args:
        eps: clipping of the fitted values inside the Bernoulli log-likelihood.

    Raises:
        ValueError: ``eps`` outside (0, 0.5), when it is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(size=1000)
        >>> y = (rng.uniform(size=1000) < p).astype(int)
        >>> fitted = jaxcal.ENIR(eps=1e-4).fit(p, y)
        >>> int(fitted.n_models) >= int(fitted.n_scored) >= 1
        True
        >>> jaxcal.ENIR(eps=0.5)
        Traceback (most recent call last):
        ...
        ValueError: eps must lie in (0, 0.5); got 0.5.
    """

    eps: float = 1e-3

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _check_hyperparameters(self) -> None:
        if not 0.0 < check_real(self.eps, "eps") < 0.5:
            raise ValueError(f"eps must lie in (0, 0.5); got {self.eps!r}.")

    def _fit_pure(self, d: PureFitData) -> FittedENIR:
        """The pure fit (``jaxcal.calibrators._base``): the runs of the points with positive
        weight found in JAX (one sort), then the JAX passes of ``_enir_path`` (never the
        compiled kernel); knots ``[n]``, padded by repeating the last run. Differentiable
        in the scores (the knots' positions), and in the targets and weights with the
        model selection held fixed (``_enir_path.enir_average_differentiable``)."""
        s, t, w = d.scores, d.targets, d.weights
        n = s.shape[0]
        positive = w > 0
        order = jnp.lexsort((lax.stop_gradient(s), ~positive))  # positive weight first
        ss, ts, ws, ps = s[order], t[order], w[order], positive[order]
        new = ps & jnp.concatenate([jnp.ones(1, bool), ss[1:] != ss[:-1]])
        run = jnp.where(ps, jnp.cumsum(new) - 1, n)  # zero-weight points: no run
        n_runs = jnp.sum(new)
        seg = lambda v: jax.ops.segment_sum(v, run, num_segments=n)  # noqa: E731
        W = seg(ws)
        y = jnp.where(W > 0, seg(ws * ts) / jnp.where(W > 0, W, 1), 0.0)
        tc = jnp.clip(ts, 0.0, 1.0)
        real = jnp.arange(n) < n_runs
        acc, n_models, n_scored = enir_average_differentiable(
            W,
            y,
            seg(ws * tc),
            seg(ws * (1.0 - tc)),
            real,
            jnp.sum(positive).astype(s.dtype),
            jnp.asarray(self.eps, s.dtype),
        )
        xs = jnp.zeros(n, s.dtype).at[jnp.where(new, run, n)].set(ss, mode="drop")
        last = jnp.minimum(jnp.arange(n), jnp.maximum(n_runs - 1, 0))
        return FittedENIR(
            knots_x=xs[last],
            knots_y=clip_to_bounds(acc, 0.0, 1.0)[last],
            n_models=n_models,
            n_scored=n_scored,
            scaling=traced_identity_scaling(s.dtype),
        )

    def _fit_in(self, d: FitData, dtype: np.dtype) -> FittedENIR:
        """Trace the path and BIC-average its breakpoint models (the CPU kernel, or the
        jitted JAX passes), in ``dtype``; models whose BIC bound puts their total weight
        below e^-40 of the best are skipped."""
        scaling, s = fit_scaling(
            d.scores, d.weights, shift=True, kind=ORDER, what="ENIR", dtype=dtype
        )
        xs, W, y, s1, s0, real = _runs_host(s, d.targets, d.weights)
        runs = (*(jax.device_put(np.asarray(a, dtype)) for a in (W, y, s1, s0)), real)
        n_eff = np.asarray(np.sum(d.weights > 0), dtype)
        eps = np.asarray(self.eps, dtype)
        if _use_kernel():
            acc, n_models, n_scored, _ = _native_core(*runs, n_eff, eps)
        else:
            acc, n_models, n_scored, _ = _average_core(_path_core(*runs), *runs, n_eff, eps)
        return FittedENIR(
            knots_x=jax.device_put(np.asarray(xs, dtype)),
            knots_y=jax.device_put(np.clip(np.asarray(acc)[: xs.size], 0.0, 1.0)),
            n_models=n_models,
            n_scored=n_scored,
            scaling=scaling,
        )
