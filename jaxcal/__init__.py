"""jaxcal: calibrated probabilities for ranking, recommendation and click models.

A pure functional core over pytrees (``fit -> params``, ``apply(params, scores)``), with
thin estimator classes on top. Public names are re-exported here lazily, so that
``import jaxcal`` stays cheap and each subpackage loads when first used.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jaxcal")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

# public name -> module that defines it
_EXPORTS = {
    # parametric calibrators
    "PlattScaling": "jaxcal.calibrators",
    "TemperatureScaling": "jaxcal.calibrators",
    "BetaCalibration": "jaxcal.calibrators",
    "GaussianCalibration": "jaxcal.calibrators",
    "GammaCalibration": "jaxcal.calibrators",
    "ExponentialCalibration": "jaxcal.calibrators",
    "SplineCalibration": "jaxcal.calibrators",
    # non-parametric and field-aware calibrators
    "IsotonicCalibration": "jaxcal.calibrators",
    "HistogramBinning": "jaxcal.calibrators",
    "BBQ": "jaxcal.calibrators",
    "ENIR": "jaxcal.calibrators",
    "SmoothedIsotonic": "jaxcal.calibrators",
    "NeuralCalibration": "jaxcal.calibrators",
    "MulticalibrationBoosting": "jaxcal.calibrators",
    "VennAbers": "jaxcal.calibrators",
    "isotonic_regression": "jaxcal.calibrators",
    "negative_downsampling_correction": "jaxcal.calibrators",
    # fitted calibrators: what each calibrator's fit returns
    "FittedCalibrator": "jaxcal.calibrators",
    "FittedPlatt": "jaxcal.calibrators",
    "FittedTemperature": "jaxcal.calibrators",
    "FittedBeta": "jaxcal.calibrators",
    "FittedGaussian": "jaxcal.calibrators",
    "FittedGamma": "jaxcal.calibrators",
    "FittedExponential": "jaxcal.calibrators",
    "FittedSpline": "jaxcal.calibrators",
    "FittedIsotonic": "jaxcal.calibrators",
    "FittedIsotonicCounts": "jaxcal.calibrators",
    "FittedHistogram": "jaxcal.calibrators",
    "FittedBBQ": "jaxcal.calibrators",
    "FittedENIR": "jaxcal.calibrators",
    "FittedSmoothedIsotonic": "jaxcal.calibrators",
    "FittedNeuralCalibration": "jaxcal.calibrators",
    "FittedMulticalibrationBoosting": "jaxcal.calibrators",
    "FittedVennAbers": "jaxcal.calibrators",
    # persistence
    "save": "jaxcal._serialization",
    "load": "jaxcal._serialization",
    "show_config": "jaxcal._native",  # versions, settings and the compiled kernels' state
}
_SUBPACKAGES = (
    "bayes",
    "calibrators",
    "clicks",
    "data",
    "debias",
    "decide",
    "distributed",
    "functional",
    "metrics",
    "plot",
    "recsys",
    "scoremodels",
    "sklearn",  # the scikit-learn adapter (needs the sklearn extra; imported on first use)
)

__all__ = sorted([*_EXPORTS, *_SUBPACKAGES, "__version__"])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"jaxcal.{name}")
    else:
        raise AttributeError(f"module 'jaxcal' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
