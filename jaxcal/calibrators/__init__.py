"""Calibrators: parametric (Platt, temperature, beta, Gaussian, Gamma, exponential),
spline calibration (a penalised natural cubic spline of the score),
non-parametric (isotonic, histogram, BBQ, ENIR, smoothed isotonic), field-aware
(neural calibration) and multicalibration (boosted trees over features and score). Every
one follows the contract in ``jaxcal.calibrators._base``.

``PrecisionWarning``: the cast of the training scores to JAX's working precision merged
distinct scores (see ``jaxcal.calibrators._scaling`` for what each calibrator does with
scores that precision cannot hold)."""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "PlattScaling": "jaxcal.calibrators.platt",
        "TemperatureScaling": "jaxcal.calibrators.temperature",
        "BetaCalibration": "jaxcal.calibrators.beta",
        "GaussianCalibration": "jaxcal.calibrators.gaussian",
        "GammaCalibration": "jaxcal.calibrators.gamma",
        "ExponentialCalibration": "jaxcal.calibrators.exponential",
        "SplineCalibration": "jaxcal.calibrators.spline",
        "IsotonicCalibration": "jaxcal.calibrators.isotonic",
        "isotonic_regression": "jaxcal.calibrators.isotonic",
        "FittedIsotonicCounts": "jaxcal.calibrators.isotonic_counts",
        "ScoreCounts": "jaxcal.fitting.score_counts",
        "score_counts": "jaxcal.fitting.score_counts",
        "HistogramBinning": "jaxcal.calibrators.histogram",
        "BBQ": "jaxcal.calibrators.bbq",
        "ENIR": "jaxcal.calibrators.enir",
        "near_isotonic_regression": "jaxcal.calibrators.enir",
        "SmoothedIsotonic": "jaxcal.calibrators.smoothed_isotonic",
        "negative_downsampling_correction": "jaxcal.calibrators.smoothed_isotonic",
        "NeuralCalibration": "jaxcal.calibrators.neural",
        "MulticalibrationBoosting": "jaxcal.calibrators.multicalibration",
        "VennAbers": "jaxcal.calibrators.venn_abers",
        "PrecisionWarning": "jaxcal._validation",
        "ConvergenceWarning": "jaxcal.fitting.solver",
        "SeparableDataWarning": "jaxcal.fitting.solver",
    },
)
