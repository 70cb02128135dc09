"""The fitted correction of :class:`jaxcal.MulticalibrationBoosting` (see
``jaxcal.calibrators.multicalibration``): a pytree of its trees, rescaling and feature
encoder, with ``predict`` (tables) and ``predict_codes`` (a pure function of arrays)."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._features import FeatureEncoder
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.calibrators._base import FittedCalibrator
from jaxcal.calibrators._multicalibration_core import Boosted, predict_logit
from jaxcal.calibrators._multicalibration_inputs import logits_host, logits_pure
from jaxcal.fitting.trees import Tree

__all__ = ["FittedMulticalibrationBoosting", "fitted", "eager_fitted"]


@pytree_dataclass
class FittedMulticalibrationBoosting(FittedCalibrator):
    r"""A fitted multicalibration correction: ``predict(scores, features)``.

    Attributes:
        split_features: ``[T, D]`` int32, the column each tree splits at each level
            (columns ``0..d-1`` the features, ``d`` the binned score).
        split_left: ``[T, D, W]`` bool, the codes that go left at each level.
        leaf_values: ``[T, 2^D]`` leaf values, the learning rate included (trees from
            ``n_rounds`` on are zero: the eager fit pads the trees to a size bucket).
        score_edges: ``[n_bins - 1]`` the logit edges of the score's bins.
        a, b: the final rescaling :math:`\sigma(a F + b)`.
        n_rounds: the number of trees chosen (int32).
        cv_loss: ``[n_rounds_max + 1]`` mean held-out log loss after each round (NaN where
            not run, and everywhere without early stopping).
        encoder: the :class:`~jaxcal._features.FeatureEncoder` of the feature table
            (``None`` without features, or after the pure fit on codes).
        n_levels: codes of each feature column (the checks of ``predict_codes``).
        score_type: ``"logit"`` or ``"probability"`` (``"auto"`` after a pure fit with
            ``score_type="auto"`` on traced scores: ``probability_input`` holds the choice).
        probability_input: bool (per problem), whether the training scores were taken as
            probabilities (``score_type="auto"`` only; else ``None``).

    A fitted batch (:meth:`MulticalibrationBoosting.fit_batch`) has a leading problem axis
    on every array except the encoder's (one encoder for all problems).

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(1)
        >>> device = rng.integers(0, 2, 2000)
        >>> logit = rng.normal(size=2000)
        >>> labels = rng.uniform(size=2000) < 1 / (1 + np.exp(-(logit + device - 0.5)))
        >>> fitted = jaxcal.MulticalibrationBoosting(n_rounds=20).fit(
        ...     logit, labels, {"device": device})
        >>> isinstance(fitted, jaxcal.calibrators.FittedMulticalibrationBoosting)
        True
        >>> fitted.predict(logit[:3], {"device": device[:3]}).shape
        (3,)
    """

    split_features: jax.Array
    split_left: jax.Array
    leaf_values: jax.Array
    score_edges: jax.Array
    a: jax.Array
    b: jax.Array
    n_rounds: jax.Array
    cv_loss: jax.Array
    encoder: FeatureEncoder | None = None
    probability_input: jax.Array | None = None
    n_levels: tuple = static_field(default=())
    score_type: str = static_field(default="logit")

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """``()`` for one problem, ``(P,)`` for a batch of ``P``."""
        return tuple(np.shape(self.a))

    def _boosted(self) -> Boosted:
        trees = Tree(self.split_features, self.split_left, self.leaf_values)
        return Boosted(trees, self.score_edges, self.a, self.b, self.n_rounds, self.cv_loss)

    def codes(self, features: Any, *, n: int | None = None) -> np.ndarray:
        """``[n, d]`` int32 codes of a feature table, as at fit time (unseen categories and
        missing values get each column's reserved code)."""
        if self.encoder is None:
            if features is not None:
                raise ValueError(
                    "this calibrator was fitted without a feature table; pass features=None "
                    "(or use predict_codes with the codes it was fitted on)."
                )
            return np.zeros((0 if n is None else n, 0), np.int32)
        if features is None:
            raise ValueError(
                f"this calibrator was fitted with the features {list(self.encoder.names)}: "
                "pass features=."
            )
        codes = self.encoder.transform(features, name="features")
        if n is not None and codes.shape[0] != n:
            raise ValueError(f"features has {codes.shape[0]} rows but there are {n} scores.")
        return codes

    def predict(self, scores: ArrayLike, features: Any = None) -> jax.Array:
        """Calibrated probabilities at ``scores`` and the rows of the table ``features``
        (``[n]`` scores; any shape without features; ``[P, m]`` for a fitted batch, with
        ``[P, m]`` columns)."""
        return self._output(scores, features, probability=True)

    def predict_logit(self, scores: ArrayLike, features: Any = None) -> jax.Array:
        """The corrected logits :math:`a(F_0 + \\sum_t f_t) + b` (see :meth:`predict`)."""
        return self._output(scores, features, probability=False)

    def _output(self, scores: ArrayLike, features: Any, *, probability: bool) -> jax.Array:
        if _shapes.is_traced(scores) or self.score_type == "auto":
            shape = jnp.shape(scores)
            flat = jnp.reshape(scores, (-1,))
            codes = self.codes(None if features is None else _flat_table(features), n=flat.shape[0])
            z = self._logit_pure(jnp.reshape(flat, shape), jnp.asarray(codes.reshape(*shape, -1)))
            return jax.nn.sigmoid(z) if probability else z
        s = np.asarray(scores, np.float64)
        if not np.isfinite(s).all():
            raise ValueError("scores contain non-finite values (NaN or inf).")
        dtype = jnp.result_type(float)
        z = logits_host(s.reshape(-1), self.score_type, dtype)
        codes = self.codes(None if features is None else _flat_table(features), n=z.shape[0])
        return self._host(z, codes, s.shape, probability)

    def predict_codes(self, scores: ArrayLike, codes: ArrayLike) -> jax.Array:
        """Calibrated probabilities from ``[n]`` scores and ``[n, d]`` integer codes (as
        :meth:`codes` gives): a pure function of arrays, for ``jit`` and ``jax.export``.
        Codes outside the fitted ``n_levels`` and scores outside the domain give NaN.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> rng = np.random.default_rng(1)
            >>> s, g = rng.normal(size=500), rng.integers(0, 3, 500)
            >>> y = rng.uniform(size=500) < 1 / (1 + np.exp(-s - g + 1))
            >>> cal = jaxcal.MulticalibrationBoosting(n_rounds=20).fit(s, y, {"g": g})
            >>> codes = cal.codes({"g": g})
            >>> exported = jax.export.export(jax.jit(cal.predict_codes))(s, codes)
            >>> bool(np.allclose(exported.call(s, codes), cal.predict(s, {"g": g}), atol=1e-6))
            True
        """
        s = jnp.asarray(scores)
        if not jnp.issubdtype(s.dtype, jnp.floating):
            s = s.astype(jnp.result_type(float))
        x = jnp.asarray(codes)
        if x.ndim != s.ndim + 1 or x.shape[-1] != len(self.n_levels):
            raise ValueError(
                f"codes must have shape {(*s.shape, len(self.n_levels))}; got {x.shape}."
            )
        top = jnp.asarray(self.n_levels, x.dtype).reshape(-1)  # codes of each column
        bad = jnp.any((x < 0) | (x >= top), axis=-1)
        out = jax.nn.sigmoid(self._logit_pure(s, jnp.clip(x, 0, top - 1).astype(jnp.int32)))
        return jnp.where(bad, jnp.nan, out)

    def _logit_pure(self, s: jax.Array, codes: jax.Array) -> jax.Array:
        flag = self.probability_input
        if flag is not None and self.batch_shape:  # one choice per problem of a batch
            flag = jnp.reshape(flag, (*self.batch_shape,) + (1,) * (jnp.ndim(s) - 1))
        z, _ = logits_pure(s, self.score_type, flag)
        ok = jnp.isfinite(s)
        if self.score_type == "probability":
            ok = ok & (s >= 0) & (s <= 1)
        elif self.score_type == "auto":
            ok = ok & (~flag | ((s >= 0) & (s <= 1)))
        if self.batch_shape:
            out = jax.vmap(predict_logit)(self._boosted(), codes, z)
        else:
            out = predict_logit(
                self._boosted(), codes.reshape(z.size, codes.shape[-1]), z.reshape(-1)
            )
            out = out.reshape(s.shape)
        return jnp.where(ok, out, jnp.nan)

    def _host(self, z: np.ndarray, codes: np.ndarray, shape: tuple, probability: bool):
        """One jitted program on rows padded to their bucket size, sliced back on the host
        (probabilities or logits)."""
        if self.batch_shape:
            P = self.batch_shape[0]
            z, codes = z.reshape(P, -1), codes.reshape(P, -1, codes.shape[-1])
            m = z.shape[1]
            size = _shapes.padded_size(m, total=z.size)
            z = _shapes.pad_axis(z, size, axis=1)
            codes = _shapes.pad_axis(codes, size, axis=1)
            out = _predict_batch_program(self._boosted(), codes, z, probability=probability)
            return jax.device_put(np.asarray(out)[:, :m].reshape(shape))
        n = z.shape[0]
        if n == 0:
            return jax.device_put(np.zeros(shape, z.dtype))
        size = _shapes.padded_size(n)
        out = _predict_program(
            self._boosted(),
            _shapes.pad_axis(codes, size),
            _shapes.pad_axis(z, size, z[0]),
            probability=probability,
        )
        return _shapes.unpad(out, n, shape)


def _flat_table(features: Any) -> Any:
    """A table whose columns may be ``[P, m]`` (a batch), as 1-D columns."""
    if isinstance(features, dict):
        return {k: np.asarray(v).reshape(-1) if np.ndim(v) > 1 else v for k, v in features.items()}
    return features


@partial(jit, static_argnames=("probability",))
def _predict_program(model: Boosted, codes, logits, *, probability: bool):
    z = predict_logit(model, codes, logits)
    return jax.nn.sigmoid(z) if probability else z


@partial(jit, static_argnames=("probability",))
def _predict_batch_program(model: Boosted, codes, logits, *, probability: bool):
    z = jax.vmap(predict_logit)(model, codes, logits)
    return jax.nn.sigmoid(z) if probability else z


def fitted(
    model: Boosted, encoder, n_levels, score_type, *, probability_input=None
) -> FittedMulticalibrationBoosting:
    trees = model.trees
    return FittedMulticalibrationBoosting(
        split_features=trees.features,
        split_left=trees.left,
        leaf_values=trees.values,
        score_edges=model.edges,
        a=model.a,
        b=model.b,
        n_rounds=model.n_rounds,
        cv_loss=model.cv_loss,
        encoder=encoder,
        n_levels=tuple(n_levels),
        score_type=score_type,
        probability_input=probability_input,
    )


def eager_fitted(
    model: Boosted, encoder, n_levels, score_type, *, n_problems: int | None = None
) -> FittedMulticalibrationBoosting:
    """The fitted correction of the eager shell, from the program's output on the host: the
    first ``n_problems`` problems of a batch (the others were padding), and only the trees in
    use, padded with zero trees to a size bucket (so predicting compiles once per bucket)."""
    host = jax.device_get(model)
    if n_problems is not None:
        host = jax.tree.map(lambda a: np.asarray(a)[:n_problems], host)
    used = int(np.max(host.n_rounds)) if np.size(host.n_rounds) else 0
    keep = _shapes.padded_size(used, minimum=8)
    axis = np.ndim(host.n_rounds)  # the trees' axis: after the problem axis of a batch

    def cut(a):
        a = np.asarray(a)
        if a.shape[axis] >= keep:
            return np.take(a, np.arange(keep), axis=axis)
        return _shapes.pad_axis(a, keep, axis=axis)

    host = host._replace(trees=Tree(*(cut(a) for a in host.trees)))
    return fitted(jax.device_put(host), encoder, n_levels, score_type)
