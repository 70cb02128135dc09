"""Calibration-map families: what a parametric calibration map is (its features, context
and monotonicity constraints), independent of how it is fitted. The concrete linear-logit
families (``PlattFamily``, ``GaussianFamily``, ...) are defined next to their estimators in
:mod:`jaxcal.calibrators`; their interface is :class:`jaxcal.families.linear.LinearLogitFamily`
(with ``ScoreRange``, ``score_range`` and ``family_dataclass``), in the one public module
:mod:`jaxcal.families.linear`, imported on first use."""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {"linear": f"{__name__}.linear"})
