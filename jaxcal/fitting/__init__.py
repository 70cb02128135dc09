"""Exact fitting: the active-set Newton solver for monotone linear-logit maps
(:mod:`jaxcal.fitting.solver`) and the fits of a family built on it
(:mod:`jaxcal.fitting.linear`). Bayesian fitting over the same families is :mod:`jaxcal.bayes`."""
