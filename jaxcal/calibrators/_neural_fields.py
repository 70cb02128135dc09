"""Field ids of the neural calibrator (:mod:`jaxcal.calibrators.neural`): the eager checks,
the cardinalities (the sizes of the embedding tables, one per field) and the traced ids of
the pure fit."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal import _shapes

__all__ = ["check_fields", "fields_and_cardinalities", "fields_pure", "table_offsets"]


def check_fields(fields: Any, n: int, cardinalities: tuple[int, ...] | None) -> np.ndarray:
    """``[n, F]`` int32 field ids (``[n]``: one field), checked on the host against
    ``cardinalities`` (None: any non-negative ids).

    Raises:
        ValueError: not ``n`` rows of non-negative integer ids, another number of fields
            than ``cardinalities``, or an id at or above its field's cardinality.
    """
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


def _cardinalities(cardinalities, n_fields: int) -> tuple[int, ...]:
    cards = tuple(int(c) for c in cardinalities)
    if len(cards) != n_fields:
        raise ValueError(
            f"cardinalities has {len(cards)} entries but fields has {n_fields} columns."
        )
    return cards


def fields_and_cardinalities(
    fields: Any, n: int, cardinalities: tuple[int, ...] | None
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Concrete training fields checked (:func:`check_fields`), with the cardinalities:
    those given, checked against the ids, or the largest id + 1 per field."""
    x = check_fields(fields, n, None)
    if cardinalities is None:
        return x, tuple(int(c) for c in x.max(axis=0) + 1)
    cards = _cardinalities(cardinalities, x.shape[1])
    check_fields(x, n, cards)
    return x, cards


def fields_pure(fields, n: int, cardinalities) -> tuple[jax.Array, tuple[int, ...], jax.Array]:
    """Fields for the pure fit: ``([n, F] int32 ids, cardinalities, invalid)``. Concrete
    fields are checked eagerly (and give the cardinalities, as in ``fit``); traced fields
    need ``cardinalities`` (the embedding tables' shapes), and ids outside them make the
    fit invalid (NaN)."""
    if not _shapes.is_traced(fields):
        x, cards = fields_and_cardinalities(fields, n, cardinalities)
        return jnp.asarray(x), cards, jnp.zeros((), bool)
    x = jnp.asarray(fields)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] != n or not jnp.issubdtype(x.dtype, jnp.integer):
        raise ValueError(
            f"fields must be an integer array [{n}, F]; got {x.dtype} of shape {x.shape}."
        )
    if cardinalities is None:
        raise ValueError(
            "traced fields need cardinalities= (the sizes of the embedding tables are part "
            "of the program's shapes): pass the per-field number of values."
        )
    cards = _cardinalities(cardinalities, x.shape[1])
    invalid = jnp.any((x < 0) | (x >= jnp.asarray(cards, x.dtype)))
    return jnp.clip(x, 0, jnp.asarray(cards, x.dtype) - 1).astype(jnp.int32), cards, invalid


def table_offsets(cardinalities: tuple[int, ...]) -> np.ndarray:
    """``[F]`` int32 row offset of each field's table in the stacked embeddings."""
    cards = tuple(cardinalities)
    return np.concatenate([[0], np.cumsum(cards)[:-1]]).astype(np.int32)[: len(cards)]
