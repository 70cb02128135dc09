r"""Beta calibration: :math:`P(y=1 \mid s) = \sigma(a \log s' - b \log(1 - s') + c)`,
:math:`a, b \ge 0`.

Kull, Silva Filho & Flach (AISTATS 2017), "Beta calibration: a well-founded and easily
implemented improvement on logistic calibration for binary classifiers" — the
three-parameter "abm" map with the monotonicity constraints :math:`a, b \ge 0`.

Beta calibration needs scores in (0, 1). ``rescale`` chooses how to get there:

* ``"range"`` (default; for unbounded scores such as ranking-model logits):
  :math:`s' = (s - s_{\min} + m r) / ((1 + 2m) r)` with :math:`r = s_{\max} - s_{\min}` and
  margin :math:`m` (``margin``, default 0.01), so training scores map into
  :math:`[m/(1+2m), (1+m)/(1+2m)]`.
* ``"none"``: the scores are probabilities already; :math:`s' = s` (training scores must
  lie strictly inside (0, 1)).

At ``predict``, :math:`s'` is clipped into :math:`[\epsilon, 1 - \epsilon]`
(:math:`\epsilon` = the dtype's machine epsilon), so scores outside the training range
give finite, flat-tailed probabilities.

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, 1000)
    >>> probs = np.clip(rng.beta(2 + 3 * labels, 4 - 2 * labels), 1e-6, 1 - 1e-6)
    >>> cal = jaxcal.BetaCalibration(rescale="none").fit(probs, labels)
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_real
from jaxcal.calibrators._base import check_choice
from jaxcal.calibrators._linear import (
    LinearCalibratorEstimator,
    LinearLogitCalibrator,
    coefficient,
)
from jaxcal.families.linear import LinearLogitFamily, ScoreRange, family_dataclass

__all__ = ["BetaCalibration", "FittedBeta", "BetaFamily"]

_RESCALE = ("range", "none")


@family_dataclass
class BetaFamily(LinearLogitFamily):
    r""":math:`z = a\log s' - b\log(1 - s') + c`; :math:`\phi = [\log s', -\log(1-s'), 1]`;
    constraints :math:`a \ge 0`, :math:`b \ge 0` (``u = [a, b]``).

    Args:
        rescale: ``"range"`` or ``"none"`` (see the module docstring).
        margin: the margin :math:`m > 0` of ``"range"`` rescaling.

    Raises:
        ValueError: ``rescale`` not one of those, or ``margin`` not a finite number > 0.

    Example:
        >>> from jaxcal.calibrators.beta import BetaFamily
        >>> BetaFamily(rescale="none").param_names
        ('a', 'b', 'c')
    """

    rescale: str = "range"
    margin: float = 0.01

    param_names: ClassVar[tuple[str, ...]] = ("a", "b", "c")
    intercept_index: ClassVar[int | None] = 2

    def __post_init__(self):
        check_choice(self.rescale, "rescale", _RESCALE)
        margin = check_real(self.margin, "margin", minimum=0.0, strict=True)
        object.__setattr__(self, "margin", margin)  # a Python float: hashable, saved as is

    @property
    def shift_equivariant(self) -> bool:
        """``"range"`` rescaling is affine-invariant; probabilities (``"none"``) are not."""
        return self.rescale == "range"

    @property
    def scale_equivariant(self) -> bool:
        return self.rescale == "range"

    def transform(self, scores: ArrayLike, ctx: ScoreRange) -> jax.Array:
        """:math:`s'` in :math:`[\\epsilon, 1 - \\epsilon]`."""
        s = jnp.asarray(scores)
        if self.rescale == "range":
            r = ctx.hi - ctx.lo
            s = (s - ctx.lo + self.margin * r) / ((1 + 2 * self.margin) * r)
        eps = jnp.finfo(jnp.result_type(s, float)).eps
        return jnp.clip(s, eps, 1 - eps)

    def features(self, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        s = self.transform(scores, ctx)
        return jnp.stack([jnp.log(s), -jnp.log1p(-s), jnp.ones_like(s)], axis=-1)

    def constraints(self, ctx: ScoreRange) -> jax.Array:
        return jnp.eye(2, 3, dtype=jnp.result_type(ctx.lo, float))

    def monotone_rows(self, lo: ArrayLike, hi: ArrayLike, ctx: ScoreRange) -> jax.Array:
        # dz/ds' = a/s' + b/(1-s') has the sign of a (1 - s') + b s', linear in s'.
        dtype = jnp.result_type(ctx.lo, float)
        x = self.transform(jnp.stack([jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)]), ctx)
        return jnp.stack([1 - x, x, jnp.zeros_like(x)], axis=-1)

    def check_scores(
        self, scores: np.ndarray, weights: np.ndarray, dtype: np.dtype | None = None
    ) -> None:
        r"""The checks of every family, and for ``"none"`` scores strictly inside (0, 1) that
        the clip into :math:`[\epsilon, 1 - \epsilon]` of ``dtype`` (the fit's, default the
        working dtype) does not make all equal."""
        super().check_scores(scores, weights)
        s = scores[weights > 0]
        if self.rescale == "none" and ((s <= 0).any() or (s >= 1).any()):
            raise ValueError(
                "BetaCalibration(rescale='none') needs scores strictly inside (0, 1); got "
                f"range [{s.min():.6g}, {s.max():.6g}]. Use rescale='range' for other scores."
            )
        if self.rescale == "none":  # s' is clipped into [eps, 1 - eps] of the fit's dtype
            dtype = jnp.result_type(float) if dtype is None else np.dtype(dtype)
            eps = float(jnp.finfo(dtype).eps)
            clipped = np.clip(s.astype(dtype), eps, 1 - eps)
            if clipped.min() == clipped.max():
                raise ValueError(
                    "BetaCalibration(rescale='none') clips probabilities into [eps, 1 - eps] "
                    f"of {np.dtype(dtype).name} (the fit's precision, eps = {eps:.3g}), and "
                    f"all training scores (range [{s.min():.6g}, {s.max():.6g}]) fall on one "
                    "value there: the map is not identified. Use rescale='range', or fit float64 "
                    "scores with float64 enabled (jax.config.update('jax_enable_x64', True))."
                )

    def invalid_scores(self, scores: jax.Array, weights: jax.Array) -> jax.Array:
        invalid = super().invalid_scores(scores, weights)
        if self.rescale == "none":
            pos = weights > 0
            eps = jnp.finfo(scores.dtype).eps
            clipped = jnp.clip(scores, eps, 1 - eps)
            lo = jnp.min(jnp.where(pos, clipped, jnp.inf))
            hi = jnp.max(jnp.where(pos, clipped, -jnp.inf))
            invalid = invalid | jnp.any(pos & ((scores <= 0) | (scores >= 1))) | ~(lo < hi)
        return invalid


@pytree_dataclass
class FittedBeta(LinearLogitCalibrator):
    """Fitted beta calibration: ``predict(s) = sigmoid(a log s' - b log(1 - s') + c)``.

    Example:
        >>> import jaxcal, numpy as np
        >>> p, y = np.array([0.1, 0.3, 0.4, 0.6, 0.8, 0.9]), np.array([0, 1, 0, 0, 1, 1])
        >>> fitted = jaxcal.BetaCalibration(rescale="none").fit(p, y)
        >>> z = fitted.a * np.log(p) - fitted.b * np.log1p(-p) + fitted.c
        >>> bool(np.allclose(fitted.predict(p), 1 / (1 + np.exp(-z)), atol=1e-6))
        True
    """

    a = coefficient(0, "a >= 0 (coefficient of log s').")
    b = coefficient(1, "b >= 0 (coefficient of -log(1 - s')).")
    c = coefficient(2, "Intercept c.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BetaCalibration(LinearCalibratorEstimator[FittedBeta]):
    """Beta calibration estimator (Kull et al. 2017).

    Args:
        rescale: ``"range"`` (default) or ``"none"`` (scores are probabilities).
        margin: margin of the ``"range"`` rescaling (default 0.01).

    ``l2`` (on :math:`a, b`), ``method`` (only ``"discriminative"``), ``max_iter`` and ``tol``
    as in :class:`~jaxcal.calibrators._linear.LinearCalibratorEstimator`. ``fit`` returns a
    :class:`FittedBeta`.

    Raises:
        ValueError: an invalid hyperparameter (``rescale``, ``margin`` or a shared one),
            when it is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0]), np.array([0, 1, 0, 0, 1, 1])
        >>> fitted = jaxcal.BetaCalibration(margin=0.05).fit(s, y)  # "range": any scores
        >>> bool(fitted.is_monotone())
        True
        >>> jaxcal.BetaCalibration(margin=0.0)
        Traceback (most recent call last):
        ...
        ValueError: margin must be a finite number and > 0; got 0.0.
    """

    rescale: str = "range"
    margin: float = 0.01

    fitted_class: ClassVar[type[FittedBeta]] = FittedBeta

    @property
    def family(self) -> BetaFamily:
        return BetaFamily(rescale=self.rescale, margin=self.margin)

    def _check_scores(self, scores: np.ndarray, weights: np.ndarray, dtype: np.dtype) -> None:
        family = self.family
        if scores.ndim == 1:
            family.check_scores(scores, weights, dtype=dtype)
            return
        for b in range(scores.shape[0]):  # as LinearLogitFamily.check_scores_batch
            try:
                family.check_scores(scores[b], weights[b], dtype=dtype)
            except ValueError as exc:
                raise ValueError(f"problem {b}: {exc}") from None
