"""Eager input validation for the public entry points.

Every public ``fit`` / metric / loader calls these *before* any ``jit``: they raise a
``ValueError`` that names the problem and what to do, so nothing fails deep inside XLA.
They return NumPy arrays (float64 unless stated) that the caller hands to the jitted core.

Inside a caller's ``jit`` / ``vmap`` / ``grad`` (traced inputs), :func:`check_pure` and its
helpers do the same checks without the host: shapes and dtypes raise, values set an
``invalid`` flag, and :func:`nan_where` turns the result into NaN.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "PrecisionWarning",
    "distinct_sorted",
    "warn_precision_loss",
    "check_1d",
    "check_finite_array",
    "check_key",
    "check_scores",
    "check_probs",
    "check_labels",
    "check_sample_weight",
    "check_propensity",
    "check_two_classes",
    "check_fit_inputs",
    "check_batch_inputs",
    "check_groups",
    "PureInputs",
    "float_array",
    "pure_1d",
    "pure_weights_invalid",
    "check_pure",
    "nan_where",
]


class PrecisionWarning(UserWarning):
    """Rounding the training scores to JAX's working precision (float32 unless x64 is
    enabled) merged distinct scores into ties, so the fit differs from a float64 fit.

    Raised (once per ``fit`` call) when more than :data:`TIE_WARN_FRACTION` of the distinct
    float64 scores are lost; filter it with ``warnings.filterwarnings("ignore",
    category=jaxcal.calibrators.PrecisionWarning)``.
    """


#: share of the distinct training scores that the cast to the working dtype may merge before
#: a :class:`PrecisionWarning`: ordinary float64 samples lose about ``n * 7e-9`` of their
#: distinct values to float32 rounding (0.7% of a million standard-normal scores: pairs
#: closer than one part in 10^7, which move no calibration map), so only samples of several
#: million scores reach it by chance; scores whose spread float32 cannot resolve lose most.
TIE_WARN_FRACTION = 0.05


def distinct_sorted(rows: np.ndarray) -> np.ndarray:
    """Number of distinct values in each row of ``[B, n]`` rows sorted ascending, NaN last
    (NaN marks entries that do not count)."""
    valid = ~np.isnan(rows)
    new = valid[:, 1:] & (rows[:, 1:] != rows[:, :-1])
    return valid[:, 0].astype(np.int64) + new.sum(axis=1)


def warn_precision_loss(
    n_float64: np.ndarray, n_working: np.ndarray, dtype: Any, *, what: str, stacklevel: int = 4
) -> None:
    """A :class:`PrecisionWarning` when the cast to ``dtype`` merged more than
    :data:`TIE_WARN_FRACTION` of the distinct scores of some problem (``[B]`` counts of
    distinct values before and after the cast)."""
    n64 = np.asarray(n_float64)
    lost = n64 - np.asarray(n_working)
    bad = np.flatnonzero(lost > TIE_WARN_FRACTION * n64)
    if not bad.size:
        return
    b = int(bad[np.argmax(lost[bad])])
    where = f"problem {b}: " if n64.size > 1 else ""
    more = f" ({bad.size} problems in all)" if bad.size > 1 else ""
    warnings.warn(
        f"{what}: {where}rounding the training scores to {np.dtype(dtype).name} (JAX's working "
        f"precision) merged {int(n64[b])} distinct scores into {int(n64[b] - lost[b])} ties"
        f"{more}: scores closer than the dtype's spacing at their magnitude become equal, so "
        "the fit differs from a float64 fit. Enable float64 "
        "(jax.config.update('jax_enable_x64', True)) or subtract a typical score first.",
        PrecisionWarning,
        stacklevel=stacklevel,
    )


def _describe(values: np.ndarray, limit: int = 5) -> str:
    uniq = np.unique(values)
    shown = ", ".join(repr(v.item()) for v in uniq[:limit])
    return "{" + shown + (", ..." if uniq.size > limit else "") + "}"


def _to_array(x: Any, name: str, asarray: Any = np.asarray) -> Any:
    """``asarray(x)``, or ``ValueError`` naming ``name`` for ``None`` and what does not
    convert."""
    if x is None:
        raise ValueError(f"{name} is required; got None.")
    try:
        return asarray(x)
    except Exception as exc:
        raise ValueError(f"{name} could not be converted to an array: {exc}") from exc


def _check_numeric(arr: Any, name: str) -> None:
    """``ValueError`` naming ``name`` unless ``arr`` holds booleans, integers or floats."""
    if arr.dtype.kind not in "biuf":
        first = f" (e.g. {np.asarray(np.asarray(arr).flat[0]).item()!r})" if arr.size else ""
        raise ValueError(f"{name} must be numeric; got dtype {arr.dtype}{first}.")


def check_1d(x: Any, name: str, *, dtype=np.float64, allow_empty: bool = False) -> np.ndarray:
    """Convert ``x`` to a 1-D NumPy array of ``dtype``; reject other ranks and empty input."""
    arr = _to_array(x, name)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {arr.shape}.")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty; need at least one value.")
    _check_numeric(arr, name)
    return arr.astype(dtype, copy=False)


def check_finite_array(x: Any, name: str = "scores") -> np.ndarray:
    """``x`` as a float64 NumPy array of any shape whose every entry is a finite number;
    otherwise one ``ValueError`` naming ``name`` (strings, objects, NaN, inf), never a
    NumPy ``TypeError``.

    Example:
        >>> check_finite_array([[0.5, 1.0]]).shape
        (1, 2)
        >>> check_finite_array(["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: scores must be numeric; got dtype <U1 (e.g. 'a').
    """
    arr = _to_array(x, name)
    _check_numeric(arr, name)
    arr = arr.astype(np.float64, copy=False)
    if not _all_finite(arr):
        bad = ~np.isfinite(arr)
        if bad.any():
            raise ValueError(
                f"{name} contain {int(bad.sum())} non-finite value(s) (NaN or inf); remove or "
                "impute them first."
            )
    return arr


def check_key(key: Any, *, name: str = "key") -> Any:
    """A single JAX PRNG key: a typed key (``jax.random.key(0)``, shape ``()``) or a legacy
    raw key (``jax.random.PRNGKey(0)``, ``uint32[2]``), returned as a JAX array; anything
    else (``None``, a seed, a string, a batch of keys) raises one ``ValueError`` naming
    ``name``. Tracers of those types pass (their shape and dtype are static).

    Example:
        >>> import jax
        >>> check_key(jax.random.key(0)).shape
        ()
        >>> check_key("abc")
        Traceback (most recent call last):
        ...
        ValueError: key must be a JAX PRNG key such as jax.random.key(0) ...; got str 'abc'.
    """
    import jax
    import jax.numpy as jnp

    need = "a JAX PRNG key such as jax.random.key(0) (or a legacy jax.random.PRNGKey(0))"
    if key is None:
        raise ValueError(f"{name} is required: pass {name}=jax.random.key(seed).")
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(
                f"{name} must be a single PRNG key; got an array of keys of shape {key.shape} "
                "(pass one key, or split it inside)."
            )
        return key
    if isinstance(key, jax.Array):
        if key.shape == (2,) and key.dtype == jnp.uint32:
            return key
        got = f"an array of shape {key.shape} and dtype {key.dtype}"
    else:
        try:
            arr = np.asarray(key)
        except Exception:
            arr = None
        if arr is not None and arr.shape == (2,) and arr.dtype == np.uint32:
            return jnp.asarray(arr)
        shown = repr(key)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        got = f"{type(key).__name__} {shown}"
    raise ValueError(f"{name} must be {need}; got {got}.")


def check_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """``value`` as a Python int ``>= minimum`` (bools refused); else a ``ValueError``
    naming ``name``.

    Example:
        >>> check_int(3, "n_bins", minimum=2)
        3
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def check_real(value: Any, name: str, *, minimum: float | None = None, strict: bool = False):
    """``value`` as a finite float, ``>= minimum`` (``> minimum`` with ``strict``) when a
    minimum is given; else a ``ValueError`` naming ``name``.

    Example:
        >>> check_real(0.5, "overconfidence", minimum=0.0, strict=True)
        0.5
    """
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    ok = ok and bool(np.isfinite(value))
    if ok and minimum is not None:
        ok = value > minimum if strict else value >= minimum
    if not ok:
        bound = "" if minimum is None else f" and {'>' if strict else '>='} {minimum:g}"
        raise ValueError(f"{name} must be a finite number{bound}; got {value!r}.")
    return float(value)


def _all_finite(x: np.ndarray) -> bool:
    """True iff every entry is finite, in one pass without temporaries: a sum of finite
    numbers is finite unless it overflows, and NaN / inf propagate. ``False`` means
    "maybe not" (callers then locate the bad entries exactly)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.sum(x)))


def check_scores(scores: Any, *, name: str = "scores") -> np.ndarray:
    """Finite, non-empty 1-D float64 scores."""
    s = check_1d(scores, name)
    if _all_finite(s):
        return s
    bad = ~np.isfinite(s)
    if bad.any():
        kinds = []
        if np.isnan(s).any():
            kinds.append("NaN")
        if np.isinf(s).any():
            kinds.append("inf")
        raise ValueError(
            f"{name} contain {int(bad.sum())} non-finite value(s) ({'/'.join(kinds)}), "
            f"first at index {int(np.flatnonzero(bad)[0])}; remove or impute them first."
        )
    return s


def check_probs(probs: Any, *, name: str = "probs") -> np.ndarray:
    """Finite probabilities in [0, 1]."""
    p = check_scores(probs, name=name)
    if (p < 0).any() or (p > 1).any():
        raise ValueError(
            f"{name} must lie in [0, 1]; got min {p.min():.6g}, max {p.max():.6g}. "
            "Pass probabilities, not scores or logits."
        )
    return p


def check_labels(labels: Any, n: int | None = None, *, name: str = "labels") -> np.ndarray:
    """Binary labels (0/1 or bool) as float64; length ``n`` when given."""
    y = check_1d(labels, name, dtype=np.float64)
    valid = (y == 0.0) | (y == 1.0)
    if not valid.all():
        if np.isnan(y).any():
            raise ValueError(f"{name} contain NaN; labels must be 0/1.")
        raise ValueError(f"{name} must be 0/1; got values {_describe(y[~valid])}.")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {y.shape[0]} {name}.")
    return y


def check_sample_weight(sample_weight: Any, n: int, *, name: str = "sample_weight") -> np.ndarray:
    """Finite non-negative weights with a positive sum; ``None`` means all ones."""
    if sample_weight is None:
        return np.ones(n)
    w = check_scores(sample_weight, name=name)
    if w.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {w.shape[0]} {name}.")
    if not w.min() >= 0:
        raise ValueError(
            f"{name} must be non-negative; got {int((w < 0).sum())} negative value(s) "
            f"(min {w.min():.6g})."
        )
    if not (w > 0).any():  # not w.sum(): it overflows for weights near the float64 maximum
        raise ValueError(f"{name} sum to zero; at least one weight must be positive.")
    return w


def check_propensity(propensity: Any, n: int, *, name: str = "propensity") -> np.ndarray:
    """Propensities (exposure probabilities) in (0, 1]."""
    p = check_scores(propensity, name=name)
    if p.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {p.shape[0]} {name} values.")
    if (p <= 0).any():
        raise ValueError(
            f"{name} must be > 0 (it divides the labels); got {int((p <= 0).sum())} value(s) "
            f"<= 0 (min {p.min():.6g}). Clip propensities from below, e.g. at 0.1."
        )
    if (p > 1).any():
        raise ValueError(
            f"{name} must be <= 1 (it is a probability); got max {p.max():.6g}. "
            "Rescale relative propensities first."
        )
    return p


def check_two_classes(labels: np.ndarray, weights: np.ndarray, *, what: str = "labels") -> None:
    """Both classes must carry positive weight, or a calibration map is not identified."""
    # sums of non-negative terms (dot products: one pass, no temporaries) are > 0 iff
    # some term is
    pos = float(np.dot(weights, labels))
    neg = float(np.dot(weights, 1.0 - labels))
    if pos <= 0 or neg <= 0:
        only = "1" if neg <= 0 else "0"
        raise ValueError(
            f"{what} contain only one class (all {only} where the weight is positive); "
            "calibration needs both positives and negatives."
        )


def check_fit_inputs(
    scores: Any, labels: Any, sample_weight: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate one calibration problem; returns float64 (scores, labels, weights)."""
    s = check_scores(scores)
    y = check_labels(labels, s.shape[0])
    w = check_sample_weight(sample_weight, s.shape[0])
    check_two_classes(y, w)
    return s, y, w


def check_batch_inputs(
    scores: Any, labels: Any, *, mask: Any = None, sample_weight: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``B`` problems stored as ``[B, n]`` arrays with an optional boolean mask.

    Returns float64 ``(scores, labels, weights, mask)``; masked-out entries may hold
    anything (they are replaced by 0 / 0 / weight 0), but every problem must have both
    classes among its unmasked entries.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] == 0 or s.shape[1] == 0:
        raise ValueError(f"batched scores must be a non-empty [B, n] array; got shape {s.shape}.")
    y = np.asarray(labels, dtype=np.float64)
    if y.shape != s.shape:
        raise ValueError(f"shape mismatch: scores {s.shape} but labels {y.shape}.")
    m = None if mask is None else np.asarray(mask).astype(bool)
    if m is not None and m.shape != s.shape:
        raise ValueError(f"shape mismatch: scores {s.shape} but mask {m.shape}.")
    w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
    if w is not None and w.shape != s.shape:
        raise ValueError(f"shape mismatch: scores {s.shape} but sample_weight {w.shape}.")
    for name, arr in (("scores", s), ("sample_weight", w)):
        if arr is None or _all_finite(arr):
            continue
        bad = ~np.isfinite(arr) if m is None else m & ~np.isfinite(arr)
        if bad.any():
            b, i = np.argwhere(bad)[0]
            raise ValueError(f"{name} contain non-finite values (first at [{b}, {i}]).")
    valid = (y == 0.0) | (y == 1.0)
    if m is not None:
        valid |= ~m
    if not valid.all():
        raise ValueError(f"labels must be 0/1; got values {_describe(y[~valid])}.")
    if w is not None and not np.min(w) >= 0:  # NaN (masked) or negative entries: look closer
        neg = w < 0 if m is None else m & (w < 0)
        if neg.any():
            raise ValueError("sample_weight must be non-negative.")
    if m is None:
        w = np.ones(s.shape) if w is None else w
        m = np.ones(s.shape, bool)
    else:
        w = m.astype(np.float64) if w is None else np.where(m, w, 0.0)
        s, y = np.where(m, s, 0.0), np.where(m, y, 0.0)
    pos = np.einsum("ij,ij->i", w, y)
    neg = np.einsum("ij,ij->i", w, 1.0 - y)
    one = np.flatnonzero((pos <= 0) | (neg <= 0))
    if one.size:
        raise ValueError(
            f"{one.size} problem(s) contain only one class among unmasked entries "
            f"(first: row {int(one[0])}); calibration needs both positives and negatives."
        )
    return s, y, w, m


def check_groups(group: Any, n: int, *, name: str = "group") -> np.ndarray:
    """Integer group ids of length ``n`` (any integers; they are re-coded 0..G-1 by callers)."""
    g = np.asarray(group)
    if g.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {g.shape}.")
    if g.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {g.shape[0]} {name} ids.")
    if g.dtype.kind not in "biu":
        if g.dtype.kind == "f" and np.all(np.isfinite(g)) and np.all(g == np.round(g)):
            g = g.astype(np.int64)
        else:
            raise ValueError(f"{name} must hold integer ids; got dtype {g.dtype}.")
    return g.astype(np.int64)


def check_mask(mask: Any, shape: tuple[int, ...], *, like: str) -> np.ndarray:
    """A boolean ``mask`` of ``shape``, the shape of the array named ``like`` (default: all
    ``True``); 0/1 numbers are accepted."""
    m = np.ones(shape, bool) if mask is None else np.asarray(mask)
    if m.shape != shape:
        raise ValueError(f"shape mismatch: {like} {shape} but mask {m.shape}.")
    if m.dtype != bool:
        if not np.isin(m, (0, 1)).all():
            raise ValueError("mask must be boolean (or 0/1).")
        m = m.astype(bool)
    return m


# ----------------------------------------------------------------- inside a caller's trace
#
# The public metrics take their pure core when an input is a JAX tracer (inside ``jit``,
# ``vmap``, ``grad`` or ``jax.export``): no NumPy, no padding. Checks of shapes and dtypes
# are static there and still raise ``ValueError``; checks of values cannot raise, so they
# become an ``invalid`` flag and the result is NaN (:func:`nan_where`): never a plausible
# number.


class PureInputs(NamedTuple):
    """Possibly traced ``[n]`` inputs of a metric, as JAX arrays of one float dtype (the
    first input's, or JAX's default float for integers), and ``invalid``: a scalar bool,
    true where the eager checks would have raised."""

    values: Any  #: probabilities (or scores)
    labels: Any  #: labels
    weights: Any  #: sample weights (ones for ``None``)
    invalid: Any  #: scalar bool


def float_array(x: Any, name: str, *, dtype: Any = None) -> Any:
    """``x`` as a JAX array of a float dtype (``dtype``, else its own float dtype, else JAX's
    default float); a non-numeric dtype raises ``ValueError`` (static under a trace)."""
    import jax.numpy as jnp

    arr = _to_array(x, name, jnp.asarray)
    _check_numeric(arr, name)
    if dtype is None:
        dtype = arr.dtype if arr.dtype.kind == "f" else jnp.result_type(float)
    return arr.astype(dtype)


def pure_1d(x: Any, name: str, *, n: int | None = None, dtype: Any = None) -> Any:
    """:func:`check_1d` for a possibly traced array: rank, emptiness, dtype and the length
    ``n`` (when given) are static and raise ``ValueError``; returns a JAX float array."""
    arr = float_array(x, name, dtype=dtype)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {arr.shape}.")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty; need at least one value.")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {arr.shape[0]} {name}.")
    return arr


def pure_weights_invalid(w: Any) -> Any:
    """Whether weights fail :func:`check_sample_weight`'s value checks (a non-finite or
    negative weight, or none positive)."""
    import jax.numpy as jnp

    return jnp.any(~jnp.isfinite(w) | (w < 0)) | ~jnp.any(w > 0)


def check_pure(
    values: Any,
    labels: Any,
    sample_weight: Any = None,
    *,
    name: str = "probs",
    probabilities: bool = True,
    two_classes: bool = False,
) -> PureInputs:
    """The checks of :func:`check_probs` (or :func:`check_scores` with
    ``probabilities=False``), :func:`check_labels`, :func:`check_sample_weight` (and
    :func:`check_two_classes` if asked) for possibly traced inputs.

    Shapes and dtypes raise ``ValueError`` (they are static under a trace); the value checks
    set ``invalid``: a non-finite value, a probability outside [0, 1], a label not 0/1, a
    negative or non-finite weight, no positive weight (or no weight on one class). Nothing
    runs on the host, so this works inside ``jit``, ``vmap``, ``grad`` and ``jax.export``.
    """
    import jax.numpy as jnp

    v = pure_1d(values, name)
    n = v.shape[0]
    y = pure_1d(labels, "labels", n=n, dtype=v.dtype)
    if sample_weight is None:
        w = jnp.ones_like(v)
    else:
        w = pure_1d(sample_weight, "sample_weight", n=n, dtype=v.dtype)
    bad = ~jnp.isfinite(v)
    if probabilities:
        bad = bad | (v < 0) | (v > 1)
    invalid = jnp.any(bad) | jnp.any((y != 0) & (y != 1)) | pure_weights_invalid(w)
    if two_classes:
        invalid = invalid | ~(jnp.sum(w * y) > 0) | ~(jnp.sum(w * (1 - y)) > 0)
    return PureInputs(v, y, w, invalid)


def nan_where(invalid: Any, tree: Any) -> Any:
    """``tree`` with every floating-point leaf NaN where ``invalid`` is true: the NaN policy
    of the traced metrics (invalid data never gives a plausible number)."""
    import jax
    import jax.numpy as jnp

    def leaf(x):
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        return jnp.where(invalid, jnp.nan, x)

    return jax.tree.map(leaf, tree)
