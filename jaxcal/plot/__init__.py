"""Plots (needs the ``plot`` extra: ``pip install jaxcal[plot]``). Every function writes a PNG
and returns its path; matplotlib is imported only when a plot is drawn."""

from jaxcal._lazy import lazy_exports

# name -> module. Owners of a module add their public names here.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "reliability_diagram": "jaxcal.plot.reliability",
        "calibration_map": "jaxcal.plot.maps",
        "score_histograms": "jaxcal.plot.maps",
        "posterior_reliability_diagram": "jaxcal.plot.bayes",
        "posterior_map": "jaxcal.plot.bayes",
        "reliability_by_rank_diagram": "jaxcal.plot.clicks",
        "corp_reliability_diagram": "jaxcal.plot.corp",
        "rating_transforms": "jaxcal.plot.ratings",
        "segment_reliability": "jaxcal.plot.segments",
    },
)
