r"""Base rates implied by a calibration set, and a prior-shift correction from a MAR sample.

**Implied base rate** (:func:`jaxcal.losses.implied_base_rate`, also in ``jaxcal.debias``):
the level :math:`\pi = \sum_i w_i t_i / \sum_i w_i` that any calibration map fitted with a
loss weighting inherits from its calibration pairs. :func:`negative_sampling_base_rate` gives it
in closed form for sampled negatives.

**Prior-shift correction.** When the level is wrong (relative propensities, negative
sampling) but the shape is right, the fix is a logit shift: :math:`p'(s) =
\sigma(\operatorname{logit} p(s) + \delta)`, the adjustment of Saerens, Latinne & Decaestecker
(Neural Computation 2002) for a change of class prior. :func:`prior_shift_correction`
estimates :math:`\delta` by maximum likelihood on a small missing-at-random (MAR) sample kept
apart from the evaluation data (as AutoDebias, Chen et al. SIGIR 2021, keeps 5% of the
uniform data for training): :math:`\delta` solves
:math:`\sum_j w_j\,(\sigma(\operatorname{logit} p(s_j) + \delta) - y_j) = 0`, i.e. the
corrected mean prediction equals the MAR base rate.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._fitdata import maybe_check_scores
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass
from jaxcal._shapes import map_padded, pad_rows, padded_size
from jaxcal._validation import check_fit_inputs, check_real
from jaxcal.losses import LOSSES

__all__ = [
    "negative_sampling_base_rate",
    "BaseRateCorrected",
    "prior_shift_correction",
]


def negative_sampling_base_rate(
    n_negatives: float,
    *,
    loss: str = "naive",
    mean_inverse_propensity: float = 1.0,
    negative_weight: float = 1.0,
) -> float:
    r"""Closed-form base rate of ``r`` sampled negatives per positive.

    With :math:`m` the mean of :math:`1/\omega` over the positives and every negative
    weighted :math:`v`:

    .. math::
        \pi_\text{naive} = \pi_\text{snips} = \frac{1}{1 + r v}, \quad
        \pi_\text{ips} = \frac{m}{1 + r v}, \quad
        \pi_\text{ips\_positive} = \frac{m}{m + r v}.

    (The share of negatives is :math:`r v / (1 + r v)`.) With the seed paper's ``r = 57``
    and ``v = 1`` the naive level is 1/58 = 0.0172 whatever the data.

    Args:
        n_negatives: ``r`` > 0.
        loss: one of ``LOSSES``.
        mean_inverse_propensity: ``m`` >= 1 (IPS losses only).
        negative_weight: ``v`` > 0.

    Returns:
        The implied base rate.

    Raises:
        ValueError: an unknown ``loss``, ``n_negatives`` or ``negative_weight`` not a finite
            number > 0, ``mean_inverse_propensity`` not a finite number >= 1.

    Example:
        >>> from jaxcal.debias import negative_sampling_base_rate
        >>> round(negative_sampling_base_rate(57), 4)  # 1 / 58
        0.0172
        >>> round(negative_sampling_base_rate(57, loss="ips", mean_inverse_propensity=3.0), 4)
        0.0517
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}; got {loss!r}.")
    r = check_real(n_negatives, "n_negatives", minimum=0.0, strict=True)
    v = check_real(negative_weight, "negative_weight", minimum=0.0, strict=True)
    m = check_real(mean_inverse_propensity, "mean_inverse_propensity", minimum=1.0)
    rv = r * v
    if loss in ("naive", "snips"):
        return 1.0 / (1.0 + rv)
    if loss == "ips":
        return m / (1.0 + rv)
    return m / (m + rv)


def _logit_of(calibrator: Any, scores: Any) -> jax.Array:
    """Calibrated logits: the calibrator's exact ``predict_logit`` (parametric calibrators)
    when it has one; else the logit of ``predict``, with probabilities clipped to
    [eps, 1 - eps] (eps = dtype epsilon) so that maps that reach 0 or 1 exactly (isotonic)
    stay finite. The clip is the only one."""
    method = getattr(calibrator, "predict_logit", None)
    if callable(method):
        return jnp.asarray(method(scores))
    p = jnp.asarray(calibrator.predict(scores))
    eps = jnp.finfo(p.dtype).eps
    p = jnp.clip(p, eps, 1.0 - eps)
    return jnp.log(p) - jnp.log1p(-p)


@pytree_dataclass
class BaseRateCorrected:
    r"""A fitted calibrator with its level moved by a logit shift:
    :math:`p'(s) = \sigma(\operatorname{logit} p(s) + \delta)`.

    The result of :func:`prior_shift_correction`; a pytree (usable in ``jit``, ``save`` /
    ``jaxcal.load``).

    Attributes:
        base: the fitted calibrator (any jaxcal fitted pytree with ``predict``).
        shift: scalar :math:`\delta`.

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.debias import BaseRateCorrected
        >>> s, y = np.array([-1.0, -0.5, 0.2, 0.4, 1.0]), np.array([0, 1, 0, 1, 1])
        >>> fitted = jaxcal.PlattScaling().fit(s, y)
        >>> up = BaseRateCorrected(base=fitted, shift=np.float32(1.0))  # odds times e
        >>> bool(np.allclose(up.predict_logit(s), fitted.predict_logit(s) + 1.0, atol=1e-6))
        True
    """

    base: Any
    shift: jax.Array

    def predict_logit(self, scores: ArrayLike) -> jax.Array:
        """Corrected logits ``logit p(s) + shift`` (any shape of ``scores``).

        Example:
            >>> import jaxcal, numpy as np
            >>> from jaxcal.debias import BaseRateCorrected
            >>> s = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.9])
            >>> y = np.array([0, 0, 1, 0, 1, 1])
            >>> fitted = jaxcal.HistogramBinning(n_bins=2).fit(s, y)  # 1/3, 2/3: no logit
            >>> z = BaseRateCorrected(base=fitted, shift=np.float32(0.0)).predict_logit(s)
            >>> np.asarray(z).round(4).tolist()  # -log 2, log 2
            [-0.6931, -0.6931, -0.6931, 0.6931, 0.6931, 0.6931]
        """
        return map_padded(lambda s: _corrected_logit(self, s), maybe_check_scores(scores))

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Corrected probabilities ``sigmoid(logit p(s) + shift)`` (any shape of ``scores``).

        Example:
            >>> import jaxcal, numpy as np
            >>> from jaxcal.debias import BaseRateCorrected
            >>> s = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.9])
            >>> y = np.array([0, 0, 1, 0, 1, 1])
            >>> fitted = jaxcal.HistogramBinning(n_bins=2).fit(s, y)  # odds 1/2 and 2
            >>> corrected = BaseRateCorrected(base=fitted, shift=np.float32(np.log(2.0)))
            >>> np.asarray(corrected.predict(s)).round(4).tolist()  # odds 1 and 4
            [0.5, 0.5, 0.5, 0.8, 0.8, 0.8]
        """
        return map_padded(lambda s: _corrected_predict(self, s), maybe_check_scores(scores))


@jit
def _corrected_logit(corrected: BaseRateCorrected, scores: jax.Array) -> jax.Array:
    return _logit_of(corrected.base, scores) + corrected.shift


@jit
def _corrected_predict(corrected: BaseRateCorrected, scores: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(_logit_of(corrected.base, scores) + corrected.shift)


@jit
def _base_logit(calibrator: Any, scores: jax.Array) -> jax.Array:
    return _logit_of(calibrator, scores)


@jit
def _solve_shift(z: jax.Array, y: jax.Array, w: jax.Array, tol: jax.Array) -> jax.Array:
    """Root of f(d) = sum w (sigmoid(z + d) - y), increasing in d: safeguarded Newton.

    The bracket [logit(ybar) - max z, logit(ybar) - min z] holds the root (f <= 0 at the
    left end, f >= 0 at the right); a Newton step leaving the bracket becomes a bisection.
    """
    ybar = jnp.sum(w * y) / jnp.sum(w)
    ly = jnp.log(ybar) - jnp.log1p(-ybar)
    lo, hi = ly - jnp.max(z), ly - jnp.min(z)
    d0 = ly - jnp.sum(w * z) / jnp.sum(w)
    d0 = jnp.clip(d0, lo, hi)
    scale = jnp.sum(w)

    def f_and_df(d):
        p = jax.nn.sigmoid(z + d)
        return jnp.sum(w * (p - y)), jnp.sum(w * p * (1.0 - p))

    def cond(state):
        d, lo, hi, fd, k = state
        return (jnp.abs(fd) > tol * scale) & (hi - lo > tol) & (k < 200)

    def body(state):
        d, lo, hi, fd, k = state
        f, df = f_and_df(d)
        lo = jnp.where(f < 0, d, lo)
        hi = jnp.where(f > 0, d, hi)
        newton = d - f / jnp.maximum(df, jnp.finfo(z.dtype).tiny)
        inside = (newton > lo) & (newton < hi)
        d_new = jnp.where(inside, newton, 0.5 * (lo + hi))
        f_new, _ = f_and_df(d_new)
        return d_new, lo, hi, f_new, k + 1

    f0, _ = f_and_df(d0)
    d, *_ = jax.lax.while_loop(cond, body, (d0, lo, hi, f0, 0))
    return d


def prior_shift_correction(
    fitted_calibrator: Any,
    mar_scores: ArrayLike,
    mar_labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
    tol: float | None = None,
) -> BaseRateCorrected:
    r"""Correct the level of any fitted calibrator with a small MAR sample.

    Fits :math:`\delta` by maximum likelihood of
    :math:`y_j \sim \operatorname{Bernoulli}(\sigma(\operatorname{logit} p(s_j) + \delta))` on
    the MAR sample (a logistic regression with offset and intercept only), which makes the
    corrected mean prediction equal the MAR base rate. Under a pure change of class prior
    from :math:`\pi` to :math:`\pi'` the true shift is
    :math:`\operatorname{logit}\pi' - \operatorname{logit}\pi` (Saerens et al. 2002).

    Keep the MAR sample apart from the data you evaluate on (e.g. 5% of the uniform test
    ratings, as AutoDebias does; :func:`jaxcal.data.holdout_split` with ``fraction=0.05``).

    Args:
        fitted_calibrator: a fitted jaxcal calibrator (pytree with ``predict``).
        mar_scores: ``[m]`` model scores of the MAR pairs.
        mar_labels: ``[m]`` their true 0/1 preferences.
        sample_weight: optional ``[m]`` weights.
        tol: convergence tolerance on the mean score equation (default: 1e-12 in float64,
            1e-6 in float32).

    Returns:
        :class:`BaseRateCorrected` (a pytree: usable in ``jit``, ``save`` / ``jaxcal.load``),
        whose ``shift`` has the dtype of the calibrator's logits (float32 for a calibrator
        fitted on float32 scores).

    Raises:
        ValueError: NaN scores, labels not 0/1, one class only, length mismatch, negative
            weights, a calibrator without ``predict``, or ``tol`` not a finite number > 0.

    Example (a calibrator fitted where half the positives went unrecorded, corrected
    with 200 pairs whose labels are complete):
        >>> import jaxcal, numpy as np
        >>> from jaxcal.debias import prior_shift_correction
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=1200); y = rng.random(1200) < 1 / (1 + np.exp(-(2 * s - 1)))
        >>> seen = y & (rng.random(1200) < 0.5)
        >>> fitted = jaxcal.PlattScaling().fit(s[:1000], seen[:1000])
        >>> mar_scores, mar_labels = s[1000:], y[1000:]
        >>> corrected = prior_shift_correction(fitted, mar_scores, mar_labels)
        >>> probs = corrected.predict(mar_scores)
        >>> bool(abs(float(probs.mean()) - mar_labels.mean()) < 1e-4)  # the MAR base rate
        True
    """
    if not hasattr(fitted_calibrator, "predict"):
        raise ValueError("fitted_calibrator must be a fitted calibrator with a predict method.")
    if tol is not None:
        tol = check_real(tol, "tol", minimum=0.0, strict=True)
    s, y, w = check_fit_inputs(mar_scores, mar_labels, sample_weight)
    dtype = np.dtype(jnp.result_type(float))
    z = np.asarray(map_padded(lambda x: _base_logit(fitted_calibrator, x), s.astype(dtype)))
    if not np.all(np.isfinite(z)):
        raise ValueError("the calibrator returned non-finite probabilities on mar_scores.")
    dtype = z.dtype  # the base calibrator's logits': the shift has their dtype
    if tol is None:
        tol = 1e-12 if dtype == np.float64 else 1e-6
    # padded to the size bucket with zero-weight copies of the first logit (jaxcal._shapes)
    z, y, w = pad_rows(
        padded_size(z.shape[0]), z, y.astype(dtype), w.astype(dtype), fills=(z[0], 0, 0)
    )
    shift = _solve_shift(z, y, w, np.asarray(tol, dtype))
    return BaseRateCorrected(base=fitted_calibrator, shift=shift)
