r"""Better estimators of calibration error: debiased binned ECE and smooth ECE.

The plug-in binned ECE is biased upwards: even a perfectly calibrated model scores
:math:`\approx \sum_b \frac{W_b}{W}\sqrt{\bar y_b(1 - \bar y_b)/n_b}` because of label noise.
Two remedies:

**Debiased ECE** (Kumar, Liang, Ma. "Verified Uncertainty Calibration", NeurIPS 2019). With
bins :math:`b`, weight shares :math:`\pi_b = W_b / W`, mean prediction :math:`\bar p_b` and
label mean :math:`\bar y_b`, the squared L2 calibration error has the unbiased estimator

.. math::

    \widehat{\mathrm{CE}}{}^2 = \sum_b \pi_b \Bigl[(\bar y_b - \bar p_b)^2
        - \frac{\bar y_b (1 - \bar y_b)}{n_b^{\mathrm{eff}} - 1}\Bigr],
    \qquad n_b^{\mathrm{eff}} = \frac{W_b^2}{\sum_{i \in b} w_i^2}

(the subtracted term is the unbiased estimate of :math:`\mathrm{Var}(\bar y_b)`; with unit
weights :math:`n^{\mathrm{eff}}_b = n_b`), and ``debiased_ece(p=2)`` returns
:math:`\sqrt{\max(\widehat{\mathrm{CE}}{}^2, 0)}` as the authors' library does. For the
L1 error (``p=1``) there is no closed form; Kumar et al. correct the plug-in estimate
:math:`E` by a parametric bootstrap: draw :math:`\tilde y_b \sim \mathcal N(\bar y_b,
\bar y_b(1 - \bar y_b)/n_b^{\mathrm{eff}})`, and return :math:`2E - \mathbb E[\tilde E]`.

**Smooth ECE** (Blasiok, Nakkiran. "Smooth ECE: Principled Reliability Diagrams via Kernel
Smoothing", ICLR 2024). With the reflected Gaussian kernel on [0, 1],
:math:`\tilde K_\sigma(t, f) = \sum_{k \in \mathbb Z} \phi_\sigma(t - f - 2k) +
\phi_\sigma(t + f - 2k)`,

.. math::

    \mathrm{smECE}_\sigma = \int_0^1 \Bigl|\frac{1}{W}\sum_i w_i\,\tilde K_\sigma(t, f_i)
        (y_i - f_i)\Bigr|\,dt,

and the bandwidth is the unique fixed point :math:`\sigma^* = \mathrm{smECE}_{\sigma^*}`
(:math:`\mathrm{smECE}_\sigma` is non-increasing in :math:`\sigma`), found by bisection;
``smooth_ece`` returns :math:`\mathrm{smECE}_{\sigma^*} = \sigma^*`. As in the authors'
``relplot`` package, the residual mass :math:`w_i (y_i - f_i)` is first spread onto a uniform
grid of ``n_grid`` points by linear interpolation (additive sums: it shards), then
convolved with the kernel on the grid and integrated by the trapezoid rule; the grid spacing
must be well below :math:`\sigma^*` (the default 1001 points gives spacing 0.001).

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) both run their pure
cores, invalid data (and, for the debiased ECE, a bin with a single effective sample) gives
NaN. Smooth ECE is differentiable in ``probs``; at the fixed-point bandwidth its gradient
follows the implicit function theorem,
:math:`d\sigma^*/dp = -\partial_p \mathrm{smECE} / (\partial_\sigma \mathrm{smECE} - 1)`,
not the bisection. The debiased ECE is differentiable within its bins (``p=2`` where the
estimate is positive).
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal.metrics._inputs import metric_inputs
from jaxcal.metrics._keys import optional_key
from jaxcal.metrics.calibration import bin_edges, bin_ids, segment_sums, weighted_arrays

__all__ = [
    "DebiasStats",
    "debias_stats",
    "debiased_sq_ce_from_stats",
    "debiased_l1_ce_from_stats",
    "grid_residuals",
    "smooth_ece_from_grid",
    "debiased_ece",
    "smooth_ece",
]


class DebiasStats(NamedTuple):
    """Additive per-bin sums for the debiased estimators (each ``[n_bins]``)."""

    count: jax.Array  #: number of samples in the bin
    weight: jax.Array  #: :math:`W_b`
    weight_sq: jax.Array  #: :math:`\sum_{i \in b} w_i^2`
    sum_probs: jax.Array  #: :math:`\sum_{i \in b} w_i p_i`
    sum_labels: jax.Array  #: :math:`\sum_{i \in b} w_i y_i`


# --------------------------------------------------------------------------- pure core


def debias_stats(
    probs: ArrayLike,
    labels: ArrayLike,
    edges: ArrayLike,
    sample_weight: ArrayLike | None = None,
    *,
    axis_name: str | None = None,
) -> DebiasStats:
    """Per-bin sums over (a shard of) the data; pure, ``jit`` / ``shard_map`` friendly.

    Bins follow :func:`jaxcal.metrics.calibration.binned_stats` (``[e_b, e_{b+1})``, last
    bin closed). ``axis_name``: inside ``shard_map``, the axis to ``psum`` over.
    """
    p, y, w = weighted_arrays(probs, labels, sample_weight)
    edges = jnp.asarray(edges, p.dtype)
    values = (jnp.ones_like(p), w, w * w, w * p, w * y)
    ids, n_bins = bin_ids(p, edges), edges.shape[0] - 1
    return DebiasStats(*segment_sums(values, ids, n_bins, axis_name=axis_name))


def _bin_terms(stats: DebiasStats):
    keep = stats.weight > 0
    safe_w = jnp.where(keep, stats.weight, 1.0)
    share = stats.weight / jnp.sum(stats.weight)
    pbar = stats.sum_probs / safe_w
    ybar = stats.sum_labels / safe_w
    # Var(ybar) estimate: ybar (1 - ybar) / (n_eff - 1), n_eff = W^2 / sum w^2
    dof = safe_w**2 - stats.weight_sq
    var = jnp.where(
        keep & (dof > 0), stats.weight_sq * ybar * (1 - ybar) / jnp.where(dof > 0, dof, 1.0), 0.0
    )
    return keep, share, pbar, ybar, var


def debiased_sq_ce_from_stats(stats: DebiasStats) -> jax.Array:
    r"""Unbiased estimate of the squared L2 calibration error (may be negative)."""
    keep, share, pbar, ybar, var = _bin_terms(stats)
    return jnp.sum(jnp.where(keep, share * ((ybar - pbar) ** 2 - var), 0.0))


def debiased_l1_ce_from_stats(stats: DebiasStats, key: jax.Array, n_resamples: int) -> jax.Array:
    """Kumar et al.'s bootstrap-debiased L1 calibration error, ``2 E - mean(E~)``."""
    keep, share, pbar, ybar, _ = _bin_terms(stats)
    safe_w = jnp.where(keep, stats.weight, 1.0)
    n_eff = safe_w**2 / jnp.where(keep, stats.weight_sq, 1.0)
    plugin = jnp.sum(jnp.where(keep, share * jnp.abs(ybar - pbar), 0.0))
    sd = jnp.sqrt(ybar * (1 - ybar) / n_eff)
    draws = ybar + sd * jax.random.normal(key, (n_resamples,) + ybar.shape, ybar.dtype)
    resampled = jnp.sum(jnp.where(keep, share * jnp.abs(draws - pbar), 0.0), axis=-1)
    return 2 * plugin - jnp.mean(resampled)


def grid_residuals(
    probs: ArrayLike,
    labels: ArrayLike,
    n_grid: int,
    sample_weight: ArrayLike | None = None,
    *,
    axis_name: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Spread ``w (y - p)`` and ``w`` onto ``n_grid`` uniform points of [0, 1] (linear
    interpolation: each sample's mass splits between its two neighbouring grid points).

    Returns ``(residual_mass, weight_total)``; both are additive over data shards.
    """
    p, y, w = weighted_arrays(probs, labels, sample_weight)
    x = p * (n_grid - 1)
    left = jnp.clip(jnp.floor(x), 0, n_grid - 2).astype(jnp.int32)
    frac = x - left
    r = w * (y - p)
    mass = jax.ops.segment_sum(r * (1 - frac), left, num_segments=n_grid)
    mass = mass + jax.ops.segment_sum(r * frac, left + 1, num_segments=n_grid)
    total = jnp.sum(w)
    if axis_name is not None:
        mass, total = jax.lax.psum((mass, total), axis_name)
    return mass, total


def _reflected_kernel_matrix(n_grid: int, sigma: jax.Array) -> jax.Array:
    """``K[j, k] = sum_m phi_s(t_j - u_k - 2m) + phi_s(t_j + u_k - 2m)``, m in -3..3."""
    h = 1.0 / (n_grid - 1)
    shifts = 2.0 * jnp.arange(-3, 4, dtype=sigma.dtype)
    diff = h * jnp.arange(-(n_grid - 1), n_grid, dtype=sigma.dtype)  # t_j - u_k
    summ = h * jnp.arange(0, 2 * n_grid - 1, dtype=sigma.dtype)  # t_j + u_k
    norm = 1.0 / (sigma * math.sqrt(2 * math.pi))

    def phi(z):
        return norm * jnp.sum(jnp.exp(-0.5 * ((z[:, None] - shifts) / sigma) ** 2), axis=-1)

    toeplitz, hankel = phi(diff), phi(summ)
    j = jnp.arange(n_grid)
    return toeplitz[j[:, None] - j[None, :] + n_grid - 1] + hankel[j[:, None] + j[None, :]]


def _trapezoid(values: jax.Array) -> jax.Array:
    h = 1.0 / (values.shape[-1] - 1)
    return h * (jnp.sum(values) - 0.5 * (values[0] + values[-1]))


def smooth_ece_from_grid(mass: jax.Array, total: jax.Array, sigma: ArrayLike) -> jax.Array:
    r""":math:`\mathrm{smECE}_\sigma` from grid residual masses (see :func:`grid_residuals`)."""
    sigma = jnp.asarray(sigma, mass.dtype)
    kernel = _reflected_kernel_matrix(mass.shape[0], sigma)
    return _trapezoid(jnp.abs(kernel @ mass) / total)


def _fixed_point_sigma(mass, total, n_iter: int = 50):
    """Bisection on ``smECE_s - s`` (non-increasing in s) over [0, 1]."""

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        above = smooth_ece_from_grid(mass, total, mid) > mid
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    zero = jnp.zeros((), mass.dtype)
    lo, hi = jax.lax.fori_loop(0, n_iter, body, (zero, zero + 1.0))
    return 0.5 * (lo + hi)


@jit
def _debias_stats_core(p, y, w, n, edges):
    """:func:`debias_stats` of the first ``n`` entries (the others are zero-weight padding,
    left out of the counts)."""
    stats = debias_stats(p, y, edges, w)
    real = (jnp.arange(p.shape[0]) < n).astype(p.dtype)
    count = jax.ops.segment_sum(real, bin_ids(p, edges), num_segments=edges.shape[0] - 1)
    return stats._replace(count=count)


@jit
def _sq_core(stats: DebiasStats) -> jax.Array:
    return jnp.sqrt(jnp.maximum(debiased_sq_ce_from_stats(stats), 0.0))


_l1_core = jit(debiased_l1_ce_from_stats, static_argnames="n_resamples")


@partial(jit, static_argnames=("n_grid", "fixed"))
def _smooth_core(p, y, w, sigma, *, n_grid, fixed):
    mass, total = grid_residuals(p, y, n_grid, w)
    if fixed:
        sigma = _fixed_point_sigma(mass, total)
    return smooth_ece_from_grid(mass, total, sigma), sigma


def _smooth_pure(p, y, w, sigma, *, n_grid: int, fixed: bool):
    r""":func:`_smooth_core` for traced inputs: the same numbers, and at the fixed point the
    derivative of the implicit function :math:`\sigma^*(p)` (module docstring)."""
    mass, total = grid_residuals(p, y, n_grid, w)
    if fixed:
        found = _fixed_point_sigma(jax.lax.stop_gradient(mass), jax.lax.stop_gradient(total))

        def gap(s):  # smECE_s - s, zero at the fixed point, slope <= -1
            return smooth_ece_from_grid(mass, total, s) - s

        value, slope = jax.jvp(gap, (found,), (jnp.ones_like(found),))
        # equal to ``found``; its tangent is -d(gap)/dp / d(gap)/ds
        sigma = found - (value - jax.lax.stop_gradient(value)) / jax.lax.stop_gradient(slope)
    sigma = jnp.asarray(sigma, mass.dtype)
    return smooth_ece_from_grid(mass, total, sigma), sigma


# --------------------------------------------------------------------- eager public API


def debiased_ece(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    n_bins: int = 15,
    strategy: str = "quantile",
    p: int = 2,
    sample_weight: ArrayLike | None = None,
    n_resamples: int = 1000,
    key: jax.Array | None = None,
) -> jax.Array:
    r"""Debiased binned calibration error (Kumar, Liang, Ma, NeurIPS 2019).

    ``p=2``: :math:`\sqrt{\max(0, \sum_b \pi_b [(ar y_b - ar p_b)^2 - ar y_b(1 -
    ar y_b)/(n^{\mathrm{eff}}_b - 1)])}`, whose square is unbiased for the binned squared
    calibration error (see the module docstring). ``p=1``: the plug-in L1 ECE corrected by
    the Gaussian parametric bootstrap of the paper (needs ``key``).

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        n_bins: number of bins (default 15).
        strategy: ``"quantile"`` (equal mass, the paper's choice; default) or ``"uniform"``.
        p: 1 or 2, the norm of the calibration error.
        sample_weight: ``[n]`` non-negative weights (default ones).
        n_resamples: bootstrap draws for ``p=1``.
        key: ``jax.random`` key (a JAX PRNG key), required for ``p=1``.

    Returns:
        Scalar debiased calibration error estimate (``p=2``: >= 0).

    Raises:
        ValueError: bad probabilities / labels / weights / ``n_bins`` / ``strategy``, ``p``
            not 1 or 2, ``p=1`` without a key, or a non-empty bin with effective size
            :math:`n^{\mathrm{eff}}_b \le 1` (the variance cannot be estimated: use fewer bins).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> probs = rng.uniform(size=20000)
        >>> from jaxcal.metrics import debiased_ece
        >>> labels = rng.uniform(size=20000) < probs  # calibrated
        >>> float(debiased_ece(probs, labels)) < 0.01
        True
    """
    if p not in (1, 2) or isinstance(p, bool):
        raise ValueError(f"p must be 1 or 2; got {p!r}.")
    key = optional_key(key, needed=p == 1, what="debiased_ece(p=1) draws a parametric bootstrap")
    if (
        isinstance(n_resamples, bool)
        or not isinstance(n_resamples, (int, np.integer))
        or (n_resamples < 1)
    ):
        raise ValueError(f"n_resamples must be a positive integer; got {n_resamples!r}.")
    x = metric_inputs(probs, labels, sample_weight, key)
    edges = bin_edges(x.probs, n_bins=n_bins, strategy=strategy)
    if x.traced:
        stats = debias_stats(x.probs, x.labels, edges, x.weights)
        small = (stats.weight > 0) & (stats.weight**2 - stats.weight_sq <= 1e-12 * stats.weight**2)
        x = x._replace(invalid=x.invalid | jnp.any(small))
    else:
        stats = _debias_stats_core(*x.padded(), x.n, edges)
        weight, weight_sq = np.asarray(stats.weight), np.asarray(stats.weight_sq)
        small = (weight > 0) & (weight**2 - weight_sq <= 1e-12 * weight**2)
        if small.any():
            raise ValueError(
                f"{int(small.sum())} bin(s) hold a single effective sample (first: bin "
                f"{int(np.flatnonzero(small)[0])}); the debiased estimator needs >= 2 per bin. "
                "Use fewer bins."
            )
    if p == 2:
        return x.result(_sq_core(stats))
    return x.result(_l1_core(stats, key, n_resamples=int(n_resamples)))


def smooth_ece(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    sigma: float | None = None,
    n_grid: int = 1001,
    sample_weight: ArrayLike | None = None,
    return_sigma: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    r"""Smooth ECE with the reflected Gaussian kernel (Blasiok & Nakkiran, ICLR 2024).

    .. math:: \mathrm{smECE}_\sigma = \int_0^1 \Bigl|\frac{1}{W}\sum_i w_i \tilde
        K_\sigma(t, p_i)(y_i - p_i)\Bigr| dt

    With ``sigma=None`` the bandwidth is the fixed point :math:`\sigma^* =
    \mathrm{smECE}_{\sigma^*}` (the paper's parameter-free choice); otherwise the given
    bandwidth is used.

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        sigma: kernel bandwidth in (0, 1], or ``None`` for the fixed point.
        n_grid: grid points on [0, 1] (>= 3; spacing ``1 / (n_grid - 1)`` must be well
            below the bandwidth).
        sample_weight: ``[n]`` non-negative weights (default ones).
        return_sigma: also return the bandwidth used.

    Returns:
        Scalar smooth ECE, or ``(smooth_ece, sigma)`` with ``return_sigma=True``.

    Raises:
        ValueError: bad probabilities / labels / weights, ``sigma`` outside (0, 1],
            ``n_grid < 3``.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> probs = rng.uniform(0.2, 0.8, size=20000)
        >>> from jaxcal.metrics import smooth_ece
        >>> labels = rng.uniform(size=20000) < probs + 0.1  # predictions 0.1 too low
        >>> round(float(smooth_ece(probs, labels)), 1)
        0.1
    """
    if isinstance(n_grid, bool) or not isinstance(n_grid, (int, np.integer)) or n_grid < 3:
        raise ValueError(f"n_grid must be an integer >= 3; got {n_grid!r}.")
    if (
        sigma is not None
        and not _shapes.is_traced(sigma)
        and not (isinstance(sigma, (int, float)) and np.isfinite(sigma) and 0 < sigma <= 1)
    ):
        raise ValueError(f"sigma must be in (0, 1] or None; got {sigma!r}.")
    x = metric_inputs(probs, labels, sample_weight, sigma)
    if x.traced:
        core, bandwidth = _smooth_pure, 1.0 if sigma is None else sigma
    else:
        core, bandwidth = _smooth_core, 1.0 if sigma is None else float(sigma)
    out = core(*x.padded(), bandwidth, n_grid=int(n_grid), fixed=sigma is None)
    value, used = x.result(out)
    return (value, used) if return_sigma else value
