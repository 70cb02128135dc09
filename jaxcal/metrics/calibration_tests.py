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
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erfc
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import check_labels, check_probs
from jaxcal.metrics._keys import key_from_parts, key_parts

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
def _unbiased_core(p, y, n, bandwidth, key_data, *, kernel: str, n_resamples: int, impl):
    """The U-statistic of the observed labels and of ``n_resamples`` label vectors drawn
    under calibration (padding entries carry a zero residual)."""
    real = jnp.arange(p.shape[0]) < n
    r = jnp.where(real, y - p, 0)[:, None]
    if n_resamples:
        key = key_from_parts(key_data, impl)
        y_star = jax.random.bernoulli(key, p, (n_resamples, p.shape[0])).astype(p.dtype)
        r = jnp.concatenate([r, jnp.where(real, y_star - p, 0).T], axis=1)  # [n, 1 + B]
    rows_p = p.reshape(-1, _BLOCK)
    rows_r = r.reshape(-1, _BLOCK, r.shape[1])

    def block(args):
        pb, rb = args
        return jnp.sum(rb * (_kernel(pb[:, None], p[None, :], bandwidth, kernel) @ r), axis=0)

    # r' K r per column, one block of kernel rows at a time (bounded memory)
    quad = jnp.sum(jax.lax.map(block, (rows_p, rows_r)), axis=0)
    stats = 2 * (quad - jnp.sum(r * r, axis=0)) / (n * (n - 1))  # k(p, p) = 1 off i = j
    if not n_resamples:
        return stats[0], jnp.full((), jnp.nan, p.dtype)
    exceed = jnp.sum(stats[1:] >= stats[0])
    return stats[0], (1 + exceed) / (1 + n_resamples)


@functools.partial(jit, static_argnames=("kernel",))
def _linear_core(p, y, m, bandwidth, *, kernel: str):
    r = y - p
    pairs_p, pairs_r = p.reshape(-1, 2), r.reshape(-1, 2)
    real = jnp.arange(pairs_p.shape[0]) < m
    h = 2 * _kernel(pairs_p[:, 0], pairs_p[:, 1], bandwidth, kernel) * pairs_r[:, 0] * pairs_r[:, 1]
    h = jnp.where(real, h, 0)
    mean = jnp.sum(h) / m
    var = jnp.sum(jnp.where(real, (h - mean) ** 2, 0)) / (m - 1)
    sd = jnp.sqrt(var)
    z = jnp.where(sd > 0, jnp.sqrt(m) * mean / jnp.where(sd > 0, sd, 1), 0.0)
    p_value = jnp.where(sd > 0, 0.5 * erfc(z / jnp.sqrt(2.0)), 1.0)
    return mean, p_value


def _median_bandwidth(p: np.ndarray) -> float:
    """The median of ``|p[2i] - p[2i + 1]|`` over the disjoint pairs that differ (1 if
    none do)."""
    m = p.shape[0] // 2
    d = np.abs(p[: 2 * m : 2] - p[1 : 2 * m : 2])
    d = d[d > 0]
    return float(np.median(d)) if d.size else 1.0


def skce(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    estimator: str = "unbiased",
    kernel: str = "laplace",
    bandwidth: float | None = None,
    key: jax.Array | None = None,
    n_resamples: int = 1000,
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
        key: ``jax.random`` key of the resamples (``"unbiased"`` with ``n_resamples > 0``).
        n_resamples: label vectors drawn under calibration for the unbiased estimator's
            p-value (0: statistic only, p-value NaN).

    Returns:
        :class:`CalibrationTest` ``(statistic, p_value)``: the SKCE estimate (the linear
        and unbiased estimates can be negative) and the p-value of calibration.

    Raises:
        ValueError: invalid data, estimator, kernel, bandwidth or ``n_resamples``; no
            ``key`` where resampling needs one.

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
    p = check_probs(probs)
    y = check_labels(labels, p.shape[0])
    n = p.shape[0]
    if n < (4 if estimator == "linear" else 2):
        raise ValueError(f"the {estimator} SKCE needs more probabilities; got n = {n}.")
    if bandwidth is None:
        bandwidth = _median_bandwidth(p)
    elif not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a positive number; got {bandwidth!r}.")
    dtype = jnp.result_type(float)
    bw = np.asarray(bandwidth, dtype)
    if estimator == "linear":
        m = n // 2
        size = 2 * _shapes.padded_size(m)
        pp, yy = _shapes.pad_rows(size, p[: 2 * m], y[: 2 * m], fills=(0.5, 0.5))
        args = (np.asarray(pp, dtype), np.asarray(yy, dtype), np.asarray(m, dtype), bw)
        return CalibrationTest(*_linear_core(*args, kernel=kernel))
    if n_resamples and key is None:
        raise ValueError(
            "the unbiased SKCE's p-value resamples labels: pass key=jax.random.key(...), or "
            "n_resamples=0 for the statistic alone."
        )
    size = -(-_shapes.padded_size(n) // _BLOCK) * _BLOCK
    pp, yy = _shapes.pad_rows(size, p, y, fills=(0.5, 0.5))
    key_data, impl = key_parts(jax.random.key(0) if key is None else key)
    out = _unbiased_core(
        np.asarray(pp, dtype),
        np.asarray(yy, dtype),
        np.asarray(n, dtype),
        bw,
        key_data,
        kernel=kernel,
        n_resamples=int(n_resamples),
        impl=impl,
    )
    return CalibrationTest(*out)


@jit
def _spiegelhalter_core(p, y):
    num = jnp.sum((y - p) * (1 - 2 * p))
    z = num / jnp.sqrt(jnp.sum((1 - 2 * p) ** 2 * p * (1 - p)))
    return z, erfc(jnp.abs(z) / jnp.sqrt(2.0))


def spiegelhalter_z(probs: ArrayLike, labels: ArrayLike) -> CalibrationTest:
    r"""Spiegelhalter's (1986) z-test of calibration (module docstring).

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.

    Returns:
        :class:`CalibrationTest` ``(z, p_value)``, the p-value two-sided.

    Raises:
        ValueError: invalid data, or every probability in {0, 0.5, 1} (then the variance
            of the statistic is 0 and z is undefined).

    Example:
        >>> import jaxcal, numpy as np
        >>> p = np.array([0.1, 0.2, 0.7, 0.9]); y = np.array([0, 0, 1, 1])
        >>> z, p_value = jaxcal.metrics.spiegelhalter_z(p, y)
        >>> round(float(z), 4)
        -0.8805
    """
    p = check_probs(probs)
    y = check_labels(labels, p.shape[0])
    if not np.any((p > 0) & (p < 1) & (p != 0.5)):
        raise ValueError(
            "spiegelhalter_z is undefined when every probability is 0, 0.5 or 1 (the "
            "statistic has variance 0)."
        )
    size = _shapes.padded_size(p.shape[0])
    # padding with p = 0 adds nothing to either sum
    pp, yy = _shapes.pad_rows(size, p, y, fills=(0.0, 0.0))
    dtype = jnp.result_type(float)
    return CalibrationTest(*_spiegelhalter_core(np.asarray(pp, dtype), np.asarray(yy, dtype)))
