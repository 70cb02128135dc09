"""NumPyro building blocks of the score models' ``model`` and ``bayes_prior`` methods.

Every ``model`` observes the labels through the class prior (:func:`observe_labels`) and
the scores through their class-conditional densities (:func:`observe_scores`,
:func:`observe_log_density`), with one parameter per class where a family has them
(:func:`class_sites`); every ``bayes_prior`` with a monotone parameterisation samples one
parameter on one side of a bound (:func:`bounded_site`, :func:`prior_site`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._lazy import lazy_module

numpyro = lazy_module("numpyro")  # imported when a Bayesian model runs
dist = lazy_module("numpyro.distributions")
constraints = lazy_module("numpyro.distributions.constraints")

__all__ = [
    "bounded_site",
    "class_sites",
    "observe_labels",
    "observe_log_density",
    "observe_scores",
    "prior_site",
]


def observe_labels(labels: ArrayLike, sample_weight=None) -> tuple[jax.Array, int]:
    """The class part of every ``model``: ``pi1 ~ Beta(1, 1)``, ``labels ~ Bernoulli(pi1)``
    (weighted like the scores, so that the posterior mode of ``pi1`` is the weighted class
    share, as in ``fit_weighted``).

    Returns:
        ``(labels, n)``: the labels as ``int32`` (to index per-class parameters) and their
        number.
    """
    labels = jnp.asarray(labels).astype(jnp.int32)
    n = labels.shape[0]
    pi1 = numpyro.sample("pi1", dist.Beta(1.0, 1.0))
    if sample_weight is None:
        with numpyro.plate("data", n):
            numpyro.sample("labels", dist.Bernoulli(pi1), obs=labels)
    else:
        loglik = dist.Bernoulli(pi1).log_prob(labels)
        numpyro.factor("labels_loglik", jnp.sum(jnp.asarray(sample_weight) * loglik))
    return labels, n


def class_sites(**priors) -> tuple[jax.Array, ...]:
    """One sample site per ``name=prior``, each ``[2]`` (a value per class: the plate
    ``class``), returned in the order given."""
    with numpyro.plate("class", 2):
        return tuple(numpyro.sample(name, prior) for name, prior in priors.items())


def observe_log_density(log_density: jax.Array, sample_weight=None) -> None:
    """The factor ``scores_loglik``: the (weighted) sum of the scores' ``[n]`` log-densities."""
    w = 1.0 if sample_weight is None else jnp.asarray(sample_weight)
    numpyro.factor("scores_loglik", jnp.sum(w * log_density))


def observe_scores(d, scores, sample_weight, n: int, *, plate: str = "scores_plate") -> None:
    """``scores ~ d`` in a plate of ``n`` (weighted: :func:`observe_log_density`)."""
    if sample_weight is None:
        with numpyro.plate(plate, n):
            numpyro.sample("scores", d, obs=scores)
    else:
        observe_log_density(d.log_prob(scores), sample_weight)


def prior_site(name: str, prior, bound: jax.Array, *, monotone: bool, upper=False):
    """:func:`bounded_site` when ``monotone``, else an unconstrained ``numpyro.sample`` from
    ``prior`` (``bound`` is then unused)."""
    if monotone:
        return bounded_site(name, prior, bound, upper=upper)
    return numpyro.sample(name, prior)


def bounded_site(name: str, prior: dist.Distribution, bound: jax.Array, *, upper=False):
    r"""A scalar parameter constrained to one side of a bound, with its original prior.

    Samples ``{name}_excess`` :math:`\delta > 0` (``ImproperUniform`` on
    ``softplus_positive``: NumPyro samples :math:`x` with :math:`\delta = \log(1 + e^x)`,
    which is linear for large :math:`\delta`, so an inactive constraint leaves the geometry
    nearly as in the unconstrained model; with ``exp`` NUTS needed ~1.5x more leapfrog steps
    on Gaussian data) and sets :math:`x = \text{bound} + \delta`
    (``upper=True``: :math:`x = \text{bound} - \delta`), recorded as the deterministic site
    ``name``, and adds ``prior.log_prob(x)`` as a factor. The map
    :math:`\delta \mapsto x` has unit Jacobian and the bound depends only on parameters
    sampled before, so the joint prior density of :math:`x` and those parameters is the
    original (independent) prior restricted to the constrained set,
    :math:`p(\cdot)\,\mathbf 1[x > \text{bound}]` (up to one normalising constant): the
    constraint is part of the parameterisation and nothing is rejected.

    Args:
        name: site name of the constrained parameter.
        prior: its original prior (an unconstrained-support or positive distribution).
        bound: the bound (a function of earlier sites).
        upper: ``True`` for :math:`x < \text{bound}`.

    Returns:
        The constrained value :math:`x`.
    """
    improper = dist.ImproperUniform(constraints.softplus_positive, (), ())
    excess = numpyro.sample(f"{name}_excess", improper)
    value = numpyro.deterministic(name, bound - excess if upper else bound + excess)
    numpyro.factor(f"{name}_prior", prior.log_prob(value))
    return value
