r"""The NumPyro model of a linear-logit calibration family, monotone by construction.

Every parametric calibrator in jaxcal is a linear-logit family (``jaxcal.families.linear``):
:math:`z = \phi(s)^\top\theta`, monotone on the training range iff :math:`u = M\,\theta_{\rm
slopes} \ge 0`. With :math:`G = \Phi_{\rm slopes} M^{-1}` (one *basis function* per
constraint) the logit is

.. math::  z_i = c + \sum_j G_{ij}\, u_j, \qquad u \in \mathbb{R}^k_{\ge 0},

so a prior supported on :math:`u \ge 0` makes *every* posterior draw a monotone map: the
constraint is part of the parameterisation (NumPyro samples :math:`\log u` through
``biject_to(positive)``), no draw is ever rejected.

**Standardisation.** Priors are placed on a scale-free version of :math:`(u, c)`. With the
(sample-)weighted mean :math:`m_j` and standard deviation :math:`d_j` of the basis function
:math:`G_{\cdot j}` over the training scores,

.. math::  \beta_j = d_j\, u_j \ge 0, \qquad \alpha = c + \sum_j m_j u_j,
    \qquad z_i = \alpha + \sum_j \beta_j\, \frac{G_{ij} - m_j}{d_j},

so :math:`\beta_j` is the change of the logit per standard deviation of its basis function
(for Platt scaling, per standard deviation of the score) and :math:`\alpha` is the logit at
the average basis value. Families without an intercept use :math:`m_j = 0` and the root mean
square for :math:`d_j`. The defaults are weakly informative on this scale (in the spirit of
Gelman et al. 2008, "A weakly informative default prior distribution for logistic
regression"):

.. math::  \beta_j \sim \text{HalfNormal}(5), \qquad \alpha \sim \mathcal N(0, 5^2),

i.e. a logit change of up to ~10 per standard deviation of the score and a base rate anywhere
in (0.00005, 0.99995) are plausible a priori. Replace them with ``prior={"slope": d1,
"intercept": d2}`` (any NumPyro distributions; ``slope`` must be supported on
:math:`[0, \infty)` so that monotonicity is kept).

**Likelihood.** With the loss weighting's targets and weights :math:`(t, w)`
(``jaxcal.losses``) the log-likelihood is the negative weighted logistic loss,

.. math::  \log p(t \mid \theta) = -\sum_i w_i\,[\operatorname{softplus}(z_i) - t_i z_i],

added with ``numpyro.factor``. For 0/1 labels and unit weights it is the Bernoulli
likelihood; with sample weights it treats :math:`w_i` as frequency weights, and with IPS
targets :math:`t_i = Y_i/\omega_i` it is a *pseudo*-likelihood (the generalised-Bayes
posterior of the unbiased IPS loss; its width reflects the total weight, not the IPS
variance). The data plate supports ``subsample_size``: NumPyro then scales the minibatch
log-likelihood by ``n / subsample_size`` so that SVI on minibatches targets the same
posterior as full-batch SVI.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from jaxcal.families.linear import LinearLogitFamily, ScoreRange

__all__ = [
    "Design",
    "default_prior",
    "check_prior",
    "make_design",
    "linear_logit_model",
    "theta_from_standardised",
]

DEFAULT_SLOPE_SCALE = 5.0
DEFAULT_INTERCEPT_SCALE = 5.0


class Design(NamedTuple):
    """A standardised calibration problem (all leaves are arrays; vmap-able).

    Attributes:
        basis: ``[n, k]`` standardised basis functions :math:`(G - m) / d`.
        targets: ``[n]`` loss targets :math:`t`.
        weights: ``[n]`` loss weights :math:`w` (0 for masked padding).
        mean: ``[k]`` weighted means :math:`m` of the basis functions.
        scale: ``[k]`` their weighted standard deviations :math:`d`.
        context: the family's training :class:`ScoreRange`.

    Example:
        >>> import jax.numpy as jnp, jaxcal
        >>> from jaxcal.bayes.linear import make_design
        >>> d = make_design(jaxcal.PlattScaling().family, jnp.array([0.0, 1.0, 2.0]),
        ...                 jnp.array([0.0, 1.0, 1.0]), jnp.ones(3))
        >>> d.basis.shape, d.mean.tolist()  # [n, k]; the mean score
        ((3, 1), [1.0])
    """

    basis: jax.Array
    targets: jax.Array
    weights: jax.Array
    mean: jax.Array
    scale: jax.Array
    context: ScoreRange


def default_prior() -> dict[str, dist.Distribution]:
    """The default weakly-informative priors on the standardised scale (see module doc).

    Example:
        >>> from jaxcal.bayes import default_prior
        >>> p = default_prior()
        >>> type(p["slope"]).__name__, float(p["slope"].scale)
        ('HalfNormal', 5.0)
    """
    return {
        "slope": dist.HalfNormal(DEFAULT_SLOPE_SCALE),
        "intercept": dist.Normal(0.0, DEFAULT_INTERCEPT_SCALE),
    }


def check_prior(prior: dict | None, k: int) -> dict[str, dist.Distribution]:
    """Complete ``prior`` with the defaults and check it eagerly.

    Raises:
        ValueError: unknown keys, non-distributions, a slope prior whose support is not
            within :math:`[0, \\infty)` (draws could then be non-monotone), or shapes that do
            not broadcast to the ``k`` constraint values.

    Example:
        >>> import numpyro.distributions as dist
        >>> from jaxcal.bayes.linear import check_prior
        >>> sorted(check_prior({"slope": dist.LogNormal(0.0, 1.0)}, k=1))  # defaults filled
        ['intercept', 'slope']
        >>> check_prior({"slope": dist.Normal(0.0, 1.0)}, k=1)
        Traceback (most recent call last):
        ...
        ValueError: prior['slope'] must be a continuous distribution on [0, inf) ...
    """
    out = default_prior()
    if prior is None:
        return out
    if not isinstance(prior, dict):
        raise ValueError(f"prior must be a dict of numpyro distributions; got {type(prior)}.")
    unknown = set(prior) - set(out)
    if unknown:
        raise ValueError(f"unknown prior keys {sorted(unknown)}; use 'slope' and 'intercept'.")
    for name, d in prior.items():
        if not isinstance(d, dist.Distribution):
            raise ValueError(f"prior[{name!r}] must be a numpyro distribution; got {d!r}.")
        if d.event_shape != ():
            raise ValueError(f"prior[{name!r}] must be a scalar (univariate) distribution.")
    slope = prior.get("slope", out["slope"])
    lower = getattr(slope.support, "lower_bound", None)
    if lower is None or not bool(np.all(np.asarray(lower) >= 0)) or slope.support.is_discrete:
        raise ValueError(
            "prior['slope'] must be a continuous distribution on [0, inf) (e.g. HalfNormal, "
            f"LogNormal, Gamma, Exponential); got support {slope.support}. A prior with "
            "negative values would allow non-monotone calibration maps."
        )
    try:
        np.broadcast_shapes(slope.batch_shape, (k,))
    except ValueError:
        raise ValueError(
            f"prior['slope'] has batch shape {slope.batch_shape}; it must broadcast to ({k},)."
        ) from None
    if prior.get("intercept", out["intercept"]).batch_shape != ():
        raise ValueError("prior['intercept'] must have batch shape ().")
    out.update(prior)
    return out


def _basis(family: LinearLogitFamily, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
    """Raw basis :math:`G = \\Phi_{\\rm slopes} M^{-1}` (``[..., k]``)."""
    X = family.features(scores, ctx)
    slopes = np.array(family.slope_indices, dtype=int)
    Minv = jnp.linalg.inv(family.slope_map(ctx))
    return X[..., slopes] @ Minv


def make_design(family: LinearLogitFamily, scores, targets, weights) -> Design:
    """Standardised design of one problem (pure; masked entries have weight 0).

    Example:
        >>> import jax.numpy as jnp, jaxcal
        >>> from jaxcal.bayes.linear import make_design
        >>> d = make_design(jaxcal.PlattScaling().family, jnp.array([0.0, 1.0, 2.0, 9.0]),
        ...                 jnp.array([0.0, 1.0, 1.0, 0.0]), jnp.array([1.0, 1.0, 1.0, 0.0]))
        >>> d.basis[:3, 0].tolist()  # standardised over the weighted entries only
        [-1.2247, 0.0, 1.2247]
    """
    ctx = family.context(scores, weights)
    s = jnp.where(weights > 0, scores, ctx.lo)
    G = _basis(family, s, ctx)
    total = jnp.sum(weights)
    if family.intercept_index is not None:
        mean = weights @ G / total
        var = weights @ (G - mean) ** 2 / total
    else:
        mean = jnp.zeros(G.shape[-1], G.dtype)
        var = weights @ G**2 / total
    scale = jnp.sqrt(var)
    scale = jnp.where(scale > 0, scale, 1.0)
    basis = (G - mean) / scale
    return Design(basis, targets, weights, mean, scale, ctx)


def linear_logit_model(
    design: Design,
    *,
    prior: dict[str, dist.Distribution],
    has_intercept: bool,
    subsample_size: int | None = None,
) -> None:
    """NumPyro model of a linear-logit calibration map (standardised coordinates).

    Sites: ``slope`` (:math:`\\beta \\ge 0`, ``[k]``), ``intercept`` (:math:`\\alpha`, only
    for families with an intercept) and the factor ``loglik`` inside the ``data`` plate.

    Args:
        design: the standardised problem (:func:`make_design`).
        prior: ``{"slope": ..., "intercept": ...}`` (see :func:`check_prior`).
        has_intercept: whether the family has an intercept.
        subsample_size: minibatch size for SVI (the likelihood is scaled by ``n / size``).

    Example (the potential energy that NUTS samples, at one point, in one compiled call):
        >>> import jax, jax.numpy as jnp, jaxcal
        >>> from numpyro.infer.util import potential_energy
        >>> from jaxcal.bayes import default_prior, linear_logit_model
        >>> from jaxcal.bayes.linear import make_design
        >>> @jax.jit
        ... def potential(z):
        ...     d = make_design(jaxcal.PlattScaling().family, jnp.array([0.0, 1.0, 2.0]),
        ...                     jnp.array([0.0, 1.0, 1.0]), jnp.ones(3))
        ...     kw = {"prior": default_prior(), "has_intercept": True}
        ...     return potential_energy(linear_logit_model, (d,), kw, z)
        >>> z = {"slope": jnp.zeros(1), "intercept": jnp.zeros(())}  # unconstrained values
        >>> bool(jnp.isfinite(potential(z)))
        True
    """
    n, k = design.basis.shape
    slope_prior = prior["slope"].expand((k,)).to_event(1)
    beta = numpyro.sample("slope", slope_prior)
    alpha = numpyro.sample("intercept", prior["intercept"]) if has_intercept else 0.0
    with numpyro.plate("data", n, subsample_size=subsample_size) as idx:
        z = alpha + design.basis[idx] @ beta
        t, w = design.targets[idx], design.weights[idx]
        numpyro.factor("loglik", -w * (jax.nn.softplus(z) - t * z))


def theta_from_standardised(
    family: LinearLogitFamily, beta: jax.Array, alpha: jax.Array, design: Design
) -> jax.Array:
    """Map one draw :math:`(\\beta, \\alpha)` to the family's coefficients :math:`\\theta`.

    Example:
        >>> import jax.numpy as jnp, jaxcal
        >>> from jaxcal.bayes.linear import make_design, theta_from_standardised
        >>> fam = jaxcal.PlattScaling().family
        >>> d = make_design(fam, jnp.array([0.0, 1.0, 2.0]), jnp.array([0.0, 1.0, 1.0]),
        ...                 jnp.ones(3))
        >>> theta = theta_from_standardised(fam, jnp.array([1.0]), jnp.array(0.0), d)
        >>> [round(float(v), 4) for v in theta]  # logit = (s - 1) / sd(s): a = 1.2247
        [1.2247, -1.2247]
    """
    u = beta / design.scale
    c = alpha - design.mean @ u
    return family.theta_from_u(u, c, design.context)
