"""Unbiased fitting on missing-not-at-random feedback: propensities, base-rate (prior-shift)
corrections, and the loss weightings of :mod:`jaxcal.losses` (re-exported here). Names load
lazily: importing the package imports none of its modules."""

from jaxcal._lazy import lazy_exports

_BASE_RATE = "jaxcal.debias.base_rate"
_LOSSES = "jaxcal.losses"
_PROPENSITY = "jaxcal.debias.propensity"
_MODELS = "jaxcal.debias.propensity_models"

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "LOSSES": _LOSSES,
        "loss_targets_weights": _LOSSES,
        "weighted_logistic_loss": _LOSSES,
        "popularity_propensity": _PROPENSITY,
        "uniform_propensity": _PROPENSITY,
        "matrix_propensity": _MODELS,
        "exposure_rate": _MODELS,
        "rescale_propensity": _MODELS,
        "holdout_propensity": _MODELS,
        "NaiveBayesPropensity": _MODELS,
        "naive_bayes_propensity": _MODELS,
        "LogisticPropensity": _MODELS,
        "logistic_propensity": _MODELS,
        "implied_base_rate": _LOSSES,
        "negative_sampling_base_rate": _BASE_RATE,
        "BaseRateCorrected": _BASE_RATE,
        "prior_shift_correction": _BASE_RATE,
    },
)
