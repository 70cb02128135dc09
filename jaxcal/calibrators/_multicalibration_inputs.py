"""Inputs of :class:`jaxcal.MulticalibrationBoosting`: its hyperparameters, feature tables
turned into codes, scores turned into logits, and codes given directly (the pure fit and
``predict_codes``), all checked eagerly with a ``ValueError`` that names the bad input."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal import _shapes
from jaxcal._features import CATEGORICAL, FeatureEncoder, encode_features, feature_columns

__all__ = [
    "SCORE_TYPES",
    "check_hyperparameters",
    "encode_table",
    "logits_host",
    "logits_pure",
    "check_codes",
    "histogram_width",
]

SCORE_TYPES = ("auto", "logit", "probability")


def _integer(value: Any, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")


def _number(value: Any, name: str, *, positive: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)
    if not ok or not np.isfinite(value) or value < 0 or (positive and value == 0):
        what = "a positive" if positive else "a non-negative"
        raise ValueError(f"{name} must be {what} finite number; got {value!r}.")


def check_hyperparameters(est: Any) -> None:
    """Raise ``ValueError`` for an invalid hyperparameter of the estimator ``est``."""
    _integer(est.max_depth, "max_depth", 1)
    if est.max_depth > 10:
        raise ValueError(f"max_depth must be at most 10 (2^10 leaves); got {est.max_depth}.")
    _integer(est.n_rounds, "n_rounds", 1)
    _integer(est.n_bins, "n_bins", 2)
    _integer(est.patience, "patience", 1)
    _number(est.learning_rate, "learning_rate", positive=True)
    _number(est.l2, "l2")
    _number(est.min_child_weight, "min_child_weight")
    _number(est.min_samples, "min_samples")
    _number(est.min_split_gain, "min_split_gain")
    if not isinstance(est.early_stopping, bool):
        raise ValueError(f"early_stopping must be True or False; got {est.early_stopping!r}.")
    if est.early_stopping:
        _integer(est.n_folds, "n_folds", 2)
    if est.score_type not in SCORE_TYPES:
        raise ValueError(f"score_type must be one of {SCORE_TYPES}; got {est.score_type!r}.")


def histogram_width(n_levels: tuple[int, ...], n_bins: int) -> int:
    """Bins of the histograms: enough for every column's codes and the score's ``n_bins``,
    rounded up to a multiple of 16, so that tables of similar cardinalities share one
    compiled program."""
    need = max((n_bins, *n_levels))
    return -(-need // 16) * 16


def encode_table(
    features: Any, n: int | None, *, categorical: Any, numeric: Any, n_bins: int
) -> tuple[np.ndarray, FeatureEncoder | None]:
    """``[n, d]`` int32 codes of a feature table of ``n`` rows (any number if ``None``) and
    its encoder (``[n, 0]`` and ``None`` without a table); numeric columns get ``n_bins``
    quantile bins."""
    if features is None:
        if categorical is not None or numeric is not None:
            raise ValueError("categorical= and numeric= name columns of features; pass features.")
        return np.zeros((n or 0, 0), np.int32), None
    columns = feature_columns(features, name="features", n=n)
    return encode_features(columns, categorical=categorical, numeric=numeric, n_bins=n_bins)


def categorical_flags(encoder: FeatureEncoder | None) -> np.ndarray:
    """``[d]`` bool: which columns of the encoder are categorical."""
    kinds = () if encoder is None else encoder.kinds
    return np.array([k == CATEGORICAL for k in kinds], bool)


def resolve_score_type(score_type: str, scores: Any) -> str:
    """``"auto"`` made concrete from concrete training scores: ``"probability"`` when every
    finite one lies in [0, 1], else ``"logit"``. Traced scores keep ``"auto"``: the program
    decides (:func:`probability_flag`)."""
    if score_type != "auto" or isinstance(scores, jax.core.Tracer):
        return score_type
    s = np.asarray(scores, np.float64)
    s = s[np.isfinite(s)]
    return "probability" if ((s >= 0) & (s <= 1)).all() else "logit"


def probability_flag(scores: jax.Array) -> jax.Array:
    """``"auto"`` inside a program: whether every finite training score lies in [0, 1]."""
    inside = (scores >= 0) & (scores <= 1)
    return jnp.all(jnp.where(jnp.isfinite(scores), inside, True))


def logits_host(scores: np.ndarray, score_type: str, dtype: Any) -> np.ndarray:
    """Logits of checked scores in NumPy (probabilities clipped to ``[eps, 1 - eps]`` of
    ``dtype``, so that 0 and 1 give finite logits)."""
    s = np.asarray(scores, np.float64)
    if score_type == "probability":
        if ((s < 0) | (s > 1)).any():
            raise ValueError(
                'scores must lie in [0, 1] for score_type="probability"; got values in '
                f'[{s.min():.6g}, {s.max():.6g}] (pass score_type="logit" for logits).'
            )
        eps = float(jnp.finfo(dtype).eps)
        p = np.clip(s, eps, 1 - eps)
        s = np.log(p) - np.log1p(-p)
    return s.astype(dtype)


def logits_pure(
    scores: jax.Array, score_type: str, flag: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """:func:`logits_host` in JAX, and whether any score was out of the domain (``"auto"``:
    ``flag`` says whether the scores are probabilities)."""
    if score_type == "logit":
        return scores, ~jnp.all(jnp.isfinite(scores))
    eps = jnp.finfo(scores.dtype).eps
    p = jnp.clip(scores, eps, 1 - eps)
    z = jnp.log(p) - jnp.log1p(-p)
    inside = (scores >= 0) & (scores <= 1)
    if score_type == "auto":
        return jnp.where(flag, z, scores), ~jnp.all(jnp.where(flag, inside, jnp.isfinite(scores)))
    return z, ~jnp.all(inside)


def check_codes(codes: Any, n: int, n_levels: tuple[int, ...] | None, *, name: str = "codes"):
    """Integer codes ``[n, d]`` for the pure fit or ``predict_codes``.

    Concrete codes are checked here (integers in ``[0, n_levels[j])``; ``n_levels`` defaults
    to each column's largest code plus one); traced codes need ``n_levels`` and give an
    ``invalid`` flag for codes out of range (the NaN policy).

    Returns:
        ``(codes int32 [n, d], n_levels, invalid)``.
    """
    if codes is None:
        if n_levels:
            raise ValueError(f"n_levels has {len(n_levels)} entries but no {name} were given.")
        return jnp.zeros((n, 0), jnp.int32), (), jnp.zeros((), bool)
    if n_levels is not None:
        n_levels = tuple(int(k) for k in n_levels)
        if any(k < 1 for k in n_levels):
            raise ValueError(f"n_levels must be positive integers; got {n_levels}.")
    if _shapes.is_traced(codes):
        x = jnp.asarray(codes)
        if x.ndim != 2 or x.shape[0] != n or not jnp.issubdtype(x.dtype, jnp.integer):
            raise ValueError(f"{name} must be an integer array [{n}, d]; got {x.dtype} {x.shape}.")
        if n_levels is None:
            raise ValueError(
                f"traced {name} need n_levels= (the number of codes of each column fixes the "
                "program's shapes)."
            )
        if len(n_levels) != x.shape[1]:
            raise ValueError(
                f"n_levels has {len(n_levels)} entries but {name} {x.shape[1]} columns."
            )
        top = jnp.asarray(n_levels, x.dtype)
        invalid = jnp.any((x < 0) | (x >= top))
        return jnp.clip(x, 0, top - 1).astype(jnp.int32), n_levels, invalid
    x = np.asarray(codes)
    if x.ndim != 2 or x.shape[0] != n:
        raise ValueError(
            f"{name} must be a 2-D array [{n}, d] of integer codes; got shape {x.shape}."
        )
    if x.dtype.kind not in "biu":
        raise ValueError(f"{name} must hold integer codes; got dtype {x.dtype}.")
    if x.size and x.min() < 0:
        raise ValueError(f"{name} must be non-negative integer codes; got {x.min()}.")
    seen = tuple(int(v) + 1 for v in x.max(axis=0)) if x.shape[0] else (1,) * x.shape[1]
    if n_levels is None:
        n_levels = seen
    elif len(n_levels) != x.shape[1]:
        raise ValueError(f"n_levels has {len(n_levels)} entries but {name} {x.shape[1]} columns.")
    over = [j for j in range(x.shape[1]) if seen[j] > n_levels[j]]
    if over:
        j = over[0]
        raise ValueError(
            f"{name} column {j} holds code {seen[j] - 1}, beyond its n_levels {n_levels[j]}."
        )
    return jnp.asarray(x, jnp.int32), n_levels, jnp.zeros((), bool)
