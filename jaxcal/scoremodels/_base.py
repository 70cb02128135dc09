"""Shared machinery of the score models: weighted class statistics and the eager ``fit``.

A *score model* describes the class-conditional score densities :math:`f_0, f_1` and the
class prior :math:`\\pi_1`. Bayes' rule turns it into a calibration map,

.. math::  \\operatorname{logit} P(y = 1 \\mid s) = \\log\\frac{\\pi_1}{\\pi_0}
    + \\log f_1(s) - \\log f_0(s),

which for the families below is a linear-logit map with closed-form coefficients
(formulas: Kweon et al. 2022; checked against scipy log-densities in the tests).

Weighted fits take per-score class weights ``w1`` (towards the positive class) and ``w0``
(towards the negative class): with 0/1 labels and sample weights ``v`` these are
``v * y`` and ``v * (1 - y)``; with soft targets ``t`` in [0, 1] they are ``w t`` and
``w (1 - t)`` (the expected complete-data log-likelihood). Zero class weights make padding
exact: ``fit`` pads the data to their bucket size (``jaxcal._shapes``) with copies of a valid
score of weight 0, and passes the real-valued fields of the model (prior scales, the
mixture's ``tol``...) as traced arguments, so new sizes in a bucket and new values compile
nothing. On tracers (inside a caller's ``jit``, ``vmap`` or ``grad``) ``fit`` is
``fit_weighted`` on the unpadded data, with the NaN policy of the calibrators' pure fits
(``jaxcal.calibrators._base``): data ``fit`` would refuse gives NaN parameters.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import fit_dtype, poison, prepare_fit_pure
from jaxcal._jit import jit
from jaxcal._lazy import lazy_method
from jaxcal._pytree import join_hyperparameters, split_hyperparameters
from jaxcal._serialization import register_serializable
from jaxcal._validation import check_fit_inputs, check_int, check_real
from jaxcal.scoremodels._sites import observe_labels

__all__ = ["ParamsT", "ScoreModel", "class_prior", "logit_prior", "weighted_moments"]

_STATUS_FIELDS = ("n_iter", "converged")  # fit diagnostics in some params classes, not draws


def class_prior(w1: jax.Array, w0: jax.Array) -> jax.Array:
    """:math:`\\pi_1 = \\sum w_1 / (\\sum w_1 + \\sum w_0)`."""
    return jnp.sum(w1) / (jnp.sum(w1) + jnp.sum(w0))


def weighted_moments(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Weighted mean and (maximum-likelihood, divide-by-sum-of-weights) variance."""
    total = jnp.sum(w)
    mean = jnp.sum(w * x) / total
    var = jnp.sum(w * (x - mean) ** 2) / total
    return mean, var


def logit_prior(pi1: jax.Array) -> jax.Array:
    """:math:`\\log\\frac{\\pi_1}{\\pi_0}`, the class-prior term of every posterior logit."""
    return jnp.log(pi1) - jnp.log1p(-pi1)


@functools.partial(jit, static_argnums=0)
def _fit_jit(static, values, scores, w1, w0):
    return join_hyperparameters(static, values).fit_weighted(scores, w1, w0)


#: the fitted-parameters type of a score model (``GaussianParams`` for
#: ``GaussianScoreModel``, ...)
ParamsT = TypeVar("ParamsT")


class ScoreModel(Generic[ParamsT]):
    """Base class: eager validated ``fit`` on top of a pure ``fit_weighted``, generic in the
    parameters type that ``fit`` returns (``GaussianScoreModel`` is a
    ``ScoreModel[GaussianParams]``; the type is also its ``fitted_class``).

    Subclasses (frozen dataclasses holding the prior hyperparameters) implement
    ``fit_weighted(scores, w1, w0) -> params`` (pure, jit/vmap-able),
    ``log_odds(params, scores)`` and ``is_monotone(params, lo, hi)``; for :meth:`fit_bayes`
    also ``bayes_prior(pi1, *, lo, hi, monotone) -> params`` (NumPyro sample statements,
    monotone by parameterisation where the family allows it) and
    ``class_log_density(params, scores, labels) -> [n]``; for :meth:`model`
    ``_observe_scores`` (its priors and the scores given the labels).

    The hyperparameters are checked when the model is made: real-valued fields (prior
    scales, EM's ``tol`` and sd floor) are finite and positive (``tol`` may be 0), integer
    fields (``n_components``, ``max_iter``) at least 1; else a ``ValueError`` naming the
    field.

    Example:
        >>> from jaxcal.scoremodels import GaussianScoreModel
        >>> from jaxcal.scoremodels._base import ScoreModel
        >>> isinstance(GaussianScoreModel(), ScoreModel), GaussianScoreModel.fitted_class
        (True, <class 'jaxcal.scoremodels.gaussian.GaussianParams'>)
        >>> GaussianScoreModel(loc_scale=-1.0)
        Traceback (most recent call last):
        ...
        ValueError: loc_scale must be a finite number and > 0; got -1.0.
    """

    support: str = "real"  # "real" or "positive" (scores must be > 0) or "nonnegative"
    #: the fitted-parameters pytree class of the family (what ``fit`` returns)
    fitted_class: ClassVar[type]
    #: whether ``fit_bayes(monotone=True)`` is available (a monotone parameterisation)
    monotone_parameterisation: bool = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_serializable(cls)  # a posterior stores its score model: savable, no pickle

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _check_hyperparameters(self) -> None:
        """``ValueError`` naming the first invalid hyperparameter (class docstring). Blank
        (``None``) and traced values are the halves of ``split_hyperparameters`` /
        ``join_hyperparameters`` (``jaxcal._pytree``) of a model already checked."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or _shapes.is_traced(value):
                continue
            if f.type in ("float", float):
                check_real(value, f.name, minimum=0.0, strict=f.name != "tol")
            elif f.type in ("int", int):
                check_int(value, f.name, minimum=1)

    def _check_support(self, s: np.ndarray) -> None:
        name = type(self).__name__
        if self.support == "positive" and (s <= 0).any():
            raise ValueError(
                f"{name} needs positive scores (its densities live on s > 0); got min "
                f"{s.min():.6g}. Shift the scores (GammaCalibration does s - s_min + shift)."
            )
        if self.support == "nonnegative" and (s < 0).any():
            raise ValueError(
                f"{name} needs non-negative scores; got min {s.min():.6g}. Shift them first."
            )

    def fit(
        self, scores: ArrayLike, labels: ArrayLike, *, sample_weight: ArrayLike | None = None
    ) -> ParamsT:
        """Weighted maximum-likelihood fit of the class-conditional densities and prior.

        Args:
            scores: ``[n]`` scores (in the model's support).
            labels: ``[n]`` 0/1 labels.
            sample_weight: optional ``[n]`` non-negative weights.

        Returns:
            The fitted parameters, of the model's ``fitted_class`` (a pytree dataclass,
            savable with ``save``), whose float leaves have the dtype of ``scores``
            (float32 scores give float32 parameters, also with x64 enabled:
            :func:`~jaxcal.calibrators._scaling.fit_dtype`).

        Raises:
            ValueError: on invalid inputs or scores outside the support.

        Example:
            >>> import numpy as np
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> s = np.array([0.1, 0.5, 1.2, 2.0], np.float32)
            >>> params = GaussianScoreModel().fit(s, np.array([0, 0, 1, 1]))
            >>> round(float(params.mu1), 4), params.mu1.dtype
            (1.6, dtype('float32'))
        """
        if _shapes.is_traced(scores, labels, sample_weight):
            return self._fit_pure(scores, labels, sample_weight)
        dtype = fit_dtype(scores)
        s, y, w = check_fit_inputs(scores, labels, sample_weight)
        self._check_support(s)
        # shape policy: padded with copies of a valid score carrying zero class weights
        size = _shapes.padded_size(s.shape[0])
        s, w1, w0 = _shapes.pad_rows(size, s, w * y, w * (1.0 - y), fills=(s[0], 0.0, 0.0))
        static, values = split_hyperparameters(self)
        return _fit_jit(static, values, *(np.asarray(a, dtype) for a in (s, w1, w0)))

    def _fit_pure(self, scores, labels, sample_weight):
        """:meth:`fit` on tracers (inside ``jit``, ``vmap``, ``grad``): ``fit_weighted`` in
        the scores' dtype, unpadded. Data that :meth:`fit` refuses (the checks of
        ``jaxcal._fitdata.prepare_fit_pure``, scores outside the model's support) gives
        parameters of NaN instead of an error."""
        data = prepare_fit_pure(scores, labels, sample_weight=sample_weight)
        s, y, w = data.scores, data.labels, data.weights
        invalid = data.invalid
        if self.support == "positive":
            invalid = invalid | jnp.any(s <= 0)
        elif self.support == "nonnegative":
            invalid = invalid | jnp.any(s < 0)
        if self.support != "real":  # keep the fit's logarithms finite; the result is NaN
            s = jnp.where(invalid, 1.0, s)
        return poison(self.fit_weighted(s, w * y, w * (1.0 - y)), invalid)

    def predict(self, params, scores: ArrayLike) -> jax.Array:
        """Posterior :math:`P(y=1 \\mid s)` = ``sigmoid(log_odds(params, scores))``."""
        return jax.nn.sigmoid(self.log_odds(params, scores))

    # ------------------------------------------------------------------ Bayesian inference
    def model(self, scores: ArrayLike | None, labels: ArrayLike, *, sample_weight=None) -> None:
        """NumPyro model of labelled scores: ``pi1 ~ Beta(1, 1)``, ``labels ~ Bernoulli(pi1)``,
        the family's priors (class docstring) and ``scores | labels`` from the
        class-conditional densities, weighted by ``sample_weight`` like the labels.

        Args:
            scores: ``[n]`` scores, or ``None`` for a model of the labels and priors only.
            labels: ``[n]`` 0/1 labels.
            sample_weight: optional ``[n]`` non-negative weights.

        Example:
            >>> import numpyro
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> model = numpyro.handlers.seed(GaussianScoreModel().model, 0)
            >>> trace = numpyro.handlers.trace(model).get_trace([0.2, 1.5], [0, 1])
            >>> trace["mu"]["value"].shape  # a class mean per class
            (2,)
        """
        labels, n = observe_labels(labels, sample_weight)
        self._observe_scores(scores, labels, sample_weight, n)

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """The rest of :meth:`model` after the ``n`` labels: the family's priors and
        ``scores | labels``."""
        raise NotImplementedError

    # Subclasses implement ``bayes_prior(pi1, *, lo, hi, monotone) -> params`` (NumPyro
    # sample statements of the class-conditional parameters; every site of the params class
    # is recorded, as a sample or deterministic site of the same name) and
    # ``class_log_density(params, scores, labels) -> [n]`` (:math:`\log f_{y_i}(s_i)`).

    def draw_names(self) -> tuple[str, ...]:
        """Names of the parameters in a posterior's ``draws`` (the params-class fields)."""
        names = [f.name for f in dataclasses.fields(self.fitted_class)]
        return tuple(n for n in names if n not in _STATUS_FIELDS)

    def params_from_draws(self, draws: dict) -> ParamsT:
        """The params pytree of (any leading shape of) draws; status fields filled in."""
        lead = jnp.shape(draws["pi1"])
        extra = {}
        for f in dataclasses.fields(self.fitted_class):
            if f.name == "n_iter":
                extra[f.name] = jnp.zeros(lead, jnp.int32)
            elif f.name == "converged":
                extra[f.name] = jnp.ones(lead, bool)
        return self.fitted_class(**{n: draws[n] for n in self.draw_names()}, **extra)

    #: :func:`jaxcal.bayes.scoremodel.fit_scoremodel_bayes` with this score model: a posterior
    #: over the class prior and class-conditional parameters (NUTS or SVI), returned as a
    #: :class:`~jaxcal.bayes.scoremodel.ScoreModelPosterior`.
    #: (imported on first use: NumPyro is not needed by the point fits).
    fit_bayes = lazy_method("jaxcal.bayes.scoremodel", "fit_scoremodel_bayes")
