"""Calibrators: parametric (Platt, temperature, beta, Gaussian, Gamma, exponential),
spline calibration (a penalised natural cubic spline of the score),
non-parametric (isotonic, histogram, BBQ, ENIR, smoothed isotonic), field-aware
(neural calibration) and multicalibration (boosted trees over features and score). Every
one follows the contract in ``jaxcal.calibrators._base``.

``PrecisionWarning``: the cast of the training scores to JAX's working precision merged
distinct scores (see ``jaxcal.calibrators._scaling`` for what each calibrator does with
scores that precision cannot hold).

Each calibrator's ``fit`` returns its fitted type, exported here too (``PlattScaling`` ->
``FittedPlatt``, ``HistogramBinning`` -> ``FittedHistogram``, ...): an immutable pytree whose
float leaves have the dtype of the scores it was fitted on.
"""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "FittedCalibrator": "jaxcal.calibrators._base",  # what every fitted map is
        "PlattScaling": "jaxcal.calibrators.platt",
        "FittedPlatt": "jaxcal.calibrators.platt",
        "TemperatureScaling": "jaxcal.calibrators.temperature",
        "FittedTemperature": "jaxcal.calibrators.temperature",
        "BetaCalibration": "jaxcal.calibrators.beta",
        "FittedBeta": "jaxcal.calibrators.beta",
        "GaussianCalibration": "jaxcal.calibrators.gaussian",
        "FittedGaussian": "jaxcal.calibrators.gaussian",
        "GammaCalibration": "jaxcal.calibrators.gamma",
        "FittedGamma": "jaxcal.calibrators.gamma",
        "ExponentialCalibration": "jaxcal.calibrators.exponential",
        "FittedExponential": "jaxcal.calibrators.exponential",
        "SplineCalibration": "jaxcal.calibrators.spline",
        "FittedSpline": "jaxcal.calibrators.spline",
        "IsotonicCalibration": "jaxcal.calibrators.isotonic",
        "FittedIsotonic": "jaxcal.calibrators.isotonic",
        "isotonic_regression": "jaxcal.calibrators.isotonic",
        "FittedIsotonicCounts": "jaxcal.calibrators.isotonic_counts",
        "ScoreCounts": "jaxcal.fitting.score_counts",
        "score_counts": "jaxcal.fitting.score_counts",
        "HistogramBinning": "jaxcal.calibrators.histogram",
        "FittedHistogram": "jaxcal.calibrators.histogram",
        "BBQ": "jaxcal.calibrators.bbq",
        "FittedBBQ": "jaxcal.calibrators.bbq",
        "ENIR": "jaxcal.calibrators.enir",
        "FittedENIR": "jaxcal.calibrators.enir",
        "near_isotonic_regression": "jaxcal.calibrators.enir",
        "SmoothedIsotonic": "jaxcal.calibrators.smoothed_isotonic",
        "FittedSmoothedIsotonic": "jaxcal.calibrators.smoothed_isotonic",
        "negative_downsampling_correction": "jaxcal.calibrators.smoothed_isotonic",
        "NeuralCalibration": "jaxcal.calibrators.neural",
        "FittedNeuralCalibration": "jaxcal.calibrators._neural_fitted",
        "MulticalibrationBoosting": "jaxcal.calibrators.multicalibration",
        "FittedMulticalibrationBoosting": "jaxcal.calibrators._multicalibration_fitted",
        "VennAbers": "jaxcal.calibrators.venn_abers",
        "FittedVennAbers": "jaxcal.calibrators.venn_abers",
        "PrecisionWarning": "jaxcal._validation",
        "ConvergenceWarning": "jaxcal.fitting.solver",
        "SeparableDataWarning": "jaxcal.fitting.solver",
    },
)
