"""Calibration-map families: what a parametric calibration map is (its features, context
and monotonicity constraints), independent of how it is fitted. The concrete linear-logit
families (``PlattFamily``, ``GaussianFamily``, ...) are defined next to their estimators in
:mod:`jaxcal.calibrators`; their interface is :class:`jaxcal.families.linear.LinearLogitFamily`."""
