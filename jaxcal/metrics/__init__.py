"""Metrics: calibration (ECE, MCE, NLL, Brier, reliability), discrimination (AUC),
field-level calibration (Pan et al. 2020), ECE estimators, CORP reliability curves and score
decompositions (Dimitriadis et al. 2021), calibration tests (SKCE, Spiegelhalter's z), and
per-user ranking metrics
(``ndcg_at_k``, ``recall_at_k``; the per-user AUC is ``jaxcal.metrics.ranking.auc``, apart
from the pooled binary ``auc``), and metrics of explicit-rating predictions (``rating_mse``,
``rating_mae``, ``kendall_tau_per_user``), and the same metrics from counts by distinct score
(``score_counts``; ``auc_from_counts``, ... for data larger than memory or spread over
processes), and multicalibration: the cumulative calibration error (``ecce``,
``ecce_sigma``, ``ecce_pvalue``; Arrieta-Ibarra et al. 2022) and its worst value over the
segments a feature table defines (``multicalibration_error``, ``segment_masks``,
``segment_report``; Guy et al. 2025).

Every metric is also a JAX function: on traced inputs (inside ``jit``, ``vmap``, ``grad``,
``jax.export``) it runs its pure core in the caller's program, and data that the eager call
refuses gives NaN (docs/metrics.md, "Inside jit, vmap and grad")."""

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
        "ranking": "jaxcal.metrics.ranking",
        "ndcg_at_k": "jaxcal.metrics.ranking",
        "recall_at_k": "jaxcal.metrics.ranking",
        "corp_decomposition": "jaxcal.metrics.corp",
        "corp_reliability": "jaxcal.metrics.corp",
        "skce": "jaxcal.metrics.calibration_tests",
        "spiegelhalter_z": "jaxcal.metrics.calibration_tests",
        "rating_mse": "jaxcal.metrics.ratings",
        "rating_mae": "jaxcal.metrics.ratings",
        "kendall_tau_per_user": "jaxcal.metrics.ratings",
        "ScoreCounts": "jaxcal.fitting.score_counts",
        "score_counts": "jaxcal.metrics.counts",
        "auc_from_counts": "jaxcal.metrics.counts",
        "brier_from_counts": "jaxcal.metrics.counts",
        "nll_from_counts": "jaxcal.metrics.counts",
        "ece_from_counts": "jaxcal.metrics.counts",
        "mce_from_counts": "jaxcal.metrics.counts",
        "ecce": "jaxcal.metrics.cumulative",
        "ecce_sigma": "jaxcal.metrics.cumulative",
        "ecce_pvalue": "jaxcal.metrics.cumulative",
        "multicalibration_error": "jaxcal.metrics.multicalibration",
        "MulticalibrationResult": "jaxcal.metrics.multicalibration",
        "segment_masks": "jaxcal.metrics.multicalibration",
        "Segments": "jaxcal.metrics.multicalibration",
        "segment_report": "jaxcal.metrics.mce_report",
        "SegmentReport": "jaxcal.metrics.mce_report",
    },
)
