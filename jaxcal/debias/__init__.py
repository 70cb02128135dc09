"""Unbiased fitting on missing-not-at-random feedback: propensities and loss weightings."""

from jaxcal.debias.losses import LOSSES, loss_targets_weights, weighted_logistic_loss
from jaxcal.debias.propensity import popularity_propensity, uniform_propensity

__all__ = [
    "LOSSES",
    "loss_targets_weights",
    "weighted_logistic_loss",
    "popularity_propensity",
    "uniform_propensity",
]
