r"""CORP reliability diagrams and score decomposition (Dimitriadis, Gneiting & Jordan, PNAS
2021): Consistent, Optimally binned, Reproducible, PAV-based.

The CORP reliability curve is the isotonic (PAV) regression of the labels on the forecast
probabilities :math:`p_i`: a step function :math:`\hat p_i = \mathrm{PAV}(p, y)_i`, with
tied forecasts pooled, no binning choices. For a proper scoring rule :math:`S` (mean
score :math:`\bar S`), the recalibrated forecasts give the decomposition

.. math::

    \bar S(p) = \mathrm{MCB} - \mathrm{DSC} + \mathrm{UNC},\qquad
    \mathrm{MCB} = \bar S(p) - \bar S(\hat p),\quad
    \mathrm{DSC} = \bar S(r) - \bar S(\hat p),\quad
    \mathrm{UNC} = \bar S(r),

where :math:`r` is the base rate (the constant forecast :math:`\sum w_i y_i / \sum w_i`).
MCB (miscalibration) and DSC (discrimination) are non-negative: PAV is optimal among
monotone recalibrations for every proper score. Brier score
:math:`S(q, y) = (q - y)^2`; log score :math:`S(q, y) = -y \log q - (1 - y)\log(1 - q)`,
computed with :math:`0 \log 0 = 0` (a forecast of 0 or 1 that is wrong scores
:math:`+\infty`).

**Consistency bands** (the paper's Section 3): under the hypothesis of calibration the
labels are :math:`y^*_i \sim \mathrm{Bernoulli}(p_i)`; the CORP curve of ``n_resamples``
such label vectors (``jax.vmap`` over resamples of one jitted PAV) gives, at every distinct
forecast value, the band between its ``(1 - level)/2`` and ``(1 + level)/2`` quantiles. A
reliability curve outside the band is evidence of miscalibration there.

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) both functions run in
the program (the PAV of :func:`jaxcal.isotonic_regression` on tracers) and invalid data
gives NaN. The number :math:`K` of distinct forecasts is not known there, so
``corp_reliability`` returns ``[n]`` arrays: the first :math:`K` entries are the curve, the
others NaN (``K = sum(~isnan(forecast))`` for valid data). The PAV fit is piecewise
constant in the forecasts: MCB and DSC vary with ``probs`` only through the mean score
:math:`\bar S(p)` and the order of the forecasts.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlog1py, xlogy
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import nan_where
from jaxcal.fitting.isotonic import isotonic_regression, isotonic_regression_in_program
from jaxcal.metrics._inputs import metric_inputs
from jaxcal.metrics._keys import key_from_parts, key_parts, optional_key
from jaxcal.metrics._pure import run_starts

__all__ = ["CorpDecomposition", "CorpReliability", "corp_decomposition", "corp_reliability"]

SCORES = ("brier", "log")


class CorpDecomposition(NamedTuple):
    """The CORP decomposition of a mean score: ``score = mcb - dsc + unc``."""

    mcb: jax.Array  #: miscalibration, :math:`\bar S(p) - \bar S(\hat p) \ge 0`
    dsc: jax.Array  #: discrimination, :math:`\bar S(r) - \bar S(\hat p) \ge 0`
    unc: jax.Array  #: uncertainty, :math:`\bar S(r)` (the base rate's score)

    @property
    def score(self) -> jax.Array:
        """The mean score of the forecasts, ``mcb - dsc + unc``."""
        return self.mcb - self.dsc + self.unc


class CorpReliability(NamedTuple):
    """The CORP reliability curve at the ``K`` distinct forecast values, with its
    consistency band (NaN without resamples)."""

    forecast: jax.Array  #: ``[K]`` distinct forecast probabilities, increasing
    recalibrated: jax.Array  #: ``[K]`` PAV-recalibrated probability at each
    lower: jax.Array  #: ``[K]`` lower end of the consistency band
    upper: jax.Array  #: ``[K]`` upper end of the consistency band


def _mean_score(q, y, w, score: str):
    if score == "brier":
        loss = (q - y) ** 2
    else:
        loss = -(xlogy(y, q) + xlog1py(1 - y, -q))
    # zero-weight (padding) entries never count, even with an infinite loss
    return jnp.sum(jnp.where(w > 0, w * loss, 0)) / jnp.sum(w)


def _pav(in_program: bool):
    """The PAV of the eager shell's own programs (``in_program``: the compiled CPU kernel
    where built) or of a caller's trace (the pure-JAX PAV, which differentiates and
    exports)."""
    return isotonic_regression_in_program if in_program else isotonic_regression


@functools.partial(jit, static_argnames=("score", "in_program"))
def _decomposition_core(p, y, w, *, score: str, in_program: bool = False):
    recal = _pav(in_program)(p, y, sample_weight=w)
    base = jnp.sum(w * y) / jnp.sum(w)
    s_p = _mean_score(p, y, w, score)
    s_c = _mean_score(recal, y, w, score)
    s_r = _mean_score(jnp.full_like(p, base), y, w, score)
    return s_p - s_c, s_r - s_c, s_r


def _padded(p, y, w):
    """Device arrays padded to the bucket size with zero-weight copies of ``p[0]``."""
    size = _shapes.padded_size(p.shape[0])
    padded = _shapes.pad_rows(size, p, y, w, fills=(p[0], 0.0, 0.0))
    dtype = jnp.result_type(float)
    return [jax.device_put(np.asarray(a, dtype)) for a in padded]


def corp_decomposition(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    score: str = "brier",
    sample_weight: ArrayLike | None = None,
) -> CorpDecomposition:
    r"""The CORP score decomposition ``(mcb, dsc, unc)`` (Dimitriadis, Gneiting & Jordan
    2021), from the PAV-recalibrated probabilities (module docstring).

    Args:
        probs: ``[n]`` forecast probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        score: ``"brier"`` or ``"log"``.
        sample_weight: optional ``[n]`` non-negative weights (weighted means and a weighted
            PAV).

    Returns:
        A :class:`CorpDecomposition` (a named tuple ``(mcb, dsc, unc)``; ``.score`` is the
        mean score ``mcb - dsc + unc``).

    Raises:
        ValueError: probabilities outside [0, 1], labels not 0/1, bad weights, unknown
            ``score``.

    Example:
        >>> import jaxcal, numpy as np
        >>> p = np.array([0.1, 0.3, 0.3, 0.6, 0.9]); y = np.array([0, 1, 0, 0, 1])
        >>> mcb, dsc, unc = jaxcal.metrics.corp_decomposition(p, y)
        >>> round(float(mcb - dsc + unc), 6) == round(float(np.mean((p - y) ** 2)), 6)
        True
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}; got {score!r}.")
    p, y, w, invalid = metric_inputs(probs, labels, sample_weight)
    if invalid is not None:  # traced inputs
        return CorpDecomposition(*nan_where(invalid, _decomposition_core(p, y, w, score=score)))
    return CorpDecomposition(*_decomposition_core(*_padded(p, y, w), score=score, in_program=True))


@functools.partial(jit, static_argnames=("n_resamples", "impl", "in_program"))
def _reliability_core(
    p, y, w, first, key_data, q_lo, q_hi, *, n_resamples: int, impl, in_program: bool = False
):
    pav = _pav(in_program)
    recal = pav(p, y, sample_weight=w)[first]
    if n_resamples == 0:
        nan = jnp.full_like(recal, jnp.nan)
        return recal, nan, nan

    def resample(k):
        y_star = jax.random.bernoulli(k, p).astype(p.dtype)
        return pav(p, y_star, sample_weight=w)[first]

    keys = jax.random.split(key_from_parts(key_data, impl), n_resamples)
    curves = jax.vmap(resample)(keys)
    return recal, jnp.quantile(curves, q_lo, axis=0), jnp.quantile(curves, q_hi, axis=0)


def corp_reliability(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    key: jax.Array | None = None,
    n_resamples: int = 1000,
    level: float = 0.9,
    sample_weight: ArrayLike | None = None,
) -> CorpReliability:
    """The CORP reliability curve (PAV step function) with consistency bands obtained by
    resampling the labels under the hypothesis of calibration (Dimitriadis, Gneiting &
    Jordan 2021, Section 3; module docstring).

    Args:
        probs: ``[n]`` forecast probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        key: ``jax.random`` key of the resamples (a JAX PRNG key; needed unless
            ``n_resamples=0``).
        n_resamples: label vectors drawn under calibration (0: no band, NaN bounds).
        level: coverage of the pointwise band, in (0, 1).
        sample_weight: optional ``[n]`` non-negative weights.

    Returns:
        A :class:`CorpReliability` at the distinct forecast values: the curve is constant
        (a step) between them. Inside a trace (``jit``, ``vmap``, ...): ``[n]`` arrays, the
        curve in the first ``K`` entries and NaN after them (module docstring).

    Raises:
        ValueError: invalid data, ``level`` outside (0, 1), a negative ``n_resamples``, no
            ``key`` with resamples, or a ``key`` that is not a JAX PRNG key.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> p = np.linspace(0.05, 0.95, 200); y = (np.random.default_rng(0).uniform(size=200) < p)
        >>> curve = jaxcal.metrics.corp_reliability(p, y, key=jax.random.key(0), n_resamples=100)
        >>> curve.forecast.shape == curve.lower.shape == (200,)
        True
    """
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1); got {level!r}.")
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 0:
        raise ValueError(f"n_resamples must be a non-negative integer; got {n_resamples!r}.")
    key = optional_key(
        key,
        needed=bool(n_resamples),
        what="the consistency band resamples labels",
        otherwise="n_resamples=0 for the curve alone",
    )
    p, y, w, invalid = metric_inputs(probs, labels, sample_weight, key)
    if invalid is not None:  # traced inputs
        return _reliability_pure(p, y, w, invalid, key, int(n_resamples), level)
    forecast, first = np.unique(p, return_index=True)
    k = forecast.shape[0]
    first = _shapes.pad_axis(first.astype(np.int32), _shapes.padded_size(k), 0)
    dtype = jnp.result_type(float)
    key_data, impl = key_parts(jax.random.key(0) if key is None else key)
    out = _reliability_core(
        *_padded(p, y, w),
        jax.device_put(first),
        key_data,
        np.asarray((1 - level) / 2, dtype),
        np.asarray((1 + level) / 2, dtype),
        n_resamples=int(n_resamples),
        impl=impl,
        in_program=True,
    )
    return CorpReliability(
        jax.device_put(forecast.astype(dtype)), *(_shapes.unpad(o, k) for o in out)
    )


def _reliability_pure(p, y, w, invalid, key, n_resamples: int, level):
    """:func:`corp_reliability` on traced inputs: ``[n]`` arrays, NaN after the ``K``
    distinct forecasts (and everywhere for invalid data)."""
    order = jnp.argsort(p)
    starts, k = run_starts(p[order])
    first = order[starts]
    key_data, impl = key_parts(jax.random.key(0) if key is None else key)
    out = _reliability_core(
        p,
        y,
        w,
        first,
        key_data,
        jnp.asarray((1 - level) / 2, p.dtype),
        jnp.asarray((1 + level) / 2, p.dtype),
        n_resamples=n_resamples,
        impl=impl,
    )
    real = jnp.arange(p.shape[0]) < k
    curve = CorpReliability(p[first], *out)
    return nan_where(invalid | ~real, curve)
