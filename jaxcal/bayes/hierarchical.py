r"""Hierarchical calibration: partially pooled calibration maps across groups.

The same score can mean 30% for one user and 90% for another; with little data per group an
independent map per group is noisy and one global map ignores the difference. Partial
pooling (Gelman et al., BDA3 ch. 5; the non-centred form of Papaspiliopoulos, Roberts and
Sköld 2007) lets a small group borrow strength from the others. For group :math:`g` with
standardised constraint values :math:`\beta_g \ge 0` and intercept :math:`\alpha_g` (the
coordinates of :mod:`jaxcal.bayes.linear`, standardised over *all* groups' scores, so that
every group's map is monotone on the common score range):

.. math::
    \log\beta_{gj} = \mu_j + \tau_j\,\varepsilon_{gj}, \qquad
    \alpha_g = \mu_\alpha + \tau_\alpha\,\eta_g, \qquad
    \varepsilon_{gj}, \eta_g \sim \mathcal N(0, 1),

.. math::
    \mu_j \sim \mathcal N(0, 1.5^2), \quad \mu_\alpha \sim \mathcal N(0, 5^2), \quad
    \tau_j, \tau_\alpha \sim \text{HalfNormal}(1),

and :math:`z_i = \alpha_{g_i} + \sum_j \beta_{g_i j}\,\tilde G_{ij}` with the weighted
logistic log-likelihood of the point fit. :math:`\tau \to 0` is one global map,
:math:`\tau \to \infty` independent maps; the data choose in between. Every draw of every
group is monotone (:math:`\beta = e^{(\cdot)} > 0`). Sampling is NUTS on the non-centred
parameters (:func:`jaxcal.bayes.nuts_chains`).

Example (5 groups whose maps differ by a shift of the logit):
    >>> import jax, jaxcal, numpy as np
    >>> from jaxcal.bayes import NUTS, fit_hierarchical
    >>> rng = np.random.default_rng(0)
    >>> user_ids = rng.integers(0, 5, 200); scores = rng.normal(size=200)
    >>> labels = rng.random(200) < 1 / (1 + np.exp(-(2 * scores + user_ids - 2)))
    >>> post = fit_hierarchical(jaxcal.PlattScaling(), scores, labels, group=user_ids,
    ...                         key=jax.random.key(0),
    ...                         method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
    >>> p = post.predict(np.zeros(5), group=np.arange(5))  # P(y=1 | s=0) of each group
    >>> bool(np.all(np.diff(p) > 0))  # the groups' offsets, in order
    True
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.typing import ArrayLike

# jaxcal.debias imports calibrators._base; importing it first keeps the import order acyclic.
from jaxcal import _shapes
from jaxcal._fitdata import maybe_check_scores, prepare_fit
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_groups, check_key
from jaxcal.bayes._sampling import (
    key_from_parts,
    key_parts,
    nuts_model_draws,
    padded_data,
    run_config,
    uniform_init,
)
from jaxcal.bayes.inference import family_of
from jaxcal.bayes.linear import Design, make_design, theta_from_standardised
from jaxcal.bayes.methods import NUTS
from jaxcal.bayes.posterior import Posterior, credible_quantiles, split_bounds

__all__ = ["fit_hierarchical", "hierarchical_model", "HierarchicalPosterior"]

HYPER_SLOPE_LOC_SCALE = 1.5
HYPER_INTERCEPT_SCALE = 5.0
HYPER_TAU_SCALE = 1.0
_CHUNK = 512


def hierarchical_model(
    design: Design, rows: jax.Array, n_groups: int, *, has_intercept: bool
) -> None:
    """NumPyro model of partially pooled linear-logit maps (non-centred; module docstring).

    Args:
        design: the standardised design of all groups' data together.
        rows: ``[n]`` group row of each entry (``0 .. n_groups - 1``).
        n_groups: number of groups ``G`` (static).
        has_intercept: whether the family has an intercept.

    Example (a draw of the model's sites for 2 groups, in one compiled call):
        >>> import jax, jax.numpy as jnp, jaxcal
        >>> from numpyro.handlers import seed, trace
        >>> from jaxcal.bayes import hierarchical_model
        >>> from jaxcal.bayes.linear import make_design
        >>> @jax.jit
        ... def slopes(key):
        ...     d = make_design(jaxcal.PlattScaling().family, jnp.arange(4.0),
        ...                     jnp.array([0.0, 1.0, 0.0, 1.0]), jnp.ones(4))
        ...     rows = jnp.array([0, 0, 1, 1])  # the group row of each entry
        ...     tr = trace(seed(hierarchical_model, key)).get_trace(d, rows, 2, has_intercept=True)
        ...     return tr["slope"]["value"]
        >>> beta = slopes(jax.random.key(0))  # [G, k]: one slope per group, > 0 (monotone)
        >>> beta.shape, bool(jnp.all(beta > 0))
        ((2, 1), True)
    """
    k = design.basis.shape[-1]
    mu = numpyro.sample(
        "mu_slope", dist.Normal(0.0, HYPER_SLOPE_LOC_SCALE).expand((k,)).to_event(1)
    )
    tau = numpyro.sample("tau_slope", dist.HalfNormal(HYPER_TAU_SCALE).expand((k,)).to_event(1))
    with numpyro.plate("groups", n_groups):
        eps = numpyro.sample("eps_slope", dist.Normal(0.0, 1.0).expand((k,)).to_event(1))
        if has_intercept:
            eta = numpyro.sample("eps_intercept", dist.Normal(0.0, 1.0))
    beta = numpyro.deterministic("slope", jnp.exp(mu + tau * eps))  # [G, k] > 0: monotone
    if has_intercept:
        mu_a = numpyro.sample("mu_intercept", dist.Normal(0.0, HYPER_INTERCEPT_SCALE))
        tau_a = numpyro.sample("tau_intercept", dist.HalfNormal(HYPER_TAU_SCALE))
        alpha = numpyro.deterministic("intercept", mu_a + tau_a * eta)
    else:
        alpha = jnp.zeros(n_groups, design.basis.dtype)
    z = alpha[rows] + jnp.sum(design.basis * beta[rows], axis=-1)
    with numpyro.plate("data", design.basis.shape[0]):
        numpyro.factor("loglik", -design.weights * (jax.nn.softplus(z) - design.targets * z))


def _latent_shapes(k: int, G: int, has_intercept: bool) -> dict[str, tuple[int, ...]]:
    shapes = {"mu_slope": (k,), "tau_slope": (k,), "eps_slope": (G, k)}
    if has_intercept:
        shapes.update(mu_intercept=(), tau_intercept=(), eps_intercept=(G,))
    return shapes


@functools.partial(jit, static_argnames=("family", "cfg", "n_groups", "impl"))
def _fit(family, cfg, n_groups, impl, tuning, scores, targets, weights, rows, key_data):
    key = key_from_parts(key_data, impl)
    design = make_design(family, scores, targets, weights)
    has_c = family.intercept_index is not None
    args, kw = (design, rows, n_groups), {"has_intercept": has_c}
    k_init, k_run = jax.random.split(key)
    dtype = design.basis.dtype
    shapes = _latent_shapes(design.basis.shape[-1], n_groups, has_c)
    init = uniform_init(k_init, shapes, cfg[0], dtype)
    draws, stats = nuts_model_draws(  # leaves [C, S, ...]
        hierarchical_model, args, kw, init, k_run, cfg, tuning, deterministic=True
    )
    beta = draws["slope"]  # [C, S, G, k]
    alpha = draws["intercept"] if has_c else jnp.zeros(beta.shape[:-1], dtype)
    one = functools.partial(theta_from_standardised, family, design=design)
    f = lambda b, a: one(b, a)  # noqa: E731
    for _ in range(3):
        f = jax.vmap(f)
    theta = jnp.moveaxis(f(beta, alpha), 2, 0)  # [G, C, S, p]
    hyper = {n: draws[n] for n in ("mu_slope", "tau_slope", "mu_intercept", "tau_intercept")
             if n in draws}  # fmt: skip
    return theta, design.context, hyper, stats


@functools.partial(jit, static_argnames=("family", "what"))
def _entry_summaries(family, theta, ctx, scores, rows, qs, *, what):
    th = theta.reshape(theta.shape[0], -1, theta.shape[-1])  # [G, D, p]

    def one(args):
        s, r = args
        p = jax.nn.sigmoid(th[r] @ family.features(s, ctx))  # [D]
        return jnp.mean(p) if what == "mean" else jnp.quantile(p, qs)

    return jax.lax.map(one, (scores, rows), batch_size=_CHUNK)


@pytree_dataclass
class HierarchicalPosterior:
    """Posterior of partially pooled calibration maps (see the module docstring).

    Attributes:
        groups: per-group posterior (a :class:`~jaxcal.bayes.posterior.Posterior` with
            batch shape ``(G,)``; row ``g`` is group ``group_ids[g]``).
        group_ids: ``[G]`` sorted group ids.
        hyper: population draws ``mu_slope`` / ``tau_slope`` (``[C, S, k]``) and
            ``mu_intercept`` / ``tau_intercept`` (``[C, S]``), standardised scale.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import NUTS, fit_hierarchical
        >>> rng = np.random.default_rng(0)
        >>> g = rng.integers(0, 5, 200); s = rng.normal(size=200)
        >>> y = rng.random(200) < 1 / (1 + np.exp(-(2 * s + g - 2)))
        >>> post = fit_hierarchical(jaxcal.PlattScaling(), s, y, group=g, key=jax.random.key(0),
        ...                         method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
        >>> post.group_ids.tolist(), post.groups.batch_shape
        ([0, 1, 2, 3, 4], (5,))
        >>> post.hyper["tau_intercept"].shape  # [chains, samples]
        (2, 100)
    """

    groups: Posterior
    group_ids: jax.Array
    hyper: dict
    method: str = static_field(default="hierarchical-nuts")

    def _rows(self, scores, group) -> tuple[jax.Array, jax.Array]:
        s = np.asarray(maybe_check_scores(scores), np.float64).reshape(-1)
        g = check_groups(group, s.shape[0])
        ids = np.asarray(self.group_ids)
        rows = np.searchsorted(ids, g)
        rows = np.minimum(rows, ids.size - 1)
        unknown = ids[rows] != g
        if unknown.any():
            raise ValueError(
                f"group ids {sorted(set(np.asarray(g)[unknown].tolist()))[:5]} were not in the "
                "training data; this posterior only predicts for its training groups."
            )
        return s.astype(self.groups.theta.dtype), rows.astype(np.int32)

    def _summaries(self, scores: ArrayLike, group: ArrayLike, qs, what: str) -> jax.Array:
        """Per-entry summaries through one compiled call per size bucket: the entries are
        padded (``jaxcal._shapes``) with copies of the first, and sliced off on the host."""
        s, rows = self._rows(scores, group)
        n = s.shape[0]
        fills = (s[0], rows[0]) if n else (0.0, 0)
        s, rows = _shapes.pad_rows(_shapes.padded_size(n), s, rows, fills=fills)
        ctx = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], self.groups.context)
        fam, theta = self.groups.family, self.groups.theta
        return _shapes.unpad(_entry_summaries(fam, theta, ctx, s, rows, qs, what=what), n)

    def predict(self, scores: ArrayLike, group: ArrayLike) -> jax.Array:
        """Posterior mean probability of each entry under its group's map (``[n]``).

        Raises:
            ValueError: invalid scores, or a group id not seen in training.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_hierarchical
            >>> rng = np.random.default_rng(0)
            >>> g = rng.integers(0, 5, 200); s = rng.normal(size=200)
            >>> y = rng.random(200) < 1 / (1 + np.exp(-(2 * s + g - 2)))
            >>> post = fit_hierarchical(jaxcal.PlattScaling(), s, y, group=g, key=jax.random.key(0),
            ...                         method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> p = post.predict(np.zeros(5), group=np.arange(5))  # P(y=1 | s=0) per group
            >>> bool(np.all(np.diff(p) > 0))  # the groups' offsets, in order
            True
        """
        return self._summaries(scores, group, None, "mean")

    def interval(
        self, scores: ArrayLike, group: ArrayLike, level: float = 0.9
    ) -> tuple[jax.Array, jax.Array]:
        """Equal-tailed credible interval per entry: ``(lower, upper)``, each ``[n]``.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_hierarchical
            >>> rng = np.random.default_rng(0)
            >>> g = rng.integers(0, 5, 200); s = rng.normal(size=200)
            >>> y = rng.random(200) < 1 / (1 + np.exp(-(2 * s + g - 2)))
            >>> post = fit_hierarchical(jaxcal.PlattScaling(), s, y, group=g, key=jax.random.key(0),
            ...                         method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> lo, hi = post.interval([0.0, 0.0], group=[0, 4], level=0.9)
            >>> bool(np.all(lo < hi)), bool(hi[0] < lo[1])  # group 4's band above group 0's
            (True, True)
        """
        qs = credible_quantiles(level, self.groups.theta.dtype)
        return split_bounds(self._summaries(scores, group, qs, "q"))

    def diagnostics(self) -> dict:
        """Per-group coefficient diagnostics (``[G]`` arrays, as ``Posterior.diagnostics``)
        plus split-R-hat / ESS of the population parameters (``"hyper"``).

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_hierarchical
            >>> rng = np.random.default_rng(0)
            >>> g = rng.integers(0, 5, 200); s = rng.normal(size=200)
            >>> y = rng.random(200) < 1 / (1 + np.exp(-(2 * s + g - 2)))
            >>> post = fit_hierarchical(jaxcal.PlattScaling(), s, y, group=g, key=jax.random.key(0),
            ...                         method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> d = post.diagnostics()
            >>> d["r_hat"]["a"].shape, sorted(d["hyper"])  # per group; population parameters
            ((5,), ['mu_intercept', 'mu_slope', 'tau_intercept', 'tau_slope'])
        """
        from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

        out = self.groups.diagnostics()
        out["divergences"] = int(np.sum(np.asarray(self.groups.stats["diverging"])[0]))
        hyper = {}
        for name, v in self.hyper.items():
            v = np.asarray(v).reshape(v.shape[0], v.shape[1], -1)
            hyper[name] = {
                "r_hat": [float(split_gelman_rubin(v[..., j])) for j in range(v.shape[-1])],
                "ess": [float(effective_sample_size(v[..., j])) for j in range(v.shape[-1])],
            }
        out["hyper"] = hyper
        return out


def fit_hierarchical(
    calibrator,
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    group: ArrayLike,
    sample_weight: ArrayLike | None = None,
    propensity: ArrayLike | None = None,
    loss: str = "naive",
    key: jax.Array,
    method: NUTS = NUTS(),  # noqa: B008  (frozen, immutable)
) -> HierarchicalPosterior:
    """Partially pooled calibration maps across groups (NUTS; model in the module doc).

    Args:
        calibrator: a parametric estimator (``jaxcal.PlattScaling()``,
            ``jaxcal.GaussianCalibration()``, ...) or its family.
        scores, labels: ``[n]`` training data of all groups.
        group: ``[n]`` integer group ids (users, segments, fields).
        sample_weight, propensity, loss: as in the point fit (``jaxcal.losses``).
        key: PRNG key (keyword-only, required).
        method: the sampler settings, :class:`~jaxcal.bayes.NUTS` (NUTS only: an ``SVI``
            raises).

    Returns:
        A :class:`HierarchicalPosterior`; ``predict(scores, group)`` / ``interval``.

    Raises:
        ValueError: invalid data (pooled over groups: NaN, labels not 0/1, one class overall,
            bad group ids, ...), ``method`` (not a ``NUTS``) or key. A group with one class
            only is fine: it borrows the slope from the population.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import NUTS, fit_hierarchical
        >>> rng = np.random.default_rng(0)
        >>> g = rng.integers(0, 5, 200); s = rng.normal(size=200)
        >>> y = rng.random(200) < 1 / (1 + np.exp(-(2 * s + g - 2)))
        >>> post = fit_hierarchical(jaxcal.PlattScaling(), s, y, group=g, key=jax.random.key(0),
        ...                         method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
        >>> post.groups.theta.shape  # [G, chains, samples, p]
        (5, 2, 100, 2)
        >>> bool(np.all(post.groups.is_monotone()))  # every draw of every group
        True
    """
    family = family_of(calibrator)
    data = prepare_fit(
        scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
    )
    family.check_scores(data.scores, data.weights)
    g = check_groups(group, data.scores.shape[0])
    ids, rows = np.unique(g, return_inverse=True)
    _, cfg, tuning = run_config(method, data.scores.shape[0], fn="fit_hierarchical", svi=False)
    key = check_key(key)
    # padded entries (shape policy): a valid score of group row 0 with weight 0
    arrays = (data.scores, data.targets, data.weights, rows)
    *args, rows = padded_data(arrays, (data.scores[0], 0.0, 0.0, 0))
    key_data, impl = key_parts(key)
    theta, ctx, hyper, stats = _fit(
        family, cfg, int(ids.size), impl, tuning, *args, rows.astype(np.int32), key_data
    )
    G = int(ids.size)
    rep = lambda x: jnp.broadcast_to(x, (G, *jnp.shape(x)))  # noqa: E731
    groups = Posterior(
        theta=theta,
        context=jax.tree_util.tree_map(rep, ctx),
        stats=jax.tree_util.tree_map(rep, stats),
        family=family,
        method="hierarchical-nuts",
    )
    return HierarchicalPosterior(groups=groups, group_ids=jnp.asarray(ids), hyper=hyper)
