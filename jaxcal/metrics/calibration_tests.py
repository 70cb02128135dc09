r"""Calibration tests for binary probabilities: the squared kernel calibration error (SKCE;
Widmann, Lindsten & Zachariah, NeurIPS 2019) and Spiegelhalter's z-test (Spiegelhalter,
Statistics in Medicine 1986).

**SKCE.** With the kernel :math:`k((p, y), (p', y')) = k_P(p, p')\,\delta_{y y'}` on
(probability, label) pairs (a Laplace :math:`e^{-|p - p'|/\ell}` or Gaussian
:math:`e^{-(p - p')^2 / 2\ell^2}` kernel on the probabilities times the label kernel), the
SKCE is the expectation of

.. math::  h_{ij} = 2\, k_P(p_i, p_j)\,(y_i - p_i)(y_j - p_j)

over independent pairs (for binary labels the four terms of the paper's
:math:`(e_{y_i} - p_i)^\top \Gamma (e_{y_j} - p_j)` with :math:`\Gamma = k_P I_2` sum to
this), zero if and only if the probabilities are calibrated (for a characteristic kernel).
Two estimators (the paper's Section 4):

* ``"unbiased"``: the U-statistic :math:`\frac{1}{n(n-1)}\sum_{i \ne j} h_{ij}`, in
  :math:`O(n^2)` time (row blocks, :math:`O(n)` memory). Its p-value is by *consistency
  resampling*: conditional on the probabilities, calibration means
  :math:`y^*_i \sim \mathrm{Bernoulli}(p_i)`, so the statistic of ``n_resamples`` such label
  vectors is an exact Monte Carlo null distribution;
  :math:`p = (1 + \#\{b: T^*_b \ge T\}) / (1 + B)` (a valid test at every ``n``).
* ``"linear"``: the mean of :math:`h_{2i-1, 2i}` over the :math:`\lfloor n/2 \rfloor`
  disjoint pairs, in :math:`O(n)`. It is asymptotically normal with mean 0 under
  calibration; the one-sided p-value is :math:`1 - \Phi(\sqrt{m}\,\bar h / s_h)` with
  :math:`s_h` the sample standard deviation of the :math:`h` terms.

The bandwidth :math:`\ell` defaults to the median heuristic on the probabilities alone (the
median of :math:`|p_{2i-1} - p_{2i}|`, a label-free choice, so the resampling test stays
exact).

**Spiegelhalter's z** tests :math:`E[\sum_i (y_i - p_i)(1 - 2p_i)] = 0`:

.. math::  z = \frac{\sum_i (y_i - p_i)(1 - 2 p_i)}{\sqrt{\sum_i (1 - 2p_i)^2 p_i(1 - p_i)}},

standard normal under calibration; two-sided p-value :math:`2(1 - \Phi(|z|))`.

**Weights** (``sample_weight``). As elsewhere in jaxcal, a weight :math:`w_i \ge 0` is an
inverse-propensity (IPS) multiplier of an independent observation, not a count of repeated
observations: the weighted statistics estimate the quantities of the population the
weights reweight to, and their null distributions hold *conditional on the weights*
(fixed, with the probabilities; under calibration :math:`y_i \sim
\mathrm{Bernoulli}(p_i)` independently whatever the weights). Only the ratios of the
weights matter (they are rescaled by a power of two first, exactly); a point of weight 0
counts as absent; all-equal weights give the unweighted results.

* Spiegelhalter: the numerator :math:`T = \sum_i w_i (y_i - p_i)(1 - 2p_i)` has mean 0
  and variance :math:`V = \sum_i w_i^2 (1 - 2p_i)^2 p_i (1 - p_i)` under calibration (the
  terms are independent; :math:`\operatorname{Var} y_i = p_i(1 - p_i)`), so
  :math:`z = T / \sqrt V` is standard normal in the limit (Lyapunov: no single weight
  dominates :math:`V`). With counts as weights one would use :math:`w_i` rather than
  :math:`w_i^2` in :math:`V`; IPS weights multiply independent outcomes, so they enter
  squared.
* Unbiased SKCE: the weighted U-statistic (self-normalised, a ratio of two U-statistics)

  .. math::  \widehat{\mathrm{SKCE}}_w = \frac{\sum_{i \ne j} w_i w_j h_{ij}}
      {\sum_{i \ne j} w_i w_j},

  consistent for the SKCE under the reweighted distribution. The consistency-resampling
  p-value stays exact: the labels are redrawn as :math:`y^*_i \sim
  \mathrm{Bernoulli}(p_i)` with the weights held fixed, and the same statistic is computed
  for each draw.
* Linear SKCE: the disjoint pairs of the points of positive weight (zero-weight points are
  left out before pairing, so that they do not take a partner), each pair weighted by
  :math:`\omega_k = w_{2k-1} w_{2k}`: :math:`\bar h_\omega = \sum_k \omega_k h_k /
  \sum_k \omega_k`. Given the weights, the :math:`h_k` are independent with mean 0 under
  calibration; the p-value is the normal one of this ratio estimator with the sandwich
  (delta-method) variance :math:`\hat V = \frac{m}{m - 1} \sum_k \omega_k^2 (h_k -
  \bar h_\omega)^2 / (\sum_k \omega_k)^2`, :math:`1 - \Phi(\bar h_\omega / \sqrt{\hat
  V})`, which for equal weights is the unweighted :math:`1 - \Phi(\sqrt m\,\bar h / s_h)`.
* The default bandwidth (median heuristic) uses the points of positive weight.

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) both tests run their
pure cores (the points of positive weight are moved to the front in the program, stably,
instead of selected on the host) and invalid data gives NaN (docs/metrics.md). Both
statistics are differentiable in ``probs`` (the SKCE also through the median-heuristic
bandwidth, almost everywhere); the p-values of the resampling test are piecewise constant.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erfc
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import check_pure, nan_where
from jaxcal._weights import normalize_weights, normalize_weights_host
from jaxcal.metrics._inputs import metric_inputs
from jaxcal.metrics._keys import key_from_parts, key_parts, optional_key

__all__ = ["CalibrationTest", "skce", "spiegelhalter_z"]

ESTIMATORS = ("unbiased", "linear")
KERNELS = ("laplace", "gaussian")
_BLOCK = 256  # rows of the kernel matrix held at once by the unbiased estimator


class CalibrationTest(NamedTuple):
    """A test statistic and its p-value (small: evidence of miscalibration)."""

    statistic: jax.Array
    p_value: jax.Array


def _kernel(a, b, bandwidth, kernel: str):
    d = a - b
    if kernel == "laplace":
        return jnp.exp(-jnp.abs(d) / bandwidth)
    return jnp.exp(-0.5 * (d / bandwidth) ** 2)


@functools.partial(jit, static_argnames=("kernel", "n_resamples", "impl"))
def _unbiased_core(p, y, w, pair_weight, bandwidth, key_data, *, kernel, n_resamples, impl):
    r"""The weighted U-statistic of the observed labels and of ``n_resamples`` label vectors
    drawn under calibration, weights fixed (padding entries have weight 0, so a zero
    weighted residual). ``pair_weight``: :math:`\sum_{i \ne j} w_i w_j`."""
    r = (w * (y - p))[:, None]
    if n_resamples:
        key = key_from_parts(key_data, impl)
        y_star = jax.random.bernoulli(key, p, (n_resamples, p.shape[0])).astype(p.dtype)
        r = jnp.concatenate([r, (w * (y_star - p)).T], axis=1)  # [n, 1 + B]
    rows_p = p.reshape(-1, _BLOCK)
    rows_r = r.reshape(-1, _BLOCK, r.shape[1])

    def block(args):
        pb, rb = args
        return jnp.sum(rb * (_kernel(pb[:, None], p[None, :], bandwidth, kernel) @ r), axis=0)

    # r' K r per column, one block of kernel rows at a time (bounded memory)
    quad = jnp.sum(jax.lax.map(block, (rows_p, rows_r)), axis=0)
    stats = 2 * (quad - jnp.sum(r * r, axis=0)) / pair_weight  # k(p, p) = 1: i = j out
    if not n_resamples:
        return stats[0], jnp.full((), jnp.nan, p.dtype)
    exceed = jnp.sum(stats[1:] >= stats[0])
    return stats[0], (1 + exceed) / (1 + n_resamples)


@functools.partial(jit, static_argnames=("kernel",))
def _linear_core(p, y, w, m, bandwidth, *, kernel: str):
    """The pair-weighted mean of the ``m`` disjoint pairs' terms and its one-sided normal
    p-value (module docstring); padding pairs have weight 0."""
    r = y - p
    pairs_p, pairs_r, pairs_w = p.reshape(-1, 2), r.reshape(-1, 2), w.reshape(-1, 2)
    h = 2 * _kernel(pairs_p[:, 0], pairs_p[:, 1], bandwidth, kernel) * pairs_r[:, 0] * pairs_r[:, 1]
    omega = pairs_w[:, 0] * pairs_w[:, 1]
    total = jnp.sum(omega)
    mean = jnp.sum(omega * h) / total
    var = m / (m - 1) * jnp.sum((omega * (h - mean)) ** 2) / total**2
    sd = jnp.sqrt(var)
    z = jnp.where(sd > 0, mean / jnp.where(sd > 0, sd, 1), 0.0)
    p_value = jnp.where(sd > 0, 0.5 * erfc(z / jnp.sqrt(2.0)), 1.0)
    return mean, p_value


def _median_bandwidth(p: np.ndarray) -> float:
    """The median of ``|p[2i] - p[2i + 1]|`` over the disjoint pairs that differ (1 if
    none do)."""
    m = p.shape[0] // 2
    d = np.abs(p[: 2 * m : 2] - p[1 : 2 * m : 2])
    d = d[d > 0]
    return float(np.median(d)) if d.size else 1.0


def _median_bandwidth_pure(p, n_positive):
    """:func:`_median_bandwidth` of the first ``n_positive`` entries of ``p`` (traced)."""
    half = p.shape[0] // 2
    d = jnp.abs(p[: 2 * half : 2] - p[1 : 2 * half : 2])
    valid = (jnp.arange(half) < n_positive // 2) & (d > 0)
    ordered = jnp.sort(jnp.where(valid, d, jnp.inf))
    c = jnp.sum(valid)
    lo = ordered[jnp.clip((c - 1) // 2, 0, half - 1)]
    hi = ordered[jnp.clip(c // 2, 0, half - 1)]
    return jnp.where(c > 0, 0.5 * (lo + hi), 1.0)


def _skce_pure(probs, labels, sample_weight, estimator, kernel, bandwidth, key, n_resamples):
    """:func:`skce` on traced inputs: no host work, invalid data gives NaN."""
    p, y, w, invalid = check_pure(probs, labels, sample_weight)
    n = p.shape[0]
    need = 4 if estimator == "linear" else 2
    if n < need:
        raise ValueError(f"the {estimator} SKCE needs more probabilities; got n = {n}.")
    w = normalize_weights(w)
    order = jnp.argsort(~(w > 0), stable=True)  # points of positive weight first
    n_pos = jnp.sum(w > 0)
    invalid = invalid | (n_pos < need)
    if bandwidth is None:
        bandwidth = _median_bandwidth_pure(p[order], n_pos)
    bw = jnp.asarray(bandwidth, p.dtype)
    if estimator == "linear":
        size = n + n % 2
        keep = jnp.arange(size) < 2 * (n_pos // 2)
        pp, yy, ww = (jnp.pad(a[order], (0, size - n)) for a in (p, y, w))
        pp, yy = jnp.where(keep, pp, 0.5), jnp.where(keep, yy, 0.5)
        ww = jnp.where(keep, ww, 0.0)
        m = (n_pos // 2).astype(p.dtype)
        return nan_where(invalid, _linear_core(pp, yy, ww, m, bw, kernel=kernel))
    size = -(-n // _BLOCK) * _BLOCK
    pp, yy = (jnp.pad(a, (0, size - n), constant_values=0.5) for a in (p, y))
    ww = jnp.pad(w, (0, size - n))
    key_data, impl = key_parts(jax.random.key(0) if key is None else key)
    total = jnp.sum(w)
    out = _unbiased_core(
        pp,
        yy,
        ww,
        total * total - jnp.dot(w, w),
        bw,
        key_data,
        kernel=kernel,
        n_resamples=int(n_resamples),
        impl=impl,
    )
    return nan_where(invalid, out)


def skce(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    estimator: str = "unbiased",
    kernel: str = "laplace",
    bandwidth: float | None = None,
    key: jax.Array | None = None,
    n_resamples: int = 1000,
    sample_weight: ArrayLike | None = None,
) -> CalibrationTest:
    r"""The squared kernel calibration error and its calibration test (Widmann, Lindsten &
    Zachariah 2019); see the module docstring for the kernel, estimators and p-values.

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1] (``n >= 2``; ``n >= 4`` for
            ``"linear"``).
        labels: ``[n]`` 0/1 labels.
        estimator: ``"unbiased"`` (U-statistic, :math:`O(n^2)`, consistency-resampling
            p-value) or ``"linear"`` (:math:`O(n)`, asymptotic normal p-value).
        kernel: ``"laplace"`` or ``"gaussian"``, on the probabilities.
        bandwidth: the kernel's length scale :math:`\ell > 0` (default: the median
            heuristic).
        key: ``jax.random`` key of the resamples (a JAX PRNG key; needed by
            ``"unbiased"`` with ``n_resamples > 0``).
        n_resamples: label vectors drawn under calibration for the unbiased estimator's
            p-value (0: statistic only, p-value NaN).
        sample_weight: optional ``[n]`` non-negative (inverse-propensity) weights: the
            weighted U-statistic / weighted pairs of the module docstring (default: equal
            weights). Zero-weight points count as absent.

    Returns:
        :class:`CalibrationTest` ``(statistic, p_value)``: the SKCE estimate (the linear
        and unbiased estimates can be negative) and the p-value of calibration.

    Raises:
        ValueError: invalid data, weights, estimator, kernel, bandwidth or
            ``n_resamples``; too few points of positive weight; no ``key`` where
            resampling needs one, or a ``key`` that is not a JAX PRNG key.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(size=400); y = rng.uniform(size=400) < p ** 2  # overconfident
        >>> stat, p_value = jaxcal.metrics.skce(p, y, key=jax.random.key(0), n_resamples=200)
        >>> bool(p_value < 0.01)
        True
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}; got {estimator!r}.")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got {kernel!r}.")
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 0:
        raise ValueError(f"n_resamples must be a non-negative integer; got {n_resamples!r}.")
    traced = _shapes.is_traced(probs, labels, sample_weight, bandwidth, key)
    if bandwidth is not None and not _shapes.is_traced(bandwidth):
        if not (np.isfinite(bandwidth) and bandwidth > 0):
            raise ValueError(f"bandwidth must be a positive number; got {bandwidth!r}.")
    key = optional_key(
        key,
        needed=estimator == "unbiased" and bool(n_resamples),
        what="the unbiased SKCE's p-value resamples labels",
        otherwise="n_resamples=0 for the statistic alone",
    )
    if traced:
        args = (probs, labels, sample_weight, estimator, kernel, bandwidth, key, n_resamples)
        return CalibrationTest(*_skce_pure(*args))
    p, y, w = _check_weighted(probs, labels, sample_weight)
    positive = w > 0
    n = int(positive.sum())
    if n < (4 if estimator == "linear" else 2):
        what = "probabilities" if sample_weight is None else "points of positive weight"
        raise ValueError(f"the {estimator} SKCE needs more {what}; got n = {n}.")
    if bandwidth is None:
        bandwidth = _median_bandwidth(p[positive])
    elif not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a positive number; got {bandwidth!r}.")
    dtype = jnp.result_type(float)
    bw = np.asarray(bandwidth, dtype)
    if estimator == "linear":
        m = n // 2
        size = 2 * _shapes.padded_size(m)
        # zero-weight points are dropped before pairing (they would waste a partner)
        kept = (a[positive][: 2 * m] for a in (p, y, w))
        pp, yy, ww = _shapes.pad_rows(size, *kept, fills=(0.5, 0.5, 0.0))
        args = (*(np.asarray(a, dtype) for a in (pp, yy, ww)), np.asarray(m, dtype), bw)
        return CalibrationTest(*_linear_core(*args, kernel=kernel))
    size = -(-_shapes.padded_size(p.shape[0]) // _BLOCK) * _BLOCK
    pp, yy, ww = _shapes.pad_rows(size, p, y, w, fills=(0.5, 0.5, 0.0))
    key_data, impl = key_parts(jax.random.key(0) if key is None else key)
    total = math.fsum(w)
    out = _unbiased_core(
        np.asarray(pp, dtype),
        np.asarray(yy, dtype),
        np.asarray(ww, dtype),
        np.asarray(total * total - np.dot(w, w), dtype),  # sum over i != j of w_i w_j
        bw,
        key_data,
        kernel=kernel,
        n_resamples=int(n_resamples),
        impl=impl,
    )
    return CalibrationTest(*out)


@jit
def _spiegelhalter_core(p, y, w):
    num = jnp.sum(w * (y - p) * (1 - 2 * p))
    z = num / jnp.sqrt(jnp.sum((w * (1 - 2 * p)) ** 2 * p * (1 - p)))
    return z, erfc(jnp.abs(z) / jnp.sqrt(2.0))


def _check_weighted(probs, labels, sample_weight):
    """Validated float64 probabilities, labels and weights (rescaled by a power of two so
    that the largest lies in [1, 2): products of weights neither underflow nor overflow)."""
    p, y, w, _ = metric_inputs(probs, labels, sample_weight)
    return p, y, normalize_weights_host(w)


def spiegelhalter_z(
    probs: ArrayLike, labels: ArrayLike, *, sample_weight: ArrayLike | None = None
) -> CalibrationTest:
    r"""Spiegelhalter's (1986) z-test of calibration (module docstring).

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        sample_weight: optional ``[n]`` non-negative (inverse-propensity) weights:
            :math:`z = \sum_i w_i (y_i - p_i)(1 - 2p_i) / \sqrt{\sum_i w_i^2 (1 - 2p_i)^2
            p_i (1 - p_i)}` (module docstring). Default: equal weights.

    Returns:
        :class:`CalibrationTest` ``(z, p_value)``, the p-value two-sided.

    Raises:
        ValueError: invalid data or weights, or every probability (of positive weight)
            in {0, 0.5, 1} (then the variance of the statistic is 0 and z is undefined).

    Example:
        >>> import jaxcal, numpy as np
        >>> p = np.array([0.1, 0.2, 0.7, 0.9]); y = np.array([0, 0, 1, 1])
        >>> z, p_value = jaxcal.metrics.spiegelhalter_z(p, y)
        >>> round(float(z), 4)
        -0.8805
    """
    p, y, w, invalid = metric_inputs(probs, labels, sample_weight)
    if invalid is not None:  # traced inputs
        w = normalize_weights(w)
        invalid = invalid | ~jnp.any((p > 0) & (p < 1) & (p != 0.5) & (w > 0))
        return CalibrationTest(*nan_where(invalid, _spiegelhalter_core(p, y, w)))
    w = normalize_weights_host(w)
    if not np.any((p > 0) & (p < 1) & (p != 0.5) & (w > 0)):
        raise ValueError(
            "spiegelhalter_z is undefined when every probability (of positive weight) is 0, "
            "0.5 or 1 (the statistic has variance 0)."
        )
    size = _shapes.padded_size(p.shape[0])
    # padding (p = 0, weight 0) adds nothing to either sum
    pp, yy, ww = _shapes.pad_rows(size, p, y, w, fills=(0.0, 0.0, 0.0))
    dtype = jnp.result_type(float)
    return CalibrationTest(*_spiegelhalter_core(*(np.asarray(a, dtype) for a in (pp, yy, ww))))
