r"""The posterior of a parametric calibration map: draws, predictions, intervals, diagnostics.

A :class:`Posterior` is an immutable pytree (usable inside ``jit``; ``save`` /
``jaxcal.load`` without pickle) holding the draws of the family's coefficients
:math:`\theta^{(c, d)}` (chain ``c``, draw ``d``), the training context and the sampler
statistics. For a score :math:`s`,

.. math::  \hat p(s) = \frac{1}{CD}\sum_{c,d} \sigma\bigl(\phi(s)^\top\theta^{(c,d)}\bigr),

is the posterior mean probability (:meth:`Posterior.predict`) and the equal-tailed
credible interval is given by the :math:`(1 \mp \text{level})/2` quantiles of the draws of
:math:`\sigma(\phi(s)^\top\theta)` (:meth:`Posterior.interval`). Every draw is a monotone
map on the training range (the parameterisation of :mod:`jaxcal.bayes.linear`), so each
quantile curve is monotone too.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

# jaxcal.debias imports calibrators._base; importing it first keeps the import order acyclic.
from jaxcal import _shapes
from jaxcal._fitdata import maybe_check_scores
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_labels, check_sample_weight, check_scores
from jaxcal.families.linear import LinearLogitFamily, ScoreRange
from jaxcal.metrics.calibration import bin_edges, binned_stats, ece_from_stats

__all__ = ["Posterior"]

_CHUNK = 512  # scores per lax.map step: memory is CHUNK x draws


def _flat(theta: jax.Array) -> jax.Array:
    """``[C, S, p] -> [C*S, p]``."""
    return theta.reshape(-1, theta.shape[-1])


@functools.partial(jit, static_argnames=("family", "what"))
def _summaries(family, theta, ctx, scores, qs, *, what):
    """Per-score posterior mean (``what="mean"``) or quantiles ``qs`` of sigma(logit)."""
    th = _flat(theta)

    def per_score(s):
        p = jax.nn.sigmoid(family.features(s, ctx) @ th.T)  # [D]
        if what == "mean":
            return jnp.mean(p)
        return jnp.quantile(p, qs)

    flat = scores.reshape(-1)
    out = jax.lax.map(per_score, flat, batch_size=_CHUNK)
    return out.reshape(scores.shape + out.shape[1:])


@functools.partial(jit, static_argnames=("family",))
def _prob_draws(family, theta, ctx, scores):
    """``[m, D]`` probabilities of every draw (the scores' axis first, as
    :func:`map_scores_padded` pads it)."""
    return jax.nn.sigmoid(family.features(scores, ctx) @ _flat(theta).T)


def draws_last_to_first(out: jax.Array) -> jax.Array:
    """``[..., m, D] -> [..., D, m]`` (on the host for a concrete array: an eager transpose
    would compile a program per shape).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.bayes.posterior import draws_last_to_first
        >>> draws_last_to_first(jnp.zeros((5, 3))).shape
        (3, 5)
    """
    if _shapes.is_traced(out):
        return jnp.swapaxes(out, -1, -2)
    return jax.device_put(np.swapaxes(np.asarray(out), -1, -2))


@functools.partial(jit, static_argnames=("family",))
def _ece_draws(family, theta, ctx, scores, labels, weights, edges):
    def one(th):
        p = jax.nn.sigmoid(family.features(scores, ctx) @ th)
        return ece_from_stats(binned_stats(p, labels, edges, weights))

    return jax.lax.map(one, _flat(theta), batch_size=64)


def map_scores_padded(fn, scores: np.ndarray, batch_ndim: int = 0) -> jax.Array:
    """``fn(padded)`` for per-score summaries, through one compiled call per size bucket.

    The scores after the ``batch_ndim`` leading axes are flattened to one axis, padded to
    its bucket size (``jaxcal._shapes``) with copies of the last score (a valid input), and
    ``fn``'s output (that axis first, then any trailing summary axes) is sliced back on the
    host and reshaped to the scores' shape plus the trailing axes.

    Example:
        >>> import numpy as np
        >>> from jaxcal.bayes.posterior import map_scores_padded
        >>> out = map_scores_padded(lambda s: 2 * s, np.arange(6.0).reshape(2, 3))
        >>> out.tolist()  # fn saw the 6 scores padded to their bucket size
        [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    """
    batch, rest = scores.shape[:batch_ndim], scores.shape[batch_ndim:]
    m = int(np.prod(rest, dtype=np.int64))
    if m == 0:
        return fn(scores)
    flat = scores.reshape(batch + (m,))
    size = _shapes.padded_size(m, total=flat.size)
    widths = [(0, 0)] * batch_ndim + [(0, size - m)]
    out = np.asarray(fn(np.pad(flat, widths, mode="edge")))
    out = out[(slice(None),) * batch_ndim + (slice(0, m),)]
    return jax.device_put(out.reshape(batch + rest + out.shape[batch_ndim + 1 :]))


def credible_quantiles(level: float, dtype) -> np.ndarray:
    """The quantile levels ``[(1 - level) / 2, (1 + level) / 2]`` of an equal-tailed
    credible interval, as a ``dtype`` array.

    Raises:
        ValueError: ``level`` outside (0, 1).

    Example:
        >>> import numpy as np
        >>> from jaxcal.bayes.posterior import credible_quantiles
        >>> credible_quantiles(0.9, np.float64).tolist()
        [0.05, 0.95]
    """
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level!r}.")
    return np.asarray([(1 - level) / 2, (1 + level) / 2], dtype)


def split_bounds(out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(out[..., 0], out[..., 1])``, sliced on the host for concrete arrays (an eager
    slice would compile a program per shape).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.bayes.posterior import split_bounds
        >>> lo, hi = split_bounds(jnp.array([[0.1, 0.4], [0.2, 0.7]]))
        >>> lo.tolist(), hi.tolist()
        ([0.1, 0.2], [0.4, 0.7])
    """
    if _shapes.is_traced(out):
        return out[..., 0], out[..., 1]
    host = np.asarray(out)
    return jax.device_put(host[..., 0]), jax.device_put(host[..., 1])


class PosteriorSummaries:
    """``interval`` and ``ece_posterior`` of a posterior class that gives per-score quantiles
    of its draws' probabilities (``_quantiles(scores, qs)``) and the ECE of every draw
    (``_ece_of_draws(scores, labels, sample_weight, edges)``), in the dtype ``_draw_dtype``.

    Example:
        >>> from jaxcal.bayes import Posterior, ScoreModelPosterior
        >>> from jaxcal.bayes.posterior import PosteriorSummaries
        >>> issubclass(Posterior, PosteriorSummaries)
        True
        >>> issubclass(ScoreModelPosterior, PosteriorSummaries)
        True
    """

    def interval(self, scores: ArrayLike, level: float = 0.9) -> tuple[jax.Array, jax.Array]:
        """Equal-tailed credible interval of :math:`P(y=1 \\mid s)` per score.

        Args:
            scores: as in :meth:`predict`.
            level: credible level in (0, 1).

        Returns:
            ``(lower, upper)``, each shaped like ``scores``.

        Raises:
            ValueError: ``level`` outside (0, 1), or invalid scores.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                  method=NUTS(n_samples=200, n_warmup=200))
            >>> lo, hi = post.interval([-1.0, 0.0, 1.0], level=0.9)
            >>> bool(np.all(lo < hi)), bool(np.all(np.diff(hi) > 0))  # monotone band
            (True, True)
        """
        return split_bounds(self._quantiles(scores, credible_quantiles(level, self._draw_dtype)))

    def ece_posterior(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        n_bins: int = 15,
        sample_weight: ArrayLike | None = None,
    ) -> jax.Array:
        """Posterior draws of the ECE of the calibrated test scores (equal-width bins).

        The ECE of each draw's map on the test set (``jaxcal.metrics.ece``'s definition):
        a distribution that says how well calibrated the map is, given the training data.

        Args:
            scores: ``[m]`` test scores.
            labels: ``[m]`` 0/1 test labels.
            n_bins: number of equal-width bins.
            sample_weight: optional ``[m]`` non-negative weights.

        Returns:
            ``[chains * samples]`` ECE draws (one problem; batched posteriors take
            ``batch_shape + (m,)`` test arrays).

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                  method=NUTS(n_samples=200, n_warmup=200))
            >>> ece = post.ece_posterior(s, y, n_bins=10)  # here on the training data
            >>> ece.shape, bool(np.all((ece >= 0) & (ece <= 1)))
            ((800,), True)
        """
        edges = jnp.asarray(bin_edges(n_bins=n_bins), self._draw_dtype)
        return self._ece_of_draws(scores, labels, sample_weight, edges)


@pytree_dataclass
class Posterior(PosteriorSummaries):
    """Posterior draws of a linear-logit calibration map (see the module docstring).

    Attributes:
        theta: ``[..., chains, samples, p]`` draws of the coefficients (names:
            ``family.param_names``); leading dimensions are batch dimensions.
        context: the training :class:`~jaxcal.families.linear.ScoreRange` (leaves
            ``[...]``).
        stats: sampler statistics: NUTS ``diverging``, ``n_steps`` (leapfrog steps per
            draw), ``accept_prob`` (``[..., chains, samples]``); SVI ``loss``
            (``[..., n_steps]``, the negative ELBO per step).
        family: the (static) linear-logit family.
        method: the name of the inference method, ``"nuts"``, ``"svi"`` or
            ``"hierarchical-nuts"``.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import NUTS, fit_bayes
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
        >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
        ...                  method=NUTS(n_samples=200, n_warmup=200))
        >>> post.n_chains, post.n_samples, post.batch_shape, post.method
        (4, 200, (), 'nuts')
        >>> post.theta.shape  # [chains, samples, p]: the draws of (a, b)
        (4, 200, 2)
    """

    theta: jax.Array
    context: ScoreRange
    stats: dict
    family: LinearLogitFamily = static_field()
    method: str = static_field(default="nuts")

    # ------------------------------------------------------------------------ structure
    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading batch dimensions (``()`` for one posterior)."""
        return tuple(self.theta.shape[:-3])

    @property
    def n_chains(self) -> int:
        """Chains (1 for SVI)."""
        return int(self.theta.shape[-3])

    @property
    def n_samples(self) -> int:
        """Draws per chain."""
        return int(self.theta.shape[-2])

    @property
    def draws(self) -> dict[str, jax.Array]:
        """The coefficient draws by name, each ``[..., chains, samples]``."""
        return {n: self.theta[..., i] for i, n in enumerate(self.family.param_names)}

    def _map(self, fn, scores, *rest, pad=False):
        """Apply ``fn(theta, ctx, scores, *rest)`` per problem (vmapped over the batch).

        ``pad``: ``fn`` summarises each score separately (output: the scores' axis, then
        summary axes), so concrete scores go through :func:`map_scores_padded`.
        """
        nb = len(self.batch_shape)
        traced = _shapes.is_traced(scores, self.theta)
        s = (jnp if traced else np).asarray(scores, self.theta.dtype)
        if nb and s.shape[:nb] != self.batch_shape:
            raise ValueError(
                f"a batched posterior with batch shape {self.batch_shape} needs scores of "
                f"shape {self.batch_shape} + (m, ...); got {s.shape}."
            )
        f = fn
        for _ in range(nb):
            f = jax.vmap(f, in_axes=(0, 0, 0) + (None,) * len(rest))
        call = lambda x: f(self.theta, self.context, x, *rest)  # noqa: E731
        if pad and not traced:
            return map_scores_padded(call, s, nb)
        return call(s)

    # ------------------------------------------------------------------------ prediction
    def predict(self, scores: ArrayLike) -> jax.Array:
        """Posterior mean probability :math:`E[\\sigma(\\phi(s)^\\top\\theta)]` per score.

        Args:
            scores: scores of any shape (batched posterior: ``batch_shape + (m, ...)``).

        Returns:
            Probabilities, same shape as ``scores``.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                  method=NUTS(n_samples=200, n_warmup=200))
            >>> p = post.predict([-1.0, 0.0, 1.0])
            >>> bool(np.all(np.diff(p) > 0)), p.shape
            (True, (3,))
        """
        scores = maybe_check_scores(scores)
        fn = functools.partial(_summaries, self.family, what="mean")
        return self._map(lambda th, ctx, s: fn(th, ctx, s, None), scores, pad=True)

    @property
    def _draw_dtype(self):
        return self.theta.dtype

    def _quantiles(self, scores: ArrayLike, qs) -> jax.Array:
        scores = maybe_check_scores(scores)
        fn = functools.partial(_summaries, self.family, what="quantile")
        return self._map(lambda th, ctx, s: fn(th, ctx, s, qs), scores, pad=True)

    def probability_draws(self, scores: ArrayLike) -> jax.Array:
        """Probabilities of every draw: ``[..., chains * samples, m]`` for 1-D ``scores``.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                  method=NUTS(n_samples=200, n_warmup=200))
            >>> post.probability_draws([0.0, 1.0]).shape  # [draws, scores]
            (800, 2)
        """
        scores = maybe_check_scores(scores)
        out = self._map(functools.partial(_prob_draws, self.family), scores, pad=True)
        return draws_last_to_first(out)

    def _ece_of_draws(self, scores, labels, sample_weight, edges) -> jax.Array:
        if self.batch_shape:
            s = np.asarray(scores, np.float64)
            y = np.asarray(labels, np.float64)
            if s.shape != y.shape or not np.isfinite(s).all() or not np.isin(y, (0, 1)).all():
                raise ValueError("batched test scores/labels must be finite, 0/1, same shape.")
            w = np.ones_like(s) if sample_weight is None else np.asarray(sample_weight)
        else:
            s = check_scores(scores)
            y = check_labels(labels, s.shape[0])
            w = check_sample_weight(sample_weight, s.shape[0])
        dtype = self.theta.dtype
        y, w = jnp.asarray(y, dtype), jnp.asarray(w, dtype)
        fn = functools.partial(_ece_draws, self.family)
        nb = len(self.batch_shape)
        if nb == 0:
            return fn(self.theta, self.context, jnp.asarray(s, dtype), y, w, edges)
        f = lambda th, ctx, s_, y_, w_: fn(th, ctx, s_, y_, w_, edges)  # noqa: E731
        for _ in range(nb):
            f = jax.vmap(f)
        return f(self.theta, self.context, jnp.asarray(s, dtype), y, w)

    def is_monotone(self, *, rtol: float = 1e-9) -> jax.Array:
        """Whether every draw is non-decreasing on the training range (``bool[...]``).

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                  method=NUTS(n_samples=200, n_warmup=200))
            >>> bool(post.is_monotone())  # by construction
            True
        """

        def one(theta, ctx):
            R = self.family.monotone_rows(ctx.lo, ctx.hi, ctx)
            th = _flat(theta)
            scale = jnp.abs(th) @ jnp.abs(R).T
            return jnp.all(th @ R.T >= -rtol * scale)

        f = one
        for _ in range(len(self.batch_shape)):
            f = jax.vmap(f)
        return f(self.theta, self.context)

    # ------------------------------------------------------------------------ diagnostics
    def diagnostics(self) -> dict:
        """Convergence diagnostics per coefficient.

        Returns:
            ``{"r_hat": {name: ...}, "ess": {name: ...}, "divergences": ...,
            "n_chains": C, "n_samples": S}`` with split-:math:`\\hat R` and the bulk
            effective sample size (``numpyro.diagnostics``; Gelman et al., BDA3) and the
            number of divergent transitions (NUTS). Values are floats, or ``[B]`` arrays
            for a batched posterior. For SVI the draws are independent samples of the fitted
            guide (``r_hat`` ~ 1 and ``ess`` ~ draws by construction); ``final_loss`` and
            ``loss_change`` (relative change of the negative ELBO over the last 10% of
            steps) tell whether the optimisation converged.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                  method=NUTS(n_samples=200, n_warmup=200))
            >>> d = post.diagnostics()
            >>> d["divergences"], bool(d["r_hat"]["a"] < 1.05), d["n_chains"], d["n_samples"]
            (0, True, 4, 200)
        """
        from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

        theta = np.asarray(self.theta)
        flat = theta.reshape((-1,) + theta.shape[-3:])
        out: dict = {"r_hat": {}, "ess": {}}
        for i, name in enumerate(self.family.param_names):
            x = flat[..., i]
            const = np.ptp(x.reshape(x.shape[0], -1), axis=1) == 0
            rh, es = [], []
            for b in range(x.shape[0]):
                if const[b]:  # a coefficient fixed by the family (e.g. zero) is exact
                    rh.append(1.0)
                    es.append(float(x[b].size))
                    continue
                rh.append(
                    float(split_gelman_rubin(x[b])) if x.shape[1] > 1 or x.shape[2] > 3 else np.nan
                )
                es.append(float(effective_sample_size(x[b])))
            out["r_hat"][name] = self._shape(rh)
            out["ess"][name] = self._shape(es)
        if "diverging" in self.stats:
            div = np.asarray(self.stats["diverging"]).reshape(flat.shape[0], -1).sum(1)
            out["divergences"] = self._shape(div.astype(int).tolist())
        if "loss" in self.stats:
            loss = np.asarray(self.stats["loss"]).reshape(flat.shape[0], -1)
            tail = max(1, loss.shape[1] // 10)
            final = loss[:, -tail:].mean(1)
            prev = loss[:, -2 * tail : -tail].mean(1) if loss.shape[1] >= 2 * tail else final
            out["final_loss"] = self._shape(final.tolist())
            out["loss_change"] = self._shape((np.abs(final - prev) / np.abs(final)).tolist())
        out["n_chains"] = self.n_chains
        out["n_samples"] = self.n_samples
        return out

    def _shape(self, values: list):
        if not self.batch_shape:
            return values[0]
        return np.asarray(values).reshape(self.batch_shape)

    def to_arviz(self):
        """An ``arviz.InferenceData`` (needs ``arviz``, not a jaxcal dependency).

        Posterior variables are the coefficients by name (``chain`` x ``draw``); NUTS
        statistics go to ``sample_stats``. Only unbatched posteriors.

        Raises:
            ImportError: arviz is not installed.
            ValueError: the posterior is batched.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                  method=NUTS(n_samples=200, n_warmup=200))
            >>> idata = post.to_arviz()
            >>> idata.posterior["a"].shape  # (chain, draw)
            (4, 200)
        """
        try:
            import arviz as az
        except ImportError as exc:
            raise ImportError("to_arviz needs arviz: pip install arviz") from exc
        if self.batch_shape:
            raise ValueError("to_arviz exports one posterior; index a batched one first.")
        posterior = {k: np.asarray(v) for k, v in self.draws.items()}
        stats = {
            k: np.asarray(v)
            for k, v in self.stats.items()
            if np.ndim(v) == 2 and np.shape(v) == self.theta.shape[:2]
        }
        if "diverging" in stats:
            stats["diverging"] = stats["diverging"].astype(bool)
        return az.from_dict(posterior=posterior, sample_stats=stats or None)

    def __getitem__(self, index) -> Posterior:
        """Problem ``index`` of a batched posterior (``post[b]``).

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> from jaxcal.bayes import NUTS, fit_bayes_batch
            >>> rng = np.random.default_rng(0)
            >>> s = rng.normal(size=(3, 100)); y = rng.random((3, 100)) < 1 / (1 + np.exp(-2 * s))
            >>> post = fit_bayes_batch(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
            ...                        method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> post[1].batch_shape, post[1].theta.shape  # one problem
            ((), (2, 100, 2))
        """
        if not self.batch_shape:
            raise ValueError("only a batched posterior can be indexed.")
        take = lambda x: x[index]  # noqa: E731
        return Posterior(
            theta=self.theta[index],
            context=jax.tree_util.tree_map(take, self.context),
            stats=jax.tree_util.tree_map(take, self.stats),
            family=self.family,
            method=self.method,
        )
