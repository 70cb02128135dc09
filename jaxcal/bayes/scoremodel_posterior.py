"""The posterior over a score model's parameters (:class:`ScoreModelPosterior`, returned by
``ScoreModel.fit_bayes`` / :func:`jaxcal.bayes.scoremodel.fit_scoremodel_bayes`): predictions
and intervals of the implied calibration map, draws, diagnostics and the ECE posterior.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import (
    join_hyperparameters,
    pytree_dataclass,
    split_hyperparameters,
    static_field,
)
from jaxcal._validation import (
    check_labels,
    check_sample_weight,
    check_scores,
)
from jaxcal.bayes.posterior import PosteriorSummaries, draws_last_to_first, map_scores_padded
from jaxcal.metrics.calibration import binned_stats, ece_from_stats

__all__ = ["ScoreModelPosterior"]

_CHUNK = 256  # scores per lax.map step: memory is CHUNK x draws


def _flat(draws: dict) -> dict:
    return {k: v.reshape((-1,) + v.shape[2:]) for k, v in draws.items()}


@functools.partial(jit, static_argnames=("static", "what"))
def _summaries(static, hyper, draws, scores, qs, *, what):
    """Per-score posterior mean (``what="mean"``) or quantiles ``qs`` of sigma(logit)."""
    score_model = join_hyperparameters(static, hyper)
    params = score_model.params_from_draws(_flat(draws))

    def per_score(s):
        p = jax.nn.sigmoid(jax.vmap(lambda th: score_model.log_odds(th, s))(params))
        return jnp.mean(p) if what == "mean" else jnp.quantile(p, qs)

    flat = scores.reshape(-1)
    out = jax.lax.map(per_score, flat, batch_size=_CHUNK)
    return out.reshape(scores.shape + out.shape[1:])


@functools.partial(jit, static_argnames=("score_model",))
def _prob_draws(score_model, draws, scores):
    params = score_model.params_from_draws(_flat(draws))
    # [m, D]: the scores' axis first, as map_scores_padded pads it
    return jax.vmap(lambda th: jax.nn.sigmoid(score_model.log_odds(th, scores)), out_axes=-1)(
        params
    )


@functools.partial(jit, static_argnames=("score_model",))
def _ece_draws(score_model, draws, scores, labels, weights, edges):
    params = score_model.params_from_draws(_flat(draws))

    def one(th):
        p = jax.nn.sigmoid(score_model.log_odds(th, scores))
        return ece_from_stats(binned_stats(p, labels, edges, weights))

    return jax.lax.map(one, params, batch_size=64)


@functools.partial(jit, static_argnames=("score_model",))
def _monotone_draws(score_model, draws, lo, hi):
    params = score_model.params_from_draws(draws)
    f = lambda th: score_model.is_monotone(th, lo, hi)  # noqa: E731
    return jax.vmap(jax.vmap(f))(params)


def _rhat_ess(x: np.ndarray) -> tuple[float, float]:
    """Split-R-hat and bulk ESS of ``[C, S]`` draws (``numpyro.diagnostics``)."""
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

    if np.ptp(x) == 0:  # a parameter fixed by the data or the family is exact
        return 1.0, float(x.size)
    rh = float(split_gelman_rubin(x)) if x.shape[0] > 1 or x.shape[1] > 3 else np.nan
    return rh, float(effective_sample_size(x))


@pytree_dataclass
class ScoreModelPosterior(PosteriorSummaries):
    """Posterior draws of a score model's parameters (see the module docstring).

    Attributes:
        draws: the class-conditional parameters and ``pi1`` by name (the fields of the
            family's params class), each ``[chains, samples, ...]``.
        lo, hi: the training score range (where ``monotone`` holds).
        stats: sampler statistics: NUTS ``diverging``, ``n_steps`` (leapfrog steps per
            draw), ``accept_prob`` (``[chains, samples]``); SVI ``loss`` (``[n_steps]``, the
            negative ELBO).
        score_model: the (static) score model, with its prior hyperparameters.
        method: the name of the inference method, ``"nuts"`` or ``"svi"``.
        monotone: whether the monotone parameterisation was used.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.bayes import NUTS
        >>> from jaxcal.scoremodels import GaussianScoreModel
        >>> rng = np.random.default_rng(0)
        >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
        >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
        ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
        >>> post.n_chains, post.n_samples, post.method, post.monotone
        (2, 100, 'nuts', True)
        >>> sorted(post.draws)  # [chains, samples] each
        ['mu0', 'mu1', 'pi1', 'sd0', 'sd1']
    """

    draws: dict
    lo: jax.Array
    hi: jax.Array
    stats: dict
    score_model: Any = static_field()
    method: str = static_field(default="nuts")
    monotone: bool = static_field(default=True)

    @property
    def n_chains(self) -> int:
        """Chains (1 for SVI)."""
        return int(self.draws["pi1"].shape[0])

    @property
    def n_samples(self) -> int:
        """Draws per chain."""
        return int(self.draws["pi1"].shape[1])

    @property
    def params(self):
        """The draws as the family's params pytree (leaves ``[chains, samples, ...]``)."""
        return self.score_model.params_from_draws(self.draws)

    def _scores(self, scores: ArrayLike) -> jax.Array | np.ndarray:
        """Validated scores: a NumPy array of the draws' dtype (a tracer inside ``jit``)."""
        if isinstance(scores, jax.core.Tracer):  # inside jit: checked by the caller
            return jnp.asarray(scores, self.draws["pi1"].dtype)
        arr = np.asarray(scores, np.float64)
        if not np.isfinite(arr).all():
            raise ValueError("scores contain non-finite values (NaN or inf).")
        if arr.size:
            self.score_model._check_support(arr.reshape(-1))
        return arr.astype(self.draws["pi1"].dtype)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Posterior mean of :math:`P(y=1 \\mid s) = \\sigma(\\text{log\\_odds}(s))` per score.

        Args:
            scores: scores of any shape (in the family's support).

        Returns:
            Probabilities, same shape as ``scores``.

        Raises:
            ValueError: non-finite scores or scores outside the support.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.bayes import NUTS
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> rng = np.random.default_rng(0)
            >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
            >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
            ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> p = post.predict([-1.0, 0.0, 1.0])
            >>> bool(np.all(np.diff(p) > 0)), p.shape
            (True, (3,))
        """
        return self._summaries(scores, None, "mean")

    def _summaries(self, scores: ArrayLike, qs, what: str) -> jax.Array:
        """Per-score summaries; concrete scores through one compiled call per size bucket."""
        s = self._scores(scores)
        static, hyper = split_hyperparameters(self.score_model)
        call = lambda x: _summaries(static, hyper, self.draws, x, qs, what=what)  # noqa: E731
        return call(s) if _shapes.is_traced(s, self.draws) else map_scores_padded(call, s)

    @property
    def _draw_dtype(self):
        return self.draws["pi1"].dtype

    def _quantiles(self, scores: ArrayLike, qs) -> jax.Array:
        return self._summaries(scores, qs, "quantile")

    def probability_draws(self, scores: ArrayLike) -> jax.Array:
        """Probabilities of every draw: ``[chains * samples, m]`` for ``[m]`` scores.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.bayes import NUTS
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> rng = np.random.default_rng(0)
            >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
            >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
            ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> post.probability_draws([0.0, 1.0]).shape  # [draws, scores]
            (200, 2)
        """
        s = self._scores(check_scores(scores))
        call = functools.partial(_prob_draws, self.score_model, self.draws)
        out = call(s) if _shapes.is_traced(s, self.draws) else map_scores_padded(call, s)
        return draws_last_to_first(out)

    def _ece_of_draws(self, scores, labels, sample_weight, edges) -> jax.Array:
        s = check_scores(scores)
        y = check_labels(labels, s.shape[0])
        w = check_sample_weight(sample_weight, s.shape[0])
        dtype = self._draw_dtype
        args = (self._scores(s), jnp.asarray(y, dtype), jnp.asarray(w, dtype), edges)
        return _ece_draws(self.score_model, self.draws, *args)

    def monotone_draws(self, lo: ArrayLike | None = None, hi: ArrayLike | None = None):
        """``bool[chains, samples]``: whether each draw's map is non-decreasing on
        ``[lo, hi]`` (default: the training range), by the family's ``is_monotone``.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.bayes import NUTS
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> rng = np.random.default_rng(0)
            >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
            >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
            ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> flags = post.monotone_draws()  # monotone parameterisation: all True
            >>> flags.shape, bool(flags.all())
            ((2, 100), True)
        """
        lo = self.lo if lo is None else jnp.asarray(lo, self.lo.dtype)
        hi = self.hi if hi is None else jnp.asarray(hi, self.hi.dtype)
        return _monotone_draws(self.score_model, self.draws, lo, hi)

    def is_monotone(self) -> bool:
        """Whether every draw is non-decreasing on the training range.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.bayes import NUTS
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> rng = np.random.default_rng(0)
            >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
            >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
            ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> post.is_monotone()
            True
        """
        return bool(jnp.all(self.monotone_draws()))

    def diagnostics(self) -> dict:
        """Convergence diagnostics per parameter, divergences and the monotone share.

        Returns:
            ``{"r_hat": {name: ...}, "ess": {name: ...}, "divergences": int,
            "monotone_share": float, "n_chains": C, "n_samples": S}``: split-:math:`\\hat
            R` and bulk effective sample size (``numpyro.diagnostics``; a float per scalar
            parameter, a list per component for vector parameters), the number of divergent
            NUTS transitions, and the share of draws whose map is non-decreasing on the
            training range (1.0 by construction with ``monotone=True``). SVI draws are
            independent guide samples (``r_hat`` ~ 1, ``ess`` ~ draws by construction);
            ``final_loss`` and ``loss_change`` (relative change of the negative ELBO over
            the last 10% of steps) tell whether the optimisation converged.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.bayes import NUTS
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> rng = np.random.default_rng(0)
            >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
            >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
            ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> d = post.diagnostics()
            >>> d["divergences"], d["monotone_share"], bool(d["r_hat"]["mu1"] < 1.05)
            (0, 1.0, True)
        """
        out: dict = {"r_hat": {}, "ess": {}}
        for name, v in self.draws.items():
            x = np.asarray(v).reshape(v.shape[0], v.shape[1], -1)
            pairs = [_rhat_ess(x[..., j]) for j in range(x.shape[-1])]
            scalar = np.ndim(v) == 2
            out["r_hat"][name] = pairs[0][0] if scalar else [p[0] for p in pairs]
            out["ess"][name] = pairs[0][1] if scalar else [p[1] for p in pairs]
        if "diverging" in self.stats:
            out["divergences"] = int(np.sum(np.asarray(self.stats["diverging"])))
        if "loss" in self.stats:
            loss = np.asarray(self.stats["loss"])
            tail = max(1, loss.shape[0] // 10)
            final = float(loss[-tail:].mean())
            prev = float(loss[-2 * tail : -tail].mean()) if loss.shape[0] >= 2 * tail else final
            out["final_loss"] = final
            out["loss_change"] = abs(final - prev) / abs(final)
        out["monotone_share"] = float(np.mean(np.asarray(self.monotone_draws())))
        out["n_chains"] = self.n_chains
        out["n_samples"] = self.n_samples
        return out

    def to_arviz(self):
        """An ``arviz.InferenceData`` (needs ``arviz``, not a jaxcal dependency).

        Raises:
            ImportError: arviz is not installed.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.bayes import NUTS
            >>> from jaxcal.scoremodels import GaussianScoreModel
            >>> rng = np.random.default_rng(0)
            >>> y = (rng.random(200) < 0.3).astype(float); s = rng.normal(1.5 * y, 1.0)
            >>> post = GaussianScoreModel().fit_bayes(s, y, key=jax.random.key(0),
            ...     method=NUTS(n_samples=100, n_warmup=100, n_chains=2))
            >>> post.to_arviz().posterior["mu1"].shape  # (chain, draw)
            (2, 100)
        """
        try:
            import arviz as az
        except ImportError as exc:
            raise ImportError("to_arviz needs arviz: pip install arviz") from exc
        posterior = {k: np.asarray(v) for k, v in self.draws.items()}
        stats = {k: np.asarray(v) for k, v in self.stats.items() if np.ndim(v) == 2}
        if "diverging" in stats:
            stats["diverging"] = stats["diverging"].astype(bool)
        return az.from_dict(posterior=posterior, sample_stats=stats or None)
