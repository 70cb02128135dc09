"""Exact fitting: the active-set Newton solver for monotone linear-logit maps
(:mod:`jaxcal.fitting.solver`) and the fits of a family built on it
(:mod:`jaxcal.fitting.linear`); the pool-adjacent-violators algorithm
(:mod:`jaxcal.fitting.pav`) and isotonic regression on it (:mod:`jaxcal.fitting.isotonic`).
Bayesian fitting over the same families is :mod:`jaxcal.bayes`."""
