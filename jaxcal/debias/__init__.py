"""Unbiased fitting on missing-not-at-random feedback: propensities and loss weightings."""

from jaxcal.debias.base_rate import (
    BaseRateCorrected,
    implied_base_rate,
    negative_sampling_base_rate,
    prior_shift_correction,
)
from jaxcal.debias.losses import LOSSES, loss_targets_weights, weighted_logistic_loss
from jaxcal.debias.propensity import popularity_propensity, uniform_propensity
from jaxcal.debias.propensity_models import (
    LogisticPropensity,
    NaiveBayesPropensity,
    exposure_rate,
    holdout_propensity,
    logistic_propensity,
    matrix_propensity,
    naive_bayes_propensity,
    rescale_propensity,
)

__all__ = [
    "LOSSES",
    "loss_targets_weights",
    "weighted_logistic_loss",
    "popularity_propensity",
    "uniform_propensity",
    "matrix_propensity",
    "exposure_rate",
    "rescale_propensity",
    "holdout_propensity",
    "NaiveBayesPropensity",
    "naive_bayes_propensity",
    "LogisticPropensity",
    "logistic_propensity",
    "implied_base_rate",
    "negative_sampling_base_rate",
    "BaseRateCorrected",
    "prior_shift_correction",
]
