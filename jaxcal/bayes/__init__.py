"""Bayesian calibration: posteriors over parametric calibration maps (NUTS, SVI), every draw
monotone by construction, and hierarchical (partially pooled) maps across groups.

The inference method is an options object: ``method=NUTS(...)`` (the default, ``NUTS()``)
or ``method=SVI(...)``.

Example (NUTS, 4 chains of 200 draws after 200 warm-up steps, in one compiled call):
    >>> import jax, jaxcal, numpy as np
    >>> from jaxcal.bayes import NUTS
    >>> rng = np.random.default_rng(0)
    >>> scores = rng.normal(size=200)
    >>> labels = rng.random(200) < 1 / (1 + np.exp(-2 * scores))
    >>> post = jaxcal.bayes.fit_bayes(jaxcal.PlattScaling(), scores, labels,
    ...                               key=jax.random.key(0),
    ...                               method=NUTS(n_samples=200, n_warmup=200))
    >>> grid = np.array([-1.0, 0.0, 1.0])
    >>> mean = post.predict(grid); lo, hi = post.interval(grid, level=0.9)
    >>> bool(np.all((lo < mean) & (mean < hi)))  # posterior mean inside the 90% band
    True
    >>> sm_post = jaxcal.scoremodels.GaussianScoreModel().fit_bayes(
    ...     scores, labels, key=jax.random.key(0),
    ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
    >>> type(sm_post).__name__  # score models: a posterior over the class-conditionals
    'ScoreModelPosterior'
"""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "NUTS": "jaxcal.bayes.methods",
        "SVI": "jaxcal.bayes.methods",
        "fit_bayes": "jaxcal.bayes.inference",
        "fit_bayes_batch": "jaxcal.bayes.inference",
        "nuts_chains": "jaxcal.bayes._sampling",
        "Posterior": "jaxcal.bayes.posterior",
        "fit_hierarchical": "jaxcal.bayes.hierarchical",
        "HierarchicalPosterior": "jaxcal.bayes.hierarchical",
        "hierarchical_model": "jaxcal.bayes.hierarchical",
        "default_prior": "jaxcal.bayes.linear",
        "linear_logit_model": "jaxcal.bayes.linear",
        "fit_scoremodel_bayes": "jaxcal.bayes.scoremodel",
        "ScoreModelPosterior": "jaxcal.bayes.scoremodel_posterior",
        "scoremodel_bayes_model": "jaxcal.bayes.scoremodel",
    },
)
