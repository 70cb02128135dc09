"""Class-conditional score models (NumPyro models) and the calibration maps they imply.

Each model class has: ``model`` (a NumPyro model with documented weakly-informative priors,
for NUTS/SVI), ``fit`` / ``fit_weighted`` (weighted maximum likelihood), the exact map
from class-conditional parameters and prior ``pi1`` to calibration coefficients
(``calibration_map``; not for mixtures), ``log_odds`` and ``is_monotone``.
"""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "GaussianScoreModel": "jaxcal.scoremodels.gaussian",
        "GaussianParams": "jaxcal.scoremodels.gaussian",
        "EqualVarianceGaussianScoreModel": "jaxcal.scoremodels.gaussian",
        "EqualVarianceGaussianParams": "jaxcal.scoremodels.gaussian",
        "GammaScoreModel": "jaxcal.scoremodels.gamma",
        "GammaParams": "jaxcal.scoremodels.gamma",
        "gamma_mle": "jaxcal.scoremodels.gamma",
        "ExponentialScoreModel": "jaxcal.scoremodels.exponential",
        "ExponentialParams": "jaxcal.scoremodels.exponential",
        "ManmathaScoreModel": "jaxcal.scoremodels.manmatha",
        "ManmathaParams": "jaxcal.scoremodels.manmatha",
        "KanoulasScoreModel": "jaxcal.scoremodels.kanoulas",
        "KanoulasParams": "jaxcal.scoremodels.kanoulas",
        "GaussianMixtureScoreModel": "jaxcal.scoremodels.mixture",
        "GaussianMixtureParams": "jaxcal.scoremodels.mixture",
        "weighted_gmm_em": "jaxcal.scoremodels.mixture",
    },
)
