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
  table per field, ``rank`` columns): :math:`g(x) = v^\top e(x) +
  \mathrm{MLP}(e(x))`, ReLU hidden layers of widths ``hidden`` and a scalar output without
  bias (the intercept lives in :math:`\eta`). The linear skip term :math:`v^\top e(x)`
  carries additive per-field offsets even where every ReLU unit is inactive for a field
  value (without it, dead units floor the offset of extreme field values; we saw a true
  offset of -1 recovered as -0.55).

The loss is the weighted log-loss of ``jaxcal.losses`` (so ``propensity=`` / ``loss=``
work as for every calibrator) plus the isotonic penalty and ``l2 / 2`` times the squared
norm of the field network's parameters, minimised by Adam with a cosine-decayed learning
rate, full batch or minibatch, in one ``lax.scan``. The initialisation (and the minibatches)
draw from the JAX key that ``fit`` requires (``key=jax.random.key(0)``).

**Inside jit.** On traced inputs (inside a caller's ``jit``, ``vmap`` or ``grad``, or with a
traced ``key``), ``fit`` is :meth:`NeuralCalibration.fit_pure`: the knots, the
initialisation and the optimiser loop run in the program, on the shapes of the eager fit,
so the numbers are the eager fit's. Traced fields need ``cardinalities=``. The fitted
parameters after the fixed number of steps are differentiable in the labels, propensities
and weights through the loop (a ``lax.scan``); the knots are order statistics of the
training logits. Invalid data gives NaN, and so does a traced ``predict`` of a non-finite
score.

Example:
    >>> import jax, jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> fields = rng.integers(0, 3, size=(2000, 2))
    >>> logits = rng.normal(size=2000)
    >>> labels = rng.uniform(size=2000) < 1 / (1 + np.exp(-(logits + fields[:, 0] - 1)))
    >>> cal = jaxcal.NeuralCalibration(n_steps=300)
    >>> fitted = cal.fit(logits, labels, fields, key=jax.random.key(0))
    >>> probs = fitted.predict(logits, fields)
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

# jaxcal.debias imports calibrators._base; importing it first keeps the import order acyclic.
from jaxcal import _shapes
from jaxcal._fitdata import poison, prepare_fit, prepare_fit_pure
from jaxcal._jit import jit
from jaxcal._validation import check_1d, check_int, check_key, check_real, check_scores
from jaxcal.calibrators._base import check_choice
from jaxcal.calibrators._neural_core import (
    MONOTONE,
    SCORE_TYPES,
    field_mlp,
    init_params,
    piecewise_linear,
    quantile_knots,
    to_logit,
    to_logit_host,
    train,
    training_loss,
)
from jaxcal.calibrators._neural_fields import (
    check_fields,
    fields_and_cardinalities,
    fields_pure,
    table_offsets,
)
from jaxcal.calibrators._neural_fitted import FittedNeuralCalibration
from jaxcal.calibrators._scaling import fit_dtype, fit_scaling, pure_identity_scaling
from jaxcal.metrics._keys import key_parts

__all__ = [
    "NeuralCalibration",
    "FittedNeuralCalibration",
    "piecewise_linear",
    "field_mlp",
    "objective",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class NeuralCalibration:
    r"""Field-aware neural calibration estimator (Pan et al., WWW 2020); ``fit`` returns a
    :class:`FittedNeuralCalibration`.

    Args:
        n_knots: number of knots :math:`K + 1` of :math:`\eta` (>= 2; placed at equally
            spaced quantiles of the training logits, duplicates removed).
        monotone: ``"penalty"`` (isotonic penalty, the paper) or ``"hard"`` (strictly
            increasing :math:`b` by construction).
        isotonic_penalty: :math:`\lambda \ge 0` of :math:`\lambda\sum_k (b_k - b_{k+1})_+`
            (used with ``monotone="penalty"``).
        rank: columns of every field embedding table.
        hidden: widths of the ReLU hidden layers of :math:`g` (``()``: linear in the
            embeddings).
        l2: L2 penalty on the field network (embeddings and MLP).
        learning_rate: peak Adam learning rate (cosine decay over ``n_steps``).
        n_steps: optimisation steps (a fixed number: no stopping rule).
        batch_size: minibatch size (sampled with replacement each step) or ``None`` for
            full-batch steps.
        score_type: ``"logit"`` (scores are uncalibrated logits, the paper's :math:`l`) or
            ``"probability"`` (mapped to logits).

    Raises:
        ValueError: an invalid hyperparameter, when the estimator is made.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> logits, fields = rng.normal(size=500), rng.integers(0, 4, size=(500, 1))
        >>> labels = rng.uniform(size=500) < 1 / (1 + np.exp(-logits - (fields[:, 0] == 3)))
        >>> cal = jaxcal.NeuralCalibration(n_knots=5, rank=2, hidden=(), n_steps=200)
        >>> fitted = cal.fit(logits, labels, fields, key=jax.random.key(0))
        >>> fitted.embeddings.shape, fitted.predict(logits[:3], fields[:3]).shape
        ((4, 2), (3,))
        >>> jaxcal.NeuralCalibration(learning_rate=0.0)
        Traceback (most recent call last):
        ...
        ValueError: learning_rate must be a finite number and > 0; got 0.0.
    """

    n_knots: int = 20
    monotone: str = "penalty"
    isotonic_penalty: float = 1.0
    rank: int = 4
    hidden: tuple[int, ...] = (16,)
    l2: float = 1e-4
    learning_rate: float = 0.05
    n_steps: int = 1000
    batch_size: int | None = None
    score_type: str = "logit"

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _check_hyperparameters(self) -> None:
        check_int(self.n_knots, "n_knots", minimum=2)
        check_choice(self.monotone, "monotone", MONOTONE)
        check_choice(self.score_type, "score_type", SCORE_TYPES)
        check_real(self.isotonic_penalty, "isotonic_penalty", minimum=0.0)
        check_real(self.l2, "l2", minimum=0.0)
        check_int(self.rank, "rank")
        if not isinstance(self.hidden, tuple):
            raise ValueError(f"hidden must be a tuple of layer widths; got {self.hidden!r}.")
        for h in self.hidden:
            check_int(h, "hidden layer width")
        check_int(self.n_steps, "n_steps")
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size")
        check_real(self.learning_rate, "learning_rate", minimum=0.0, strict=True)

    def init_params(self, knots: np.ndarray, cardinalities: tuple[int, ...], *, key: jax.Array):
        """Initial parameters: identity :math:`\\eta` (``b = knots``), small embeddings,
        zero output layer (so :math:`g \\equiv 0` at the start).

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> cal = jaxcal.NeuralCalibration(rank=2, hidden=(3,))
            >>> params = cal.init_params(np.array([-1.0, 0.0, 1.0]), (4, 2), key=jax.random.key(0))
            >>> params["emb"].shape, [w.shape for w in params["weights"]]
            ((6, 2), [(4, 3), (3, 1)])
        """
        return init_params(
            jnp.asarray(knots),
            check_key(key),
            monotone=self.monotone,
            n_rows=int(sum(cardinalities)),
            n_fields=len(cardinalities),
            rank=self.rank,
            hidden=self.hidden,
        )

    def _rates(self, asarray, dtype) -> tuple:
        """The traced hyperparameters of the training program: the isotonic penalty (0
        unless ``monotone="penalty"``), ``l2`` and the learning rate, as ``dtype`` arrays
        (``asarray``: ``np.asarray`` for the eager fit, ``jnp.asarray`` for the pure one)."""
        penalty = self.isotonic_penalty if self.monotone == "penalty" else 0.0
        return tuple(asarray(v, dtype) for v in (penalty, self.l2, self.learning_rate))

    def _train_options(self, use_fields: bool, n_rows: int) -> dict:
        """The static options of the training program, shared by the eager and pure fits."""
        return {
            "monotone": self.monotone,
            "n_steps": int(self.n_steps),
            "batch_size": None if self.batch_size is None else int(self.batch_size),
            "use_fields": use_fields,
            "n_rows": _shapes.padded_size(n_rows) if n_rows else 0,
            "rank": int(self.rank),
            "hidden": tuple(int(h) for h in self.hidden),
        }

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        fields: ArrayLike | None = None,
        *,
        key: jax.Array,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
        cardinalities: tuple[int, ...] | None = None,
    ) -> FittedNeuralCalibration:
        """Fit :math:`q(l, x) = \\sigma(\\eta(l) + g(x))` on a calibration set.

        Args:
            scores: ``[n]`` uncalibrated logits (or probabilities, see ``score_type``).
            labels: ``[n]`` 0/1 labels.
            fields: ``[n, F]`` (or ``[n]`` for one field) non-negative integer field ids,
                or ``None`` to fit :math:`\\eta` alone.
            key: a JAX PRNG key (``jax.random.key(0)``; required): the initialisation of
                the field network and the minibatches.
            sample_weight, propensity, loss: the loss weighting (``jaxcal.losses``).
            cardinalities: per-field number of values (default: max id + 1 per column).
                Give it when later data may hold values absent from the calibration set.

        Returns:
            A :class:`FittedNeuralCalibration`, its float leaves in the dtype of ``scores``.

        Raises:
            ValueError: a ``key`` that is not a JAX PRNG key, or invalid data (NaN scores,
                labels not 0/1, one class, length mismatch, negative weights, non-integer or
                negative field ids, constant scores, cardinalities too small). On traced
                inputs (inside ``jit``, ``vmap``, ``grad``, or a traced ``key``) ``fit`` is
                :meth:`fit_pure`, where invalid data gives NaN instead.

        Example:
            >>> import jax, jaxcal, numpy as np
            >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5]), np.array([0, 1, 0, 1])
            >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=20)
            >>> cal.fit(s, y, key=jax.random.key(0)).knots.shape
            (3,)
        """
        if _shapes.is_traced(scores, labels, fields, sample_weight, propensity, key):
            return self.fit_pure(
                scores,
                labels,
                fields,
                sample_weight=sample_weight,
                propensity=propensity,
                loss=loss,
                cardinalities=cardinalities,
                key=key,
            )
        key = check_key(key)
        s = check_scores(scores)
        if self.score_type == "probability" and ((s < 0) | (s > 1)).any():
            raise ValueError('scores must lie in [0, 1] for score_type="probability".')
        dtype = fit_dtype(scores)
        data = prepare_fit(s, labels, sample_weight=sample_weight, propensity=propensity, loss=loss)
        n = s.shape[0]
        # logits the working precision cannot hold are rescaled by an exact power of two (the
        # map is piecewise linear in the logit; probabilities are not rescaled)
        scalable = self.score_type == "logit"
        scaling, s = fit_scaling(
            s,
            data.weights,
            shift=False,
            scale=scalable,
            need_spread=True,
            what="NeuralCalibration",
            dtype=dtype,
        )
        logits = to_logit_host(s, self.score_type, dtype)
        keep = data.weights > 0
        knots = np.unique(np.quantile(logits[keep], np.linspace(0, 1, self.n_knots)))
        if knots.shape[0] < 2:
            raise ValueError("scores are constant; a calibration map in the score needs spread.")
        x, cards = None, ()
        if fields is not None:
            x, cards = fields_and_cardinalities(fields, n, cardinalities)
        # pad the rows (zero weight), the knots (copies of the last, up to n_knots) and the
        # embedding rows (never looked up) to sizes that do not depend on the data
        size = _shapes.padded_size(n)
        rows = _shapes.pad_rows(size, logits, data.targets, data.weights, fills=(logits[0], 0, 0))
        k = knots.shape[0]
        params, values = self._train(
            *(jax.device_put(np.asarray(a, dtype)) for a in rows[:1]),
            None if x is None else jax.device_put(_shapes.pad_axis(x, size)),  # id 0 is valid
            *(jax.device_put(np.asarray(a, dtype)) for a in rows[1:]),
            n,
            jax.device_put(np.asarray(_shapes.pad_axis(knots, self.n_knots, knots[-1]), dtype)),
            k,
            cards,
            key,
            rates=self._rates(np.asarray, dtype),
        )
        host = jax.device_get(params)
        return self._fitted(
            jax.device_put(np.asarray(knots, dtype)),
            jax.device_put(np.asarray(values)[:k]),
            jax.device_put(host["emb"][: sum(cards)]),
            params,
            cards,
            scaling,
        )

    def fit_pure(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        fields: ArrayLike | None = None,
        *,
        key: jax.Array,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
        cardinalities: tuple[int, ...] | None = None,
    ) -> FittedNeuralCalibration:
        """The pure fit: the calibrator of :meth:`fit`, computed in JAX alone.

        The knots (quantiles of the logits, duplicates merged), the initialisation and the
        Adam loop (one ``lax.scan``) run in the program, on the same padded shapes as
        :meth:`fit`, so the numbers are :meth:`fit`'s (the same key, the same minibatches);
        the result's ``knots`` and ``values`` hold ``n_knots`` entries, the distinct knots
        then copies of the last. It runs inside ``jit``, under ``vmap`` (one problem per
        row, or one key per row) and ``jvp`` / ``grad`` (with respect to the labels,
        propensities and weights, through the fixed number of optimiser steps; the knots
        are order statistics of the scores), and exports with ``jax.export``. Data
        :meth:`fit` would refuse (non-finite scores, labels not 0/1, a single class,
        probabilities outside [0, 1], constant scores, field ids outside the
        cardinalities) give a calibrator of NaN.

        Args:
            scores, labels, fields, key, sample_weight, propensity, loss: as in :meth:`fit`.
            cardinalities: as in :meth:`fit`; needed when ``fields`` are traced.

        Returns:
            A :class:`FittedNeuralCalibration`.

        Raises:
            ValueError: a ``key`` that is not a JAX PRNG key, invalid shapes, traced fields
                without ``cardinalities``.

        Example:
            >>> import jax, jaxcal, jax.numpy as jnp
            >>> s, y = jnp.array([-1.0, -0.2, 0.3, 1.5]), jnp.array([0, 1, 0, 1])
            >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=20)
            >>> fit = jax.jit(lambda s, y, key: cal.fit_pure(s, y, key=key).predict(s))
            >>> fit(s, y, jax.random.key(0)).shape
            (4,)
        """
        key = check_key(key)
        data = prepare_fit_pure(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        s, dtype = data.scores, data.scores.dtype
        n = s.shape[0]
        invalid = data.invalid
        if self.score_type == "probability":
            invalid = invalid | jnp.any((s < 0) | (s > 1))
        logits = to_logit(s, self.score_type)
        knots, k = quantile_knots(logits, data.weights, int(self.n_knots))
        invalid = invalid | (k < 2)
        if fields is not None:
            x, cards, bad_fields = fields_pure(fields, n, cardinalities)
            invalid = invalid | bad_fields
        else:
            x, cards = None, ()
        size = _shapes.padded_size(n)  # the shapes of fit: the same numbers
        pad = partial(jnp.pad, pad_width=(0, size - n))
        params, values = self._train(
            jnp.concatenate([logits, jnp.broadcast_to(logits[0], (size - n,))]),
            None if x is None else jnp.pad(x, ((0, size - n), (0, 0))),  # id 0 is valid
            pad(data.targets),
            pad(data.weights),
            n,
            knots,
            k,
            cards,
            key,
            rates=self._rates(jnp.asarray, dtype),
            eps_root=float(jnp.finfo(dtype).tiny),
        )
        fitted = self._fitted(
            knots, values, params["emb"][: sum(cards)], params, cards, pure_identity_scaling(dtype)
        )
        return poison(fitted, invalid)

    def _train(self, logits, fields, targets, weights, n, knots, k, cards, key, *, rates, **extra):
        """The training program (``_neural_core.train``) on rows padded past the ``n`` real
        ones and knots past the ``k`` real ones, with the checked ``key``:
        ``(params, values)``."""
        key, key_impl = key_parts(key)
        params, values, _ = train(
            logits,
            fields,
            targets,
            weights,
            n,
            knots,
            k,
            table_offsets(cards),
            *rates,
            key,
            **self._train_options(fields is not None, int(sum(cards))),
            key_impl=key_impl,
            **extra,
        )
        return params, values

    def _fitted(self, knots, values, embeddings, params, cards, scaling) -> FittedNeuralCalibration:
        return FittedNeuralCalibration(
            knots=knots,
            values=values,
            embeddings=embeddings,
            linear=params["linear"],
            weights=tuple(params["weights"]),
            biases=tuple(params["biases"]),
            cardinalities=cards,
            score_type=self.score_type,
            scaling=scaling,
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
    """The training objective at a fitted calibrator (for diagnostics and tests): the
    weighted mean log loss, plus ``isotonic_penalty`` times the drops of :math:`\\eta`'s
    knot values, plus ``l2 / 2`` times the squared norm of the field network, in the
    fitted calibrator's dtype.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.calibrators.neural import objective
        >>> s, y = np.array([-1.0, -0.2, 0.3, 1.5]), np.array([0, 1, 0, 1])
        >>> cal = jaxcal.NeuralCalibration(n_knots=3, n_steps=50)
        >>> fitted = cal.fit(s, y, key=jax.random.key(0))
        >>> p = np.asarray(fitted.predict(s), np.float64)
        >>> log_loss = -np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))
        >>> bool(np.isclose(objective(fitted, s, y), log_loss))
        True
    """
    s = check_1d(scores, "scores")
    data = prepare_fit(s, labels, sample_weight=sample_weight)
    s = np.asarray(fitted.scaling.apply(s), np.float64)
    n = s.shape[0]
    size = _shapes.padded_size(n)  # padding: see _objective_core
    rows = _shapes.pad_rows(size, s, data.targets, data.weights, fills=(s[0], 0, 0))
    x = None if fields is None else _shapes.pad_axis(check_fields(fields, n, None), size)
    knots, values, (emb, offsets, linear, weights, biases) = fitted._padded_parts()
    params = {"u": values, "emb": emb, "linear": linear, "weights": weights, "biases": biases}
    dtype = np.dtype(fitted.knots.dtype)
    return _objective_core(
        params,
        *(np.asarray(a, dtype) for a in rows[:1]),
        x,
        *(np.asarray(a, dtype) for a in rows[1:]),
        knots,
        offsets,
        np.asarray(isotonic_penalty, dtype),
        np.asarray(l2, dtype),
        score_type=fitted.score_type,
    )


@partial(jit, static_argnames=("score_type",))
def _objective_core(params, scores, fields, t, w, knots, offsets, penalty, l2, *, score_type):
    # padding adds nothing: rows of zero weight, knots repeating the last one (no drop
    # between them for the penalty), embedding rows of zeros
    logits = to_logit(scores, score_type)
    return training_loss(params, logits, fields, t, w, knots, offsets, penalty, l2, "penalty")
