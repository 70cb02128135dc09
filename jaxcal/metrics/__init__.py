"""Metrics: calibration (ECE, MCE, NLL, Brier, reliability), discrimination (AUC),
field-level calibration (Pan et al. 2020), ECE estimators, and ``jaxcal.metrics.ranking``."""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "ece": "jaxcal.metrics.calibration",
        "mce": "jaxcal.metrics.calibration",
        "nll": "jaxcal.metrics.calibration",
        "brier": "jaxcal.metrics.calibration",
        "reliability": "jaxcal.metrics.calibration",
        "auc": "jaxcal.metrics.discrimination",
        "pcoc": "jaxcal.metrics.field",
        "cal_n": "jaxcal.metrics.field",
        "gc_n": "jaxcal.metrics.field",
        "field_ece": "jaxcal.metrics.field",
        "field_rce": "jaxcal.metrics.field",
        "debiased_ece": "jaxcal.metrics.ece_estimators",
        "smooth_ece": "jaxcal.metrics.ece_estimators",
    },
)
