"""Sources of labelled scores in chunks: what ``fit_chunks`` reads, and the checks each chunk
passes before anything is compiled.

A *source* is

* a list (or tuple) of chunks, or
* a zero-argument callable returning an iterator of chunks, called once per pass over the
  data (a fit reads its data several times), so that only one chunk need be in memory.

A *chunk* is a tuple ``(scores, labels)``, ``(scores, labels, sample_weight)`` or
``(scores, labels, sample_weight, propensity)`` (``sample_weight`` may be ``None``), or a
mapping with the keys ``"scores"``, ``"labels"`` and optionally ``"sample_weight"`` and
``"propensity"``: 1-D arrays of one length, as ``fit`` takes them. Empty chunks are skipped.
:func:`chunk_source` checks the source eagerly; :func:`read_chunk` checks a chunk and names it
(by its position in the pass) in every ``ValueError``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from jaxcal._validation import check_labels, check_propensity, check_scores
from jaxcal.losses import LOSSES

__all__ = ["Chunk", "chunk_source", "read_chunk", "targets_weights", "CHUNK_FORM"]

#: how a chunk is written, for messages
CHUNK_FORM = "(scores, labels[, sample_weight[, propensity]])"
_KEYS = ("scores", "labels", "sample_weight", "propensity")


class Chunk(NamedTuple):
    """A validated chunk: float64 ``scores``, ``labels``, ``sample_weight`` (ones when not
    given) and ``propensity`` (``None`` when not given), all ``[n]``."""

    scores: np.ndarray
    labels: np.ndarray
    sample_weight: np.ndarray
    propensity: np.ndarray | None


def chunk_source(source: Any) -> Callable[[], Iterator[Any]]:
    """A zero-argument callable returning an iterator of ``source``'s (unchecked) chunks.

    Raises:
        ValueError: a source that is neither a list or tuple of chunks nor a callable (an
            iterator, which can be read only once, says so).
    """
    if isinstance(source, list | tuple):
        return lambda: iter(source)
    if inspect.isgenerator(source) or isinstance(source, Iterator):
        raise ValueError(
            "the source is an iterator, which can be read only once, but the fit reads its "
            "data once per pass: pass a list of chunks or a zero-argument callable that "
            "returns a fresh iterator (e.g. lambda: read_my_chunks(path))."
        )
    if callable(source):
        return lambda: _iterate(source())
    raise ValueError(
        f"the source must be a list of {CHUNK_FORM} chunks or a zero-argument callable "
        f"returning an iterator of them; got {type(source).__name__}."
    )


def _iterate(chunks: Any) -> Iterator[Any]:
    try:
        return iter(chunks)
    except TypeError:
        raise ValueError(
            f"the source callable must return an iterator of {CHUNK_FORM} chunks; got "
            f"{type(chunks).__name__}."
        ) from None


def _fields(chunk: Any, k: int) -> tuple[Any, Any, Any, Any]:
    if isinstance(chunk, Mapping):
        unknown = sorted(set(chunk) - set(_KEYS))
        if unknown or "scores" not in chunk or "labels" not in chunk:
            raise ValueError(
                f"chunk {k} of the source: a mapping needs the keys 'scores' and 'labels' (and "
                f"optionally 'sample_weight', 'propensity'); got keys {sorted(chunk)}."
            )
        return tuple(chunk.get(key) for key in _KEYS)  # type: ignore[return-value]
    if isinstance(chunk, tuple | list) and 2 <= len(chunk) <= 4:
        return (*chunk, *(None,) * (4 - len(chunk)))  # type: ignore[return-value]
    what = f"a {len(chunk)}-tuple" if isinstance(chunk, tuple | list) else type(chunk).__name__
    raise ValueError(
        f"chunk {k} of the source is {what}, not a {CHUNK_FORM} tuple (to fit arrays held "
        "in memory, call fit(scores, labels))."
    )


def read_chunk(chunk: Any, k: int, *, loss: str, check: bool = True) -> Chunk | None:
    """Validate chunk ``k`` of a pass (``None`` for an empty chunk). ``check=False`` (a pass
    over chunks that an earlier pass checked) checks the shapes only.

    Raises:
        ValueError: a chunk that is not a tuple or mapping of the documented form, scores
            that are not 1-D (one score column) or not finite, labels that are not 0/1, a
            length mismatch, negative or non-finite weights, propensities outside (0, 1], or
            a loss that needs propensities the chunk does not have.
    """
    scores, labels, sample_weight, propensity = _fields(chunk, k)
    where = f"of chunk {k}"
    s = np.asarray(scores)
    if s.ndim != 1:
        raise ValueError(
            f"scores {where} must be 1-D (one score per row, one score column); got shape "
            f"{s.shape}."
        )
    if s.shape[0] == 0:
        return None
    if not check:
        return _converted(s, labels, sample_weight, propensity, where)
    s = check_scores(s, name=f"scores {where}")
    n = s.shape[0]
    y = check_labels(labels, n, name=f"labels {where}")
    v = np.ones(n) if sample_weight is None else _check_weights(sample_weight, n, where)
    omega = None
    if propensity is not None:
        omega = check_propensity(propensity, n, name=f"propensity {where}")
    elif loss != "naive":
        raise ValueError(
            f'loss="{loss}" needs per-row propensities, but chunk {k} has none: pass chunks '
            "(scores, labels, sample_weight, propensity)."
        )
    return Chunk(s, y, v, omega)


def _converted(s, labels, sample_weight, propensity, where: str) -> Chunk:
    """A chunk as float64 arrays, lengths checked, values not."""
    n = s.shape[0]
    arrays = [np.asarray(a, np.float64) for a in (s, labels)]
    arrays += [np.ones(n) if sample_weight is None else np.asarray(sample_weight, np.float64)]
    arrays += [None if propensity is None else np.asarray(propensity, np.float64)]
    if any(a is not None and a.shape != (n,) for a in arrays):
        shapes = [None if a is None else a.shape for a in arrays]
        raise ValueError(f"the arrays {where} have shapes {shapes}; need ({n},) each.")
    return Chunk(*arrays)


def _check_weights(sample_weight: Any, n: int, where: str) -> np.ndarray:
    """Finite non-negative weights (a chunk may have none positive)."""
    w = check_scores(sample_weight, name=f"sample_weight {where}")
    if w.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {w.shape[0]} sample_weight {where}.")
    if not w.min() >= 0:
        raise ValueError(f"sample_weight {where} must be non-negative; got min {w.min():.6g}.")
    return w


def targets_weights(chunk: Chunk, *, loss: str, kappa: float = 1.0):
    """The loss weighting's ``(t, w)`` of a chunk (``jaxcal.losses.loss_targets_weights``, in
    float64 NumPy), ``kappa`` being the ``"snips"`` normaliser of the whole data."""
    y, v = chunk.labels, chunk.sample_weight
    if loss == "naive":
        return y, v
    if loss not in LOSSES:  # pragma: no cover - checked by the caller
        raise ValueError(f"loss must be one of {LOSSES}; got {loss!r}.")
    inv = 1.0 / chunk.propensity
    if loss == "ips":
        return y * inv, v
    if loss == "ips_positive":
        return y, v * (y * inv + 1.0 - y)
    return y, v * (y * inv * kappa + 1.0 - y)
