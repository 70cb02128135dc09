r"""Field-aware neural calibration (Pan, Lee, Tian, Sun, Yang, WWW 2020).

The calibrated probability of a sample with uncalibrated logit :math:`l` and categorical
fields :math:`x = (x_1, \dots, x_F)` is

.. math:: q(l, x) = \sigma\bigl(\eta(l) + g(x)\bigr).

* :math:`\eta` is piecewise linear in the logit with knots :math:`a_0 < \dots < a_K` (the
  quantiles of the training logits) and values :math:`b_k = \eta(a_k)`:
  :math:`\eta(l) = b_k + (l - a_k)\frac{b_{k+1} - b_k}{a_{k+1} - a_k}` on
  :math:`[a_k, a_{k+1}]`, constant beyond the end knots (the paper's
  :math:`b + \sum_k w_k \min\{(l - a_k)_+, a_{k+1} - a_k\}`). Monotonicity is either
  *encouraged* by the isotonic penalty :math:`\lambda \sum_k (b_k - b_{k+1})_+`
  (``monotone="penalty"``, the paper's ILPS loss) or *enforced* (``monotone="hard"``: the
  values are the image of unconstrained parameters under numpyro's
  ``biject_to(constraints.ordered_vector)``, :math:`b_{k+1} = b_k + e^{u_{k+1}}`).
* :math:`g` is a small network over the concatenated field embeddings :math:`e(x)` (one
  table per field, ``embedding_dim`` columns): :math:`g(x) = v^\top e(x) +
  \mathrm{MLP}(e(x))`, ReLU hidden layers of widths ``hidden`` and a scalar output without
  bias (the intercept lives in :math:`\eta`). The linear skip term :math:`v^\top e(x)`
  carries additive per-field offsets even where every ReLU unit is inactive for a field
  value (without it, dead units floor the offset of extreme field values; we saw a true
  offset of -1 recovered as -0.55).

The loss is the weighted log-loss of ``jaxcal.debias.losses`` (so ``propensity=`` / ``loss=``
work as for every calibrator) plus the isotonic penalty and ``l2 / 2`` times the squared
norm of the field network's parameters, minimised by Adam with a cosine-decayed learning
rate, full batch or minibatch, in one ``lax.scan``.

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> fields = rng.integers(0, 3, size=(2000, 2))
    >>> logits = rng.normal(size=2000)
    >>> labels = rng.uniform(size=2000) < 1 / (1 + np.exp(-(logits + fields[:, 0] - 1)))
    >>> cal = jaxcal.NeuralCalibration(n_steps=300).fit(logits, labels, fields)
    >>> probs = cal.predict(logits, fields)
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike
from numpyro.distributions import biject_to, constraints

# jaxcal.debias imports calibrators._base; importing it first keeps the import order acyclic.
import jaxcal.debias.losses  # noqa: F401
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_1d, check_scores
from jaxcal.calibrators._base import FittedCalibrator, prepare_fit

__all__ = [
    "NeuralCalibration",
    "FittedNeuralCalibration",
    "piecewise_linear",
    "field_mlp",
    "objective",
]

MONOTONE = ("penalty", "hard")
SCORE_TYPES = ("logit", "probability")


# --------------------------------------------------------------------------- pure core


def piecewise_linear(logits: jax.Array, knots: jax.Array, values: jax.Array) -> jax.Array:
    """Linear interpolation of ``values`` at ``knots``, constant beyond the end knots."""
    lo = jnp.clip(logits, knots[0], knots[-1])
    k = jnp.clip(jnp.searchsorted(knots, lo, side="right") - 1, 0, knots.shape[0] - 2)
    a0, a1 = knots[k], knots[k + 1]
    frac = (lo - a0) / (a1 - a0)
    return values[k] + frac * (values[k + 1] - values[k])


def field_mlp(
    fields: jax.Array,
    embeddings: jax.Array,
    offsets: jax.Array,
    linear: jax.Array,
    weights: tuple[jax.Array, ...],
    biases: tuple[jax.Array, ...],
) -> jax.Array:
    """``g(x) = v . e(x) + MLP(e(x))``: embed, concatenate, linear skip + ReLU MLP -> ``[n]``."""
    emb = embeddings[fields + offsets]  # [n, F, d]
    e = emb.reshape(emb.shape[0], -1)
    h = e
    for w, b in zip(weights[:-1], biases, strict=True):
        h = jax.nn.relu(h @ w + b)
    return e @ linear + (h @ weights[-1])[:, 0]


def _to_logit(scores: jax.Array, score_type: str) -> jax.Array:
    if score_type == "logit":
        return scores
    tiny = jnp.finfo(jnp.result_type(scores, float)).eps
    p = jnp.clip(scores, tiny, 1 - tiny)
    return jnp.log(p) - jnp.log1p(-p)


def _values(u: jax.Array, monotone: str) -> jax.Array:
    if monotone == "hard":
        return biject_to(constraints.ordered_vector)(u)
    return u


def _values_inverse(b: jax.Array, monotone: str) -> jax.Array:
    if monotone == "hard":
        return biject_to(constraints.ordered_vector).inv(b)
    return b


def _logit_q(params, logits, fields, knots, offsets, monotone):
    eta = piecewise_linear(logits, knots, _values(params["u"], monotone))
    if fields is None:
        return eta
    g = field_mlp(
        fields, params["emb"], offsets, params["linear"], params["weights"], params["biases"]
    )
    return eta + g


def _objective(params, logits, fields, t, w, knots, offsets, penalty, l2, monotone):
    z = _logit_q(params, logits, fields, knots, offsets, monotone)
    data = jnp.sum(w * (jax.nn.softplus(z) - t * z)) / jnp.sum(w)
    b = _values(params["u"], monotone)
    iso = penalty * jnp.sum(jax.nn.relu(b[:-1] - b[1:]))
    net = [params["emb"], params["linear"], *params["weights"], *params["biases"]]
    reg = 0.5 * l2 * sum(jnp.sum(a**2) for a in net)
    return data + iso + reg


@partial(
    jax.jit,
    static_argnames=("monotone", "n_steps", "batch_size", "learning_rate", "use_fields"),
)
def _train(
    params,
    logits,
    fields,
    t,
    w,
    knots,
    offsets,
    penalty,
    l2,
    key,
    *,
    monotone: str,
    n_steps: int,
    batch_size: int | None,
    learning_rate: float,
    use_fields: bool,
):
    schedule = optax.cosine_decay_schedule(learning_rate, n_steps, alpha=1e-3)
    opt = optax.adam(schedule)
    n = logits.shape[0]

    def loss(p, idx):
        f = fields[idx] if use_fields else None
        return _objective(p, logits[idx], f, t[idx], w[idx], knots, offsets, penalty, l2, monotone)

    def step(carry, k):
        p, state = carry
        if batch_size is None:
            idx = jnp.arange(n)
        else:
            idx = jax.random.randint(jax.random.fold_in(key, k), (batch_size,), 0, n)
        value, grad = jax.value_and_grad(loss)(p, idx)
        updates, state = opt.update(grad, state, p)
        return (optax.apply_updates(p, updates), state), value

    (params, _), trace = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(n_steps))
    return params, trace


# ----------------------------------------------------------------------- fitted object


def _check_fields(fields: Any, n: int, cardinalities: tuple[int, ...] | None) -> np.ndarray:
    arr = np.asarray(fields)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"fields must be an integer array [n, F]; got shape {arr.shape}.")
    if arr.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {arr.shape[0]} rows of fields.")
    if arr.dtype.kind not in "biu":
        if arr.dtype.kind == "f" and np.isfinite(arr).all() and (arr == np.round(arr)).all():
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"fields must hold integer ids; got dtype {arr.dtype}.")
    if arr.size and arr.min() < 0:
        raise ValueError(f"fields must be non-negative integer ids; got min {arr.min()}.")
    if cardinalities is not None:
        if arr.shape[1] != len(cardinalities):
            raise ValueError(
                f"fields must have {len(cardinalities)} column(s), as in training; got "
                f"{arr.shape[1]}."
            )
        over = arr >= np.asarray(cardinalities)
        if over.any():
            r, c = np.argwhere(over)[0]
            raise ValueError(
                f"field {c} value {arr[r, c]} (row {r}) is >= its cardinality "
                f"{cardinalities[c]}: unseen field values have no embedding."
            )
    return arr.astype(np.int32)


@pytree_dataclass
class FittedNeuralCalibration(FittedCalibrator):
    r"""Fitted field-aware calibrator: ``predict(scores, fields) = sigmoid(eta(l) + g(x))``.

    Attributes:
        knots: ``[K + 1]`` increasing logit knots :math:`a_k`.
        values: ``[K + 1]`` :math:`b_k = \eta(a_k)`.
        embeddings: ``[sum_f C_f, d]`` stacked field embedding tables.
        linear: ``[F d]`` weights of the linear skip term.
        weights: MLP weight matrices (the last one ``[h, 1]``).
        biases: hidden-layer biases.
        cardinalities: per-field number of values :math:`C_f` (empty: no fields).
        score_type: ``"logit"`` or ``"probability"`` (probabilities are mapped to logits,
            clipped to machine epsilon).
    """

    knots: jax.Array
    values: jax.Array
    embeddings: jax.Array
    linear: jax.Array
    weights: tuple
    biases: tuple
    cardinalities: tuple = static_field(default=())
    score_type: str = static_field(default="logit")

    @property
    def offsets(self) -> jax.Array:
        """Row offset of each field's table inside ``embeddings``."""
        return jnp.asarray(np.concatenate([[0], np.cumsum(self.cardinalities)[:-1]]), jnp.int32)

    def _checked(self, scores, fields):
        if not isinstance(scores, jax.core.Tracer):
            s = np.asarray(scores)
            if not np.isfinite(s).all():
                raise ValueError("scores contain non-finite values (NaN or inf).")
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
            fields = _check_fields(fields, n, self.cardinalities)
        return scores, fields

    def eta(self, scores: ArrayLike) -> jax.Array:
        r"""The score part :math:`\eta(l)` (a logit), any input shape."""
        s = jnp.asarray(scores)
        lo = _to_logit(s, self.score_type)
        return piecewise_linear(lo.reshape(-1), self.knots, self.values).reshape(s.shape)

    def field_offset(self, fields: ArrayLike) -> jax.Array:
        """The field part :math:`g(x)` for ``[n, F]`` fields."""
        f = jnp.asarray(fields).reshape(-1, len(self.cardinalities))
        return field_mlp(f, self.embeddings, self.offsets, self.linear, self.weights, self.biases)

    def predict_logit(self, scores: ArrayLike, fields: ArrayLike | None = None) -> jax.Array:
        r""":math:`\eta(l) + g(x)` for ``[n]`` scores and ``[n, F]`` fields."""
        scores, fields = self._checked(scores, fields)
        s = jnp.asarray(scores).reshape(-1)
        z = self.eta(s)
        if fields is not None:
            z = z + self.field_offset(fields)
        return z

    def predict(self, scores: ArrayLike, fields: ArrayLike | None = None) -> jax.Array:
        """Calibrated probabilities ``sigmoid(eta(l) + g(x))`` (``[n]``)."""
        return jax.nn.sigmoid(self.predict_logit(scores, fields))


# ------------------------------------------------------------------------- estimator


def _positive_int(value, name, *, allow_none=False, minimum=1):
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")


def _non_negative(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a non-negative number; got {value!r}.")
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value!r}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NeuralCalibration:
    r"""Field-aware neural calibration estimator (Pan et al., WWW 2020).

    Args:
        n_knots: number of knots :math:`K + 1` of :math:`\eta` (>= 2; placed at equally
            spaced quantiles of the training logits, duplicates removed).
        monotone: ``"penalty"`` (isotonic penalty, the paper) or ``"hard"`` (strictly
            increasing :math:`b` by construction).
        isotonic_penalty: :math:`\lambda \ge 0` of :math:`\lambda\sum_k (b_k - b_{k+1})_+`
            (used with ``monotone="penalty"``).
        embedding_dim: columns of every field embedding table.
        hidden: widths of the ReLU hidden layers of :math:`g` (``()``: linear in the
            embeddings).
        l2: L2 penalty on the field network (embeddings and MLP).
        learning_rate: peak Adam learning rate (cosine decay over ``n_steps``).
        n_steps: optimisation steps.
        batch_size: minibatch size (sampled with replacement each step) or ``None`` for
            full-batch steps.
        score_type: ``"logit"`` (scores are uncalibrated logits, the paper's :math:`l`) or
            ``"probability"`` (mapped to logits).
    """

    n_knots: int = 20
    monotone: str = "penalty"
    isotonic_penalty: float = 1.0
    embedding_dim: int = 4
    hidden: tuple[int, ...] = (16,)
    l2: float = 1e-4
    learning_rate: float = 0.05
    n_steps: int = 1000
    batch_size: int | None = None
    score_type: str = "logit"

    def _validate(self) -> None:
        _positive_int(self.n_knots, "n_knots", minimum=2)
        if self.monotone not in MONOTONE:
            raise ValueError(f"monotone must be one of {MONOTONE}; got {self.monotone!r}.")
        if self.score_type not in SCORE_TYPES:
            raise ValueError(f"score_type must be one of {SCORE_TYPES}; got {self.score_type!r}.")
        _non_negative(self.isotonic_penalty, "isotonic_penalty")
        _non_negative(self.l2, "l2")
        _positive_int(self.embedding_dim, "embedding_dim")
        if not isinstance(self.hidden, tuple):
            raise ValueError(f"hidden must be a tuple of layer widths; got {self.hidden!r}.")
        for h in self.hidden:
            _positive_int(h, "hidden layer width")
        _positive_int(self.n_steps, "n_steps")
        _positive_int(self.batch_size, "batch_size", allow_none=True)
        _non_negative(self.learning_rate, "learning_rate")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0; got {self.learning_rate!r}.")

    def init_params(self, knots: np.ndarray, cardinalities: tuple[int, ...], *, key: jax.Array):
        """Initial parameters: identity :math:`\\eta` (``b = knots``), small embeddings,
        zero output layer (so :math:`g \\equiv 0` at the start)."""
        dtype = jnp.asarray(knots).dtype
        u = _values_inverse(jnp.asarray(knots), self.monotone)
        k_emb, *k_layers = jax.random.split(key, len(self.hidden) + 2)
        total = int(sum(cardinalities))
        emb = 0.1 * jax.random.normal(k_emb, (total, self.embedding_dim), dtype)
        widths = [len(cardinalities) * self.embedding_dim, *self.hidden]
        weights, biases = [], []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            scale = np.sqrt(2.0 / max(fan_in, 1))
            weights.append(scale * jax.random.normal(k_layers[i], (fan_in, fan_out), dtype))
            biases.append(jnp.zeros(fan_out, dtype))
        weights.append(jnp.zeros((widths[-1], 1), dtype))
        linear = jnp.zeros(widths[0], dtype)
        return {
            "u": u,
            "emb": emb,
            "linear": linear,
            "weights": tuple(weights),
            "biases": tuple(biases),
        }

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        fields: ArrayLike | None = None,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
        cardinalities: tuple[int, ...] | None = None,
        key: jax.Array | None = None,
    ) -> FittedNeuralCalibration:
        """Fit :math:`q(l, x) = \\sigma(\\eta(l) + g(x))` on a calibration set.

        Args:
            scores: ``[n]`` uncalibrated logits (or probabilities, see ``score_type``).
            labels: ``[n]`` 0/1 labels.
            fields: ``[n, F]`` (or ``[n]`` for one field) non-negative integer field ids,
                or ``None`` to fit :math:`\\eta` alone.
            sample_weight, propensity, loss: the loss weighting (``jaxcal.debias.losses``).
            cardinalities: per-field number of values (default: max id + 1 per column).
                Give it when later data may hold values absent from the calibration set.
            key: ``jax.random`` key for the initialisation and minibatches (default
                ``jax.random.key(0)``).

        Returns:
            A :class:`FittedNeuralCalibration`.

        Raises:
            ValueError: invalid hyperparameters or data (NaN scores, labels not 0/1, one
                class, length mismatch, negative weights, non-integer or negative field ids,
                constant scores, cardinalities too small).
        """
        self._validate()
        s = check_scores(scores)
        if self.score_type == "probability" and ((s < 0) | (s > 1)).any():
            raise ValueError('scores must lie in [0, 1] for score_type="probability".')
        data = prepare_fit(s, labels, sample_weight=sample_weight, propensity=propensity, loss=loss)
        n = s.shape[0]
        logits = np.asarray(_to_logit(jnp.asarray(s), self.score_type))
        keep = data.weights > 0
        knots = np.unique(np.quantile(logits[keep], np.linspace(0, 1, self.n_knots)))
        if knots.shape[0] < 2:
            raise ValueError("scores are constant; a calibration map in the score needs spread.")
        if fields is not None:
            x = _check_fields(fields, n, None)
            seen = tuple(int(c) for c in x.max(axis=0) + 1)
            if cardinalities is None:
                cards = seen
            else:
                cards = tuple(int(c) for c in cardinalities)
                if len(cards) != x.shape[1]:
                    raise ValueError(
                        f"cardinalities has {len(cards)} entries but fields has {x.shape[1]} "
                        "columns."
                    )
                _check_fields(x, n, cards)
        else:
            x, cards = None, ()
        key = jax.random.key(0) if key is None else key
        params = self.init_params(knots, cards, key=jax.random.fold_in(key, 0))
        offsets = jnp.asarray(np.concatenate([[0], np.cumsum(cards)[:-1]]), jnp.int32)
        params, _ = _train(
            params,
            jnp.asarray(logits),
            None if x is None else jnp.asarray(x),
            jnp.asarray(data.targets),
            jnp.asarray(data.weights),
            jnp.asarray(knots),
            offsets[: len(cards)],
            float(self.isotonic_penalty) if self.monotone == "penalty" else 0.0,
            float(self.l2),
            jax.random.fold_in(key, 1),
            monotone=self.monotone,
            n_steps=int(self.n_steps),
            batch_size=None if self.batch_size is None else int(self.batch_size),
            learning_rate=float(self.learning_rate),
            use_fields=x is not None,
        )
        return FittedNeuralCalibration(
            knots=jnp.asarray(knots),
            values=_values(params["u"], self.monotone),
            embeddings=params["emb"],
            linear=params["linear"],
            weights=tuple(params["weights"]),
            biases=tuple(params["biases"]),
            cardinalities=cards,
            score_type=self.score_type,
        )


def objective(
    fitted: FittedNeuralCalibration,
    scores: ArrayLike,
    labels: ArrayLike,
    fields: ArrayLike | None = None,
    *,
    sample_weight: ArrayLike | None = None,
    isotonic_penalty: float = 0.0,
    l2: float = 0.0,
) -> jax.Array:
    """The training objective at a fitted calibrator (for diagnostics and tests)."""
    s = check_1d(scores, "scores")
    data = prepare_fit(s, labels, sample_weight=sample_weight)
    params = {
        "u": fitted.values,
        "emb": fitted.embeddings,
        "linear": fitted.linear,
        "weights": fitted.weights,
        "biases": fitted.biases,
    }
    logits = _to_logit(jnp.asarray(s), fitted.score_type)
    x = None if fields is None else jnp.asarray(_check_fields(fields, s.shape[0], None))
    return _objective(
        params,
        logits,
        x,
        jnp.asarray(data.targets),
        jnp.asarray(data.weights),
        fitted.knots,
        fitted.offsets,
        isotonic_penalty,
        l2,
        "penalty",
    )
