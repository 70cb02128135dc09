r"""Posterior inference for linear-logit calibration maps: NUTS (batched chains) and SVI.

NUTS is NumPyro's sampler (Hoffman and Gelman 2014, with NumPyro's windowed step-size and
mass-matrix adaptation) driven through its functional interface
``numpyro.infer.hmc.hmc(potential_fn)``: one chain is ``init_kernel`` followed by a
``lax.scan`` of ``sample_kernel``, a pure function of its key and data. Chains are mapped
over keys, and :func:`fit_bayes_batch` maps over problems too (:func:`map_problems`: a
``vmap`` on accelerators, a sequential ``lax.map`` on CPU), so ``B`` independent posteriors
with ``C`` chains each are *one* compiled XLA call. The
potential is NumPyro's ``potential_energy`` of :func:`~jaxcal.bayes.linear.linear_logit_model`
(declared constraints, ``biject_to`` to unconstrained space, log-Jacobians included).

SVI maximises the ELBO (``Trace_ELBO``) of a Gaussian guide in the unconstrained space
(``AutoMultivariateNormal`` by default, ``AutoNormal`` for the mean-field guide) with Adam on
a cosine-decaying learning rate. ``subsample_size`` turns on minibatches: the data plate
then scales the minibatch log-likelihood by ``n / subsample_size`` (unbiased for the
full-data log-likelihood), so minibatch and full-batch SVI target the same posterior.

**Shapes.** The data are padded to their bucket size (``jaxcal._shapes``) with entries of
weight 0, which add exactly 0 to the log-likelihood, so a new data size inside a bucket
reuses the compiled sampler. The sums of the log density then run over more (zero) terms,
which may change their float rounding; a chain is a long deterministic recursion, so its
draws agree with the unpadded ones only up to the effect of such rounding (the target
density is the same). Minibatch SVI (``subsample_size``) is not padded: its minibatches
are drawn from the rows, and padding would change them. The number of chains, warm-up steps
and draws, the tree depth, the mass matrix kind and the SVI steps and guide fix the program
(static); ``target_accept_prob``, ``learning_rate`` and the prior's parameters are traced
(new values compile nothing).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._fitdata import prepare_fit, prepare_fit_batch
from jaxcal._jit import jit
from jaxcal._validation import check_key
from jaxcal.bayes._sampling import (
    is_minibatch,
    key_from_parts,
    key_parts,
    map_problems,
    nuts_model_draws,
    padded_data,
    run_config,
    svi_draws,
    uniform_init,
)
from jaxcal.bayes.linear import (
    Design,
    check_prior,
    linear_logit_model,
    make_design,
    theta_from_standardised,
)
from jaxcal.bayes.methods import NUTS, SVI
from jaxcal.bayes.posterior import Posterior
from jaxcal.families.linear import LinearLogitFamily

__all__ = ["fit_bayes", "fit_bayes_batch", "family_of"]


def _model_kwargs(family, prior, subsample_size=None):
    return {
        "prior": prior,
        "has_intercept": family.intercept_index is not None,
        "subsample_size": subsample_size,
    }


def _thetas(family, design, draws):
    """``[..., p]`` coefficients from constrained standardised draws (leading axes any)."""
    beta = draws["slope"]
    alpha = draws.get("intercept", jnp.zeros(beta.shape[:-1], beta.dtype))
    lead = beta.shape[:-1]
    f = jax.vmap(lambda b, a: theta_from_standardised(family, b, a, design))
    theta = f(beta.reshape(-1, beta.shape[-1]), alpha.reshape(-1))
    return theta.reshape(lead + theta.shape[-1:])


def _nuts_problem(family, cfg, tuning, scores, targets, weights, prior, key):
    """One problem: design, ``C`` chains, coefficients ``[C, S, p]``."""
    design = make_design(family, scores, targets, weights)
    k_init, k_run = jax.random.split(key)
    # one key per site of the model with intercept, so that the slope's start is the same
    # with or without one
    shapes = {"slope": (design.basis.shape[-1],), "intercept": ()}
    init = uniform_init(k_init, shapes, cfg[0], design.basis.dtype)
    if family.intercept_index is None:
        del init["intercept"]
    kw = _model_kwargs(family, prior)
    draws, stats = nuts_model_draws(linear_logit_model, (design,), kw, init, k_run, cfg, tuning)
    return _thetas(family, design, draws), design.context, stats


@functools.partial(jit, static_argnames=("family", "cfg", "impl"))
def _nuts_batch(family, cfg, impl, tuning, scores, targets, weights, prior, key_data):
    keys = key_from_parts(key_data, impl)

    def one(s, t, w, key):
        return _nuts_problem(family, cfg, tuning, s, t, w, prior, key)

    return map_problems(one, (scores, targets, weights, keys))


def _svi_problem(family, cfg, tuning, scores, targets, weights, prior, key):
    """One problem: SVI on the standardised model, then ``S`` guide draws ``[1, S, p]``."""
    design = make_design(family, scores, targets, weights)
    model = functools.partial(linear_logit_model, **_model_kwargs(family, prior, cfg[2]))
    draws, losses = svi_draws(model, (design,), cfg, tuning, key)
    draws = {name: v[None] for name, v in draws.items() if name in ("slope", "intercept")}
    return _thetas(family, design, draws), design.context, {"loss": losses}


@functools.partial(jit, static_argnames=("family", "cfg", "impl", "kind"))
def _fit_single(family, cfg, impl, tuning, scores, targets, weights, prior, key_data, *, kind):
    problem = _nuts_problem if kind == "nuts" else _svi_problem
    key = key_from_parts(key_data, impl)
    return problem(family, cfg, tuning, scores, targets, weights, prior, key)


@functools.partial(jit, static_argnames=("family", "cfg", "impl"))
def _svi_batch(family, cfg, impl, tuning, scores, targets, weights, prior, key_data):
    keys = key_from_parts(key_data, impl)
    f = functools.partial(_svi_problem, family, cfg, tuning)
    return jax.vmap(f, in_axes=(0, 0, 0, None, 0))(scores, targets, weights, prior, keys)


# ----------------------------------------------------------------------------- public API


def family_of(calibrator) -> LinearLogitFamily:
    """The linear-logit family of an estimator (``PlattScaling()``...) or a family itself.

    Raises:
        ValueError: ``calibrator`` is neither a parametric calibrator nor a family.

    Example:
        >>> import jaxcal
        >>> from jaxcal.bayes.inference import family_of
        >>> fam = family_of(jaxcal.PlattScaling())
        >>> fam.param_names, family_of(fam) is fam
        (('a', 'b'), True)
    """
    if isinstance(calibrator, LinearLogitFamily):
        return calibrator
    family = getattr(calibrator, "family", None)
    if not isinstance(family, LinearLogitFamily):
        raise ValueError(
            "fit_bayes needs a parametric calibrator (PlattScaling, TemperatureScaling, "
            "BetaCalibration, GaussianCalibration, GammaCalibration, ExponentialCalibration) "
            f"or its family; got {type(calibrator).__name__}."
        )
    return family


def fit_bayes(
    calibrator,
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
    propensity: ArrayLike | None = None,
    loss: str = "naive",
    key: jax.Array,
    method: NUTS | SVI = NUTS(),  # noqa: B008  (frozen, immutable)
    prior: dict | None = None,
) -> Posterior:
    r"""Posterior over a parametric calibration map (every draw monotone on the score range).

    The model, priors and likelihood are documented in :mod:`jaxcal.bayes.linear`:
    :math:`P(y=1\mid s) = \sigma(\phi(s)^\top\theta)` with
    :math:`\theta` parameterised by constraint values :math:`u \ge 0` and an intercept,
    standardised priors :math:`\beta_j = d_j u_j \sim \text{HalfNormal}(5)`,
    :math:`\alpha \sim \mathcal N(0, 25)`, and the (IPS-)weighted logistic log-likelihood.

    Args:
        calibrator: a parametric estimator (``jaxcal.PlattScaling()``, ...) or its family.
            Only its family is used (``l2`` is replaced by the prior).
        scores: ``[n]`` finite scores.
        labels: ``[n]`` 0/1 labels.
        sample_weight: optional ``[n]`` non-negative weights (frequency weights in the
            likelihood: their total sets the amount of information).
        propensity: optional ``[n]`` propensities in (0, 1] (needed unless ``loss="naive"``).
        loss: loss weighting (``jaxcal.losses``): the likelihood is
            :math:`-\sum_i w_i[\operatorname{softplus}(z_i) - t_i z_i]`.
        key: PRNG key (keyword-only, required).
        method: :class:`~jaxcal.bayes.NUTS` (default ``NUTS()``: 4 chains of 1,000 draws
            after 500 warm-up steps, run in one compiled computation) or
            :class:`~jaxcal.bayes.SVI` (its ``subsample_size`` at most ``n``).
        prior: optional ``{"slope": dist, "intercept": dist}`` replacing the defaults
            (standardised scale; ``slope`` supported on ``[0, inf)``).

    Returns:
        A :class:`~jaxcal.bayes.Posterior` (draws ``[chains, samples]``; SVI: one "chain"
        of guide draws).

    Raises:
        ValueError: invalid data (NaN, labels not 0/1, one class, ...), ``method`` (not a
            ``NUTS`` / ``SVI``, a ``subsample_size`` above ``n``), prior or key.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import NUTS, fit_bayes
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
        >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
        ...                  method=NUTS(n_samples=200, n_warmup=200))
        >>> post.draws["a"].shape  # [chains, samples] draws of the slope
        (4, 200)
        >>> lo, hi = post.interval([0.0, 1.0], level=0.9)  # 90% credible band of P(y=1|s)
        >>> post.diagnostics()["divergences"]
        0
    """
    family = family_of(calibrator)
    data = prepare_fit(
        scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
    )
    family.check_scores(data.scores, data.weights)
    kind, cfg, tuning = run_config(method, data.scores.shape[0], fn="fit_bayes")
    prior = check_prior(prior, len(family.slope_indices))
    key = check_key(key)
    # padded entries: a valid score, target 0, weight 0 (they add 0 to the log-likelihood)
    arrays = (data.scores, data.targets, data.weights)
    fills = (data.scores[0], 0.0, 0.0)
    args = padded_data(arrays, fills, exact=is_minibatch(kind, cfg))
    key_data, impl = key_parts(key)
    theta, ctx, stats = _fit_single(family, cfg, impl, tuning, *args, prior, key_data, kind=kind)
    return Posterior(theta=theta, context=ctx, stats=stats, family=family, method=kind)


def fit_bayes_batch(
    calibrator,
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    group: ArrayLike | None = None,
    sample_weight: ArrayLike | None = None,
    propensity: ArrayLike | None = None,
    loss: str = "naive",
    key: jax.Array,
    method: NUTS | SVI = NUTS(),  # noqa: B008  (frozen, immutable)
    prior: dict | None = None,
) -> Posterior:
    """``B`` independent posteriors in one compiled call.

    Inputs are ``[B, n]`` arrays with an optional boolean ``mask`` (ragged problems; masked
    entries get weight 0), or 1-D arrays with integer ``group`` ids (row ``g`` is the
    ``g``-th smallest id). Problem ``b`` uses the key ``jax.random.split(key, B)[b]``, so the
    result equals a Python loop of :func:`fit_bayes` calls with those keys. ``method`` and
    ``prior`` are :func:`fit_bayes`'s (an ``SVI``'s ``subsample_size`` indexes the padded
    rows).

    Returns:
        A :class:`~jaxcal.bayes.Posterior` with batch shape ``(B,)``:
        ``theta`` is ``[B, chains, samples, p]`` and ``predict`` takes ``[B, m]`` scores.

    Raises:
        ValueError: invalid inputs (per problem: one class only, all scores equal...),
            ``method``, prior or key.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import NUTS, fit_bayes_batch
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=(3, 100))  # 3 problems of 100 scores
        >>> y = rng.random((3, 100)) < 1 / (1 + np.exp(-2 * s))
        >>> post = fit_bayes_batch(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
        ...                        method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
        >>> post.batch_shape, post.theta.shape  # [B, chains, samples, p]
        ((3,), (3, 2, 100, 2))
        >>> post.predict(np.zeros((3, 1))).shape  # P(y=1 | s=0) of each problem
        (3, 1)
    """
    family = family_of(calibrator)
    s, t, w = prepare_fit_batch(
        scores,
        labels,
        mask=mask,
        group=group,
        sample_weight=sample_weight,
        propensity=propensity,
        loss=loss,
    )
    family.check_scores_batch(s, w)
    kind, cfg, tuning = run_config(method, s.shape[1], fn="fit_bayes_batch")
    prior = check_prior(prior, len(family.slope_indices))
    keys = jax.random.split(check_key(key), s.shape[0])
    # entries padded like masked ones: score 0, target 0, weight 0 (the batch axis is not
    # padded: every problem costs a full sampler run)
    args = padded_data((s, t, w), (0.0,) * 3, axis=1, exact=is_minibatch(kind, cfg))
    run = _nuts_batch if kind == "nuts" else _svi_batch
    key_data, impl = key_parts(keys)
    theta, ctx, stats = run(family, cfg, impl, tuning, *args, prior, key_data)
    return Posterior(theta=theta, context=ctx, stats=stats, family=family, method=kind)


def design_of(calibrator, scores, targets, weights) -> Design:
    """The standardised design of one problem (for inspection and tests).

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.bayes.inference import design_of
        >>> d = design_of(jaxcal.PlattScaling(), [0.0, 1.0, 2.0], [0, 1, 1], np.ones(3))
        >>> d.basis[:, 0].tolist()  # the scores, standardised
        [-1.2247, 0.0, 1.2247]
    """
    dtype = jnp.asarray(0.0).dtype
    args = [jnp.asarray(a, dtype) for a in (scores, targets, weights)]
    return _design(family_of(calibrator), *args)


_design = jit(make_design, static_argnames=("family",))  # one program, not op by op
