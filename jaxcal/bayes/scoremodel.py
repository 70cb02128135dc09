r"""Posterior inference for the class-conditional score models (NUTS, SVI).

A score model (:mod:`jaxcal.scoremodels`) describes the class prior :math:`\pi_1` and the
score densities :math:`f_0(s; \eta_0)`, :math:`f_1(s; \eta_1)`; Bayes' rule turns every
parameter value into a calibration map
:math:`\operatorname{logit} P(y=1 \mid s) = \log\frac{\pi_1}{\pi_0} + \log f_1(s) - \log
f_0(s)`. This module puts a posterior on :math:`(\pi_1, \eta_0, \eta_1)`:

.. math::
    p(\pi_1, \eta \mid s, y) \propto p(\pi_1)\, p(\eta)\, \mathbf 1[\eta \in \mathcal M]
    \prod_i \bigl[\pi_{y_i} f_{y_i}(s_i; \eta_{y_i})\bigr]^{w_i},

with :math:`\pi_1 \sim \text{Beta}(1, 1)`, the family's documented priors :math:`p(\eta)`
(those of its ``model`` method; change them through the score model's fields, e.g.
``GaussianScoreModel(loc_scale=3.0)``), sample weights :math:`w_i` as frequency weights
(exactly as the weighted point fit ``fit(..., sample_weight=w)``) and, with
``monotone=True``, the set :math:`\mathcal M` of parameters whose map is non-decreasing on the
training range :math:`[\text{lo}, \text{hi}]`.

**Monotone by parameterisation.** For every family except mixtures, :math:`\mathcal M` is a
one-sided bound on one parameter given the others (the one that enters the logit's
derivative linearly): ``mu1 >= mu0`` (equal-variance Gaussian), ``log_rate1 <= log_rate0``
(exponential), ``mu1 >= max_{s in {lo, hi}} [s + (sd1/sd0)^2 (mu0 - s)]`` (Gaussian),
``beta0 >= max(0, beta1 - min((alpha1 - alpha0)/lo, (alpha1 - alpha0)/hi))`` (Gamma),
``mu1 >= bound`` (Kanoulas, Manmatha); each family's ``monotone_bound`` docstring has the
derivation. The parameter is sampled as ``bound + excess`` (``excess > 0`` on
``ImproperUniform(softplus_positive)``: NumPyro samples its inverse softplus) with the
original prior density as a factor (:func:`~jaxcal.scoremodels._sites.bounded_site`): the
induced prior is exactly the family's prior *conditioned on monotonicity*, every draw is
monotone, and nothing is rejected.
Gaussian mixtures have no such parameterisation (their components' means are ordered instead,
to remove label switching); ``diagnostics()["monotone_share"]`` reports the share of
monotone draws for every family.

**Inference.** NUTS uses :func:`jaxcal.bayes.nuts_chains` (NumPyro's functional NUTS, warm-up
and sampling in one ``lax.scan``, chains mapped by ``map_problems``) on NumPyro's
``potential_energy`` of :func:`scoremodel_bayes_model`; SVI maximises the ELBO of a Gaussian
guide in the unconstrained space (``AutoMultivariateNormal`` or ``AutoNormal``, Adam with
cosine decay); ``subsample_size`` subsamples the data plate, which scales the minibatch
log-likelihood by ``n / subsample_size`` (unbiased for the full-data log-likelihood). The data
are padded as in :mod:`jaxcal.bayes.inference` (entries of weight 0; not for minibatch SVI),
and the score model's real-valued fields (prior scales) are traced: new values compile
nothing.

Example:
    >>> import jax, numpy as np
    >>> from jaxcal.bayes import NUTS
    >>> from jaxcal.scoremodels import GaussianScoreModel
    >>> rng = np.random.default_rng(0)
    >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
    >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
    ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
    >>> mean = post.predict([0.0, 1.0]); lo, hi = post.interval([0.0, 1.0], level=0.9)
    >>> float(post.diagnostics()["monotone_share"])  # monotone by construction
    1.0
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.typing import ArrayLike
from numpyro.distributions.transforms import biject_to
from numpyro.handlers import seed, substitute, trace
from numpyro.infer.initialization import init_to_uniform

from jaxcal._jit import jit
from jaxcal._pytree import (
    join_hyperparameters,
    split_hyperparameters,
)
from jaxcal._validation import (
    check_fit_inputs,
    check_key,
)
from jaxcal.bayes._sampling import (
    INIT_RADIUS,
    is_minibatch,
    key_from_parts,
    key_parts,
    nuts_model_draws,
    padded_data,
    run_config,
    svi_draws,
)
from jaxcal.bayes.methods import NUTS, SVI
from jaxcal.bayes.scoremodel_posterior import ScoreModelPosterior

__all__ = ["ScoreModelPosterior", "fit_scoremodel_bayes", "scoremodel_bayes_model"]

# what a score model provides (jaxcal.scoremodels.ScoreModel); checked by attribute, so that
# this module does not import the score models, whose fit_bayes calls it
_SCORE_MODEL_API = ("bayes_prior", "class_log_density", "log_odds", "_check_support")


class ScoreData(NamedTuple):
    """Training data of one problem: ``[n]`` scores, 0/1 labels and sample weights.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.bayes.scoremodel import ScoreData
        >>> ScoreData(jnp.array([0.2, 1.5]), jnp.array([0.0, 1.0]), jnp.ones(2)).labels.tolist()
        [0.0, 1.0]
    """

    scores: jax.Array
    labels: jax.Array
    weights: jax.Array


def scoremodel_bayes_model(
    score_model: Any,
    data: ScoreData | None,
    *,
    lo: jax.Array,
    hi: jax.Array,
    monotone: bool,
    subsample_size: int | None = None,
) -> None:
    """NumPyro model of a score model's posterior (module docstring).

    Sites: ``pi1 ~ Beta(1, 1)``; the family's parameters (``score_model.bayes_prior``: one
    sample or deterministic site per field of its params class); and the factor ``loglik``
    inside the ``data`` plate, :math:`w_i[\\log \\pi_{y_i} + \\log f_{y_i}(s_i)]`.

    Args:
        score_model: the family (with its prior hyperparameters).
        data: training data, or ``None`` for the prior alone.
        lo, hi: the training score range (where ``monotone`` holds).
        monotone: use the monotone parameterisation.
        subsample_size: minibatch size for SVI (the likelihood is scaled by ``n / size``).

    Example (the log joint density at two parameter values, in one compiled call):
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> from numpyro.infer.util import log_density
        >>> from jaxcal.bayes import scoremodel_bayes_model
        >>> from jaxcal.bayes.scoremodel import ScoreData
        >>> from jaxcal.scoremodels import GaussianScoreModel
        >>> rng = np.random.default_rng(0)
        >>> y = (rng.random(200) < 0.3).astype(np.float32); s = rng.normal(1.5 * y, 1.0)
        >>> data = ScoreData(jnp.asarray(s, jnp.float32), jnp.asarray(y), jnp.ones(200))
        >>> @jax.jit
        ... def log_joint(mu1):
        ...     values = {"pi1": 0.3, "mu0": 0.0, "sd0": 1.0, "mu1": mu1, "sd1": 1.0}
        ...     kw = {"lo": -3.0, "hi": 4.0, "monotone": False}
        ...     return log_density(scoremodel_bayes_model, (GaussianScoreModel(), data), kw,
        ...                        values)[0]
        >>> bool(log_joint(1.5) > log_joint(-1.5))  # the data favour the true mu1 = 1.5
        True
    """
    pi1 = numpyro.sample("pi1", dist.Beta(1.0, 1.0))
    params = score_model.bayes_prior(pi1, lo=lo, hi=hi, monotone=monotone)
    if data is None:
        return
    n = data.scores.shape[0]
    with numpyro.plate("data", n, subsample_size=subsample_size) as idx:
        s, y, w = data.scores[idx], data.labels[idx], data.weights[idx]
        label_lp = jnp.where(y == 1, jnp.log(pi1), jnp.log1p(-pi1))
        numpyro.factor("loglik", w * (label_lp + score_model.class_log_density(params, s, y)))


def _all_sites(model_fn, latent: dict) -> dict:
    """Every sample / deterministic site value given constrained latent values."""
    tr = trace(substitute(model_fn, data=latent)).get_trace()
    return {
        name: site["value"]
        for name, site in tr.items()
        if site["type"] in ("sample", "deterministic") and not site.get("is_observed", False)
    }


def _draws(score_model, prior_fn, latent: dict) -> dict:
    """Draws of the params fields from constrained latent draws (leading axis ``[S]``)."""
    sites = jax.vmap(lambda v: _all_sites(prior_fn, v))(latent)
    return {name: sites[name][None] for name in score_model.draw_names()}  # one "chain"


def _unconstrained_init(prior_fn, key) -> dict:
    """Unconstrained initial values, ``Uniform(-INIT_RADIUS, INIT_RADIUS)`` per coordinate
    (NumPyro's ``init_to_uniform``; improper sites included)."""
    init = init_to_uniform(radius=INIT_RADIUS)
    tr = trace(substitute(seed(prior_fn, key), substitute_fn=init)).get_trace()
    return {
        name: biject_to(site["fn"].support).inv(site["value"])
        for name, site in tr.items()
        if site["type"] == "sample" and not site["is_observed"]
    }


def _nuts(score_model, cfg, tuning, monotone, scores, labels, weights, lo, hi, key):
    data = ScoreData(scores, labels, weights)
    kw = {"lo": lo, "hi": hi, "monotone": monotone}
    model = functools.partial(scoremodel_bayes_model, score_model)
    prior_fn = functools.partial(model, None, **kw)
    k_init, k_run = jax.random.split(key)
    init_keys = jax.random.split(k_init, cfg[0])  # one per chain
    init = jax.vmap(functools.partial(_unconstrained_init, prior_fn))(init_keys)
    sites, stats = nuts_model_draws(
        model, (data,), kw, init, k_run, cfg, tuning, constrain_args=(None,), deterministic=True
    )
    return {name: sites[name] for name in score_model.draw_names()}, stats


def _latent_names(prior_fn, key) -> list[str]:
    tr = trace(substitute(seed(prior_fn, key), substitute_fn=init_to_uniform)).get_trace()
    return [n for n, site in tr.items() if site["type"] == "sample" and not site["is_observed"]]


def _svi(score_model, cfg, tuning, monotone, scores, labels, weights, lo, hi, key):
    data = ScoreData(scores, labels, weights)
    kw = {"lo": lo, "hi": hi, "monotone": monotone}
    model = functools.partial(scoremodel_bayes_model, score_model, subsample_size=cfg[2], **kw)
    latent, losses = svi_draws(model, (data,), cfg, tuning, key)
    prior_fn = functools.partial(scoremodel_bayes_model, score_model, None, **kw)
    k_draw = jax.random.split(key)[1]  # svi_draws' draw key (the same compiled program)
    latent = {name: latent[name] for name in _latent_names(prior_fn, k_draw)}
    return _draws(score_model, prior_fn, latent), {"loss": losses}


@functools.partial(jit, static_argnames=("static", "cfg", "monotone", "kind", "impl"))
def _run(static, hyper, cfg, tuning, monotone, kind, scores, labels, weights, lo, hi, key, impl):
    score_model = join_hyperparameters(static, hyper)  # prior scales traced: no recompile
    key = key_from_parts(key, impl)
    run = _nuts if kind == "nuts" else _svi
    return run(score_model, cfg, tuning, monotone, scores, labels, weights, lo, hi, key)


# ----------------------------------------------------------------------------- public API


def fit_scoremodel_bayes(
    score_model: Any,
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
    key: jax.Array,
    method: NUTS | SVI = NUTS(),  # noqa: B008  (frozen, immutable)
    monotone: bool | None = None,
) -> ScoreModelPosterior:
    """Posterior over a score model's class prior and class-conditional parameters.

    The model (priors, weighted likelihood, monotone parameterisation) is in the module
    docstring and :func:`scoremodel_bayes_model`. Also available as
    ``score_model.fit_bayes(scores, labels, ...)``.

    Args:
        score_model: a score model (``jaxcal.scoremodels.GaussianScoreModel()``, ...); its
            fields are the prior hyperparameters.
        scores: ``[n]`` finite scores in the model's support.
        labels: ``[n]`` 0/1 labels (both classes present).
        sample_weight: optional ``[n]`` non-negative frequency weights (as in ``fit``).
        key: PRNG key (keyword-only, required).
        method: :class:`~jaxcal.bayes.NUTS` (default ``NUTS()``: 4 chains of 1,000 draws
            after 500 warm-up steps, one compiled computation) or
            :class:`~jaxcal.bayes.SVI` (its ``subsample_size`` at most ``n``).
        monotone: build monotonicity on the training range into the parameterisation;
            ``None`` (default) means ``True`` wherever the family has such a
            parameterisation (every family but Gaussian mixtures).

    Returns:
        A :class:`ScoreModelPosterior`.

    Raises:
        ValueError: invalid data (NaN, labels not 0/1, one class, length mismatch, negative
            weights, scores outside the support), ``method``, key, or ``monotone=True`` for a
            family without a monotone parameterisation.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.bayes import NUTS
        >>> from jaxcal.scoremodels import GammaScoreModel
        >>> rng = np.random.default_rng(0)
        >>> y = (rng.random(200) < 0.3).astype(float)
        >>> s = rng.gamma(np.where(y == 1, 4.0, 2.0), 1.0)
        >>> post = GammaScoreModel().fit_bayes(s, y, key=jax.random.key(0),
        ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
        >>> post.draws["alpha1"].shape  # [chains, samples]
        (2, 100)
    """
    if not all(hasattr(score_model, a) for a in _SCORE_MODEL_API):
        raise ValueError(
            f"fit_scoremodel_bayes needs a jaxcal score model; got {type(score_model).__name__}."
        )
    s, y, w = check_fit_inputs(scores, labels, sample_weight)
    score_model._check_support(s)
    name = type(score_model).__name__
    if monotone is None:
        monotone = score_model.monotone_parameterisation
    elif not isinstance(monotone, bool | np.bool_):
        raise ValueError(f"monotone must be True, False or None; got {monotone!r}.")
    monotone = bool(monotone)
    if monotone and not score_model.monotone_parameterisation:
        raise ValueError(
            f"{name} has no monotone parameterisation (a mixture's log-density ratio is not "
            "monotone in general); pass monotone=False and read "
            "diagnostics()['monotone_share']."
        )
    kind, cfg, tuning = run_config(method, s.shape[0], fn="fit_scoremodel_bayes")
    key = check_key(key)
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    pos = w > 0
    lo, hi = (jax.device_put(np.asarray(v, dtype)) for v in (s[pos].min(), s[pos].max()))
    # padded entries: a valid score and label with weight 0 (they add 0 to the likelihood)
    args = padded_data((s, y, w), (s[0], y[0], 0.0), exact=is_minibatch(kind, cfg))
    static, hyper = split_hyperparameters(score_model)
    key_data, impl = key_parts(key)
    draws, stats = _run(
        static, hyper, cfg, tuning, monotone, kind, *args, lo, hi, key_data, impl=impl
    )
    return ScoreModelPosterior(
        draws=draws,
        lo=lo,
        hi=hi,
        stats=stats,
        score_model=score_model,
        method=kind,
        monotone=monotone,
    )
