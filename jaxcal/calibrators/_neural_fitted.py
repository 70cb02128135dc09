r"""The fitted field-aware neural calibrator (:class:`FittedNeuralCalibration`, re-exported
by :mod:`jaxcal.calibrators.neural`) and the jitted programs that predict with it."""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_finite_array
from jaxcal.calibrators._base import FittedCalibrator
from jaxcal.calibrators._knots import padded_knots
from jaxcal.calibrators._neural_core import field_mlp, piecewise_linear, to_logit
from jaxcal.calibrators._neural_fields import check_fields
from jaxcal.calibrators._scaling import ScoreScaling, identity_scaling

__all__ = ["FittedNeuralCalibration"]


@pytree_dataclass
class FittedNeuralCalibration(FittedCalibrator):
    r"""Fitted field-aware calibrator: ``predict(scores, fields) = sigmoid(eta(l) + g(x))``.

    Attributes:
        knots: ``[K + 1]`` increasing logit knots :math:`a_k` (after the pure fit, inside
            ``jit``: ``[n_knots]``, the distinct knots then copies of the last, which the
            map never reaches).
        values: ``[K + 1]`` :math:`b_k = \eta(a_k)`.
        embeddings: ``[sum_f C_f, d]`` stacked field embedding tables.
        linear: ``[F d]`` weights of the linear skip term.
        weights: MLP weight matrices (the last one ``[h, 1]``).
        biases: hidden-layer biases.
        cardinalities: per-field number of values :math:`C_f` (empty: no fields).
        score_type: ``"logit"`` or ``"probability"`` (probabilities are mapped to logits,
            clipped to machine epsilon).
        scaling: the :class:`~jaxcal.calibrators._scaling.ScoreScaling` of logit scores
            (the knots refer to :math:`l\,2^{-k}`; the identity unless the working precision
            could not hold the training logits, ``jaxcal.calibrators._scaling``).

    The float leaves have the dtype of the scores the calibrator was fitted on (float32
    scores: float32, also with x64 enabled).

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5], np.float32), np.array([0, 1, 0, 1])
        >>> fields = np.array([[0], [1], [1], [0]])
        >>> cal = jaxcal.NeuralCalibration(n_knots=3, rank=2, hidden=(4,), n_steps=20)
        >>> fitted = cal.fit(s, y, fields, key=jax.random.key(0))
        >>> type(fitted).__name__, fitted.cardinalities, fitted.embeddings.dtype
        ('FittedNeuralCalibration', (2,), dtype('float32'))
    """

    knots: jax.Array
    values: jax.Array
    embeddings: jax.Array
    linear: jax.Array
    weights: tuple
    biases: tuple
    cardinalities: tuple = static_field(default=())
    score_type: str = static_field(default="logit")
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)

    @property
    def offsets(self) -> jax.Array:
        """Row offset of each field's table inside ``embeddings``.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5]), np.array([0, 1, 0, 1])
            >>> fields = np.array([[0, 2], [1, 0], [1, 1], [0, 0]])
            >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=5)
            >>> cal.fit(s, y, fields, key=jax.random.key(0)).offsets.tolist()
            [0, 2]
        """
        return jnp.asarray(np.concatenate([[0], np.cumsum(self.cardinalities)[:-1]]), jnp.int32)

    def _checked(self, scores, fields):
        if not isinstance(scores, jax.core.Tracer):
            s = check_finite_array(scores)
            if self.score_type == "probability" and ((s < 0) | (s > 1)).any():
                raise ValueError('scores must lie in [0, 1] for score_type="probability".')
        if not self.cardinalities:
            if fields is not None:
                raise ValueError("this calibrator was fitted without fields; pass fields=None.")
            return scores, None
        if fields is None:
            raise ValueError(
                f"this calibrator was fitted with {len(self.cardinalities)} field(s): pass "
                "fields=[n, F] integer ids."
            )
        if not isinstance(fields, jax.core.Tracer):
            n = int(np.size(scores))
            fields = check_fields(fields, n, self.cardinalities)
        return scores, fields

    def _network(self):
        return self.embeddings, self.offsets, self.linear, self.weights, self.biases

    def _padded_parts(self):
        """Host copies of the knots and embeddings padded to their bucket sizes (copies of
        the last knot, zero rows: exact), so that predicting compiles once per bucket."""
        knots, values = padded_knots(self.knots, self.values)
        emb = np.asarray(self.embeddings)
        if emb.shape[0]:
            emb = _shapes.pad_axis(emb, _shapes.padded_size(emb.shape[0]))
        return knots, values, (emb, *self._network()[1:])

    def _apply(self, scores, fields, *, output: str) -> jax.Array:
        """``output`` (``"eta"``, ``"logit"`` or ``"prob"``) at validated inputs: one jitted
        program on rows padded to their bucket size, sliced back; tracers pass through."""
        core = partial(
            _predict_neural,
            score_type=self.score_type,
            output=output,
            use_fields=fields is not None,
        )
        shape = np.shape(scores)  # the output keeps it
        if _shapes.is_traced(scores, fields, self.knots, self.values, self._network()):
            raw = jnp.asarray(scores).reshape(-1)
            s = self.scaling.apply(raw)
            out = core(s, fields, self.knots, self.values, *self._network())
            # scores predict would refuse cannot raise inside a trace: NaN, never a number
            ok = jnp.isfinite(raw)
            if self.score_type == "probability":
                ok = ok & (raw >= 0) & (raw <= 1)
            return jnp.where(ok, out, jnp.nan).reshape(shape)
        s = np.asarray(self.scaling.apply(scores)).reshape(-1)
        n = s.shape[0]
        if n == 0:
            return jax.device_put(np.zeros(shape, self.knots.dtype))
        size = _shapes.padded_size(n)
        knots, values, network = self._padded_parts()
        f = None if fields is None else _shapes.pad_axis(fields, size)  # id 0 is valid
        out = core(_shapes.pad_axis(s, size, s[0]), f, knots, values, *network)
        return _shapes.unpad(out, n, shape)

    def eta(self, scores: ArrayLike) -> jax.Array:
        r"""The score part :math:`\eta(l)` (a logit), any input shape.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5]), np.array([0, 1, 0, 1])
            >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=20)
            >>> fitted = cal.fit(s, y, key=jax.random.key(0))
            >>> bool(np.allclose(fitted.eta(s), fitted.predict_logit(s)))  # no fields: eta alone
            True
        """
        return self._apply(scores, None, output="eta")

    def field_offset(self, fields: ArrayLike) -> jax.Array:
        """The field part :math:`g(x)` for ``[n, F]`` fields.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5]), np.array([0, 1, 0, 1])
            >>> x = np.array([[0], [1], [1], [0]])
            >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=20)
            >>> fitted = cal.fit(s, y, x, key=jax.random.key(0))
            >>> g = fitted.field_offset(x)
            >>> bool(np.allclose(fitted.predict_logit(s, x), fitted.eta(s) + g, atol=1e-6))
            True
        """
        if _shapes.is_traced(fields, self._network()):
            f = jnp.asarray(fields).reshape(-1, len(self.cardinalities))
            return field_mlp(f, *self._network())
        f = np.asarray(fields).reshape(-1, len(self.cardinalities))
        n = f.shape[0]
        size = _shapes.padded_size(n)
        _, _, network = self._padded_parts()
        out = _field_offset(_shapes.pad_axis(f, size), *network)
        return _shapes.unpad(out, n)

    def predict_logit(self, scores: ArrayLike, fields: ArrayLike | None = None) -> jax.Array:
        r""":math:`\eta(l) + g(x)` for ``[n]`` scores and ``[n, F]`` fields.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5]), np.array([0, 1, 0, 1])
            >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=20)
            >>> fitted = cal.fit(s, y, key=jax.random.key(0))
            >>> bool(np.allclose(fitted.predict(s), 1 / (1 + np.exp(-fitted.predict_logit(s)))))
            True
        """
        scores, fields = self._checked(scores, fields)
        return self._apply(scores, fields, output="logit")

    def predict(self, scores: ArrayLike, fields: ArrayLike | None = None) -> jax.Array:
        """Calibrated probabilities ``sigmoid(eta(l) + g(x))``, in the shape of ``scores``
        (any shape without fields; ``[n]`` with ``[n, F]`` fields).

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5]), np.array([0, 1, 0, 1])
            >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=20)
            >>> fitted = cal.fit(s, y, key=jax.random.key(0))
            >>> fitted.predict(np.zeros((2, 3))).shape
            (2, 3)
        """
        scores, fields = self._checked(scores, fields)
        return self._apply(scores, fields, output="prob")


@partial(jit, static_argnames=("score_type", "output", "use_fields"))
def _predict_neural(
    scores,
    fields,
    knots,
    values,
    emb,
    offsets,
    linear,
    weights,
    biases,
    *,
    score_type,
    output,
    use_fields,
):
    z = piecewise_linear(to_logit(scores, score_type), knots, values)
    if output != "eta" and use_fields:
        z = z + field_mlp(fields, emb, offsets, linear, weights, biases)
    return jax.nn.sigmoid(z) if output == "prob" else z


@jit
def _field_offset(fields, emb, offsets, linear, weights, biases):
    return field_mlp(fields, emb, offsets, linear, weights, biases)
