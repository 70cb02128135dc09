"""Tables of features: reading, checking and encoding them as integer codes.

A *feature table* maps column names to 1-D arrays of one length: a ``dict`` of arrays, a
NumPy structured array, or any object with ``.columns`` and ``__getitem__`` (a pandas or
polars DataFrame; neither is imported). :func:`feature_columns` reads and checks it;
:func:`encode_features` turns it into ``[n, d]`` integer codes and a frozen
:class:`FeatureEncoder` that codes new tables the same way.

A column is *categorical* if its dtype is integer, bool, string or object, or if the caller
names it in ``categorical=(...)``; otherwise (float) it is *numeric*. Categorical levels
are coded ``0..K-1`` in sorted order (strings sorted as strings); numeric columns are cut
into quantile bins of the fitting table, closed on the right (``(e_{j-1}, e_j]``, the
convention of ``pandas.cut``), with one bin per distinct value when a column has at most
``n_bins`` distinct values. Each column has one more, reserved code (``K``, or the number
of bins): missing values (NaN, ``None``) and categories unseen when the encoder was fitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxcal._pytree import pytree_dataclass, static_field

__all__ = ["FeatureEncoder", "encode_features", "feature_columns"]

CATEGORICAL = "categorical"
NUMERIC = "numeric"


# ----------------------------------------------------------------------------- reading
def _raw_columns(features: Any, name: str) -> dict[Any, Any]:
    if isinstance(features, Mapping):
        return dict(features)
    if isinstance(features, np.ndarray) and features.dtype.names is not None:
        return {c: features[c] for c in features.dtype.names}
    if hasattr(features, "columns") and hasattr(features, "__getitem__"):
        return {c: features[c] for c in list(features.columns)}
    raise ValueError(
        f"{name} must be a table of columns: a dict of 1-D arrays, a NumPy structured array "
        f"or a DataFrame-like object with .columns; got {type(features).__name__}."
    )


def feature_columns(features: Any, *, name: str = "features", n: int | None = None):
    """Read and check a feature table: ``{column name: 1-D NumPy array}``.

    Args:
        features: a dict of 1-D arrays, a NumPy structured array, or an object with
            ``.columns`` and ``__getitem__`` (a DataFrame).
        name: what to call the table in error messages.
        n: the number of rows the table must have (the length of the scores), if given.

    Returns:
        A dict of column name -> 1-D NumPy array, in the table's column order. String
        columns are ``str`` arrays, object columns stay ``object``.

    Raises:
        ValueError: no columns; a name that is not a string; a column that is not 1-D, has
            an unsupported dtype (complex, dates), holds infinite numbers, or whose length
            differs from the others (or from ``n``).

    Example:
        >>> import numpy as np
        >>> cols = feature_columns({"country": ["fr", "de"], "age": np.array([31.0, 47.5])})
        >>> sorted(cols), cols["age"].dtype
        (['age', 'country'], dtype('float64'))
    """
    raw = _raw_columns(features, name)
    if not raw:
        raise ValueError(f"{name} has no columns; pass at least one feature column.")
    columns: dict[str, np.ndarray] = {}
    length = n
    first = None if n is None else "the scores"  # what fixed the length
    for key, values in raw.items():
        if not isinstance(key, str):
            raise ValueError(
                f"{name} column names must be strings; got {key!r} ({type(key).__name__})."
            )
        try:
            arr = np.asarray(values)
        except Exception as exc:  # pragma: no cover - exotic inputs
            raise ValueError(f"{name} column {key!r} could not be read as an array: {exc}") from exc
        if arr.ndim != 1:
            raise ValueError(
                f"{name} column {key!r} must be 1-D (one value per row); got shape {arr.shape}."
            )
        if arr.dtype.kind == "S":
            arr = np.char.decode(arr, "utf-8")
        if arr.dtype.kind not in "biufUO":
            raise ValueError(
                f"{name} column {key!r} has dtype {arr.dtype}; use numbers, booleans or strings "
                "(convert dates to numbers first)."
            )
        if arr.dtype.kind == "f" and np.isinf(arr).any():
            raise ValueError(
                f"{name} column {key!r} holds {int(np.isinf(arr).sum())} infinite value(s); "
                "replace them by finite values or NaN (NaN gets a bin of its own)."
            )
        if length is None:
            length, first = arr.shape[0], f"column {key!r}"
        elif arr.shape[0] != length:
            verb = "have" if first == "the scores" else "has"
            raise ValueError(
                f"{name} column {key!r} has {arr.shape[0]} rows but {first} {verb} {length}; "
                "every column needs one value per row."
            )
        columns[key] = arr
    if length == 0:
        raise ValueError(f"{name} has no rows.")
    return columns


# ---------------------------------------------------------------------------- encoding
def _missing(arr: np.ndarray) -> np.ndarray:
    """True where a value is missing: NaN in float columns, None / NaN in object columns."""
    if arr.dtype.kind == "f":
        return np.isnan(arr)
    if arr.dtype.kind == "O":
        return np.array([v is None or (isinstance(v, float) and v != v) for v in arr], bool)
    return np.zeros(arr.shape, bool)


def _category_values(arr: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """The comparable values of a categorical column: object columns by their string form."""
    if arr.dtype.kind == "O":
        out = np.full(arr.shape, "", dtype=object)
        out[~missing] = [str(v) for v in arr[~missing]]
        return out.astype(str)
    if arr.dtype.kind == "f":
        return np.where(missing, 0.0, arr)
    return arr


def _numeric_edges(x: np.ndarray, n_bins: int) -> np.ndarray:
    """Interior edges of right-closed quantile bins; one bin per value if few distinct."""
    distinct = np.unique(x)
    if distinct.size <= n_bins:
        return distinct[:-1].astype(np.float64)
    edges = np.unique(np.quantile(x, np.linspace(0.0, 1.0, n_bins + 1)))
    return edges[1:-1].astype(np.float64)


def _integer_table(cats: np.ndarray, values: np.ndarray, reserved: int) -> np.ndarray | None:
    """The code of every integer from the smallest category to the largest (``reserved``
    where none), when both are integers and the range is small; else ``None``."""
    exact = values.dtype.kind in "bi" or (values.dtype.kind == "u" and values.itemsize < 8)
    if not exact or cats.dtype.kind not in "biu":
        return None
    cats = cats.astype(np.int64)
    span = int(cats[-1]) - int(cats[0]) + 1
    if span > 4 * cats.size + 1024:
        return None
    table = np.full(span, reserved, np.int32)
    table[cats - cats[0]] = np.arange(cats.size, dtype=np.int32)
    return table


def _python_values(values: np.ndarray) -> tuple:
    return tuple(v.item() if isinstance(v, np.generic) else v for v in values)


@pytree_dataclass
class FeatureEncoder:
    """How a feature table becomes integer codes (see :func:`encode_features`).

    Attributes:
        edges: per column, the interior bin edges of a numeric column (float64, ascending;
            bin ``j`` is ``(edges[j-1], edges[j]]``), an empty array for a categorical one.
        names: the column names, in code order.
        kinds: ``"categorical"`` or ``"numeric"`` per column.
        categories: per column, the sorted categories of a categorical column (code ``k``
            is ``categories[k]``), ``()`` for a numeric one.
    """

    edges: tuple
    names: tuple = static_field()
    kinds: tuple = static_field()
    categories: tuple = static_field()

    @property
    def n_levels(self) -> tuple[int, ...]:
        """Codes per column, the reserved code (missing or unseen) included."""
        return tuple(
            len(c) + 1 if k == CATEGORICAL else int(np.shape(e)[0]) + 2
            for k, c, e in zip(self.kinds, self.categories, self.edges, strict=True)
        )

    def transform(self, features: Any, *, name: str = "features") -> np.ndarray:
        """``[n, d]`` int32 codes of a table with (at least) the encoder's columns.

        Unseen categories and missing values get each column's reserved code
        (``n_levels[j] - 1``); numbers outside the fitted range fall in the first or last bin.

        Example:
            >>> codes, enc = encode_features({"c": ["a", "b", "a"]})
            >>> enc.transform({"c": ["b", "z"]}).tolist()
            [[1], [2]]
        """
        cols = feature_columns(features, name=name)
        absent = [c for c in self.names if c not in cols]
        if absent:
            raise ValueError(
                f"{name} lacks the column(s) {absent} that the encoder was fitted on; "
                f"it has {list(cols)}."
            )
        n = next(iter(cols.values())).shape[0]
        codes = np.empty((n, len(self.names)), np.int32)
        for j, col in enumerate(self.names):
            codes[:, j] = self._code_column(j, cols[col], name)
        return codes

    def _code_column(self, j: int, arr: np.ndarray, name: str) -> np.ndarray:
        missing = _missing(arr)
        reserved = self.n_levels[j] - 1
        if self.kinds[j] == NUMERIC:
            if arr.dtype.kind not in "biuf":
                raise ValueError(
                    f"{name} column {self.names[j]!r} was numeric when the encoder was "
                    f"fitted; got dtype {arr.dtype}."
                )
            x = np.where(missing, 0.0, arr.astype(np.float64))
            code = np.searchsorted(np.asarray(self.edges[j]), x, side="left")
            return np.where(missing, reserved, code)
        cats = np.asarray(self.categories[j])
        values = _category_values(arr, missing)
        if cats.size == 0:
            return np.full(arr.shape, reserved)
        if (cats.dtype.kind in "U") != (values.dtype.kind in "U"):
            values = values.astype(str) if cats.dtype.kind == "U" else values
            if cats.dtype.kind != "U":  # strings against numeric categories: none match
                return np.full(arr.shape, reserved)
        table = _integer_table(cats, values, reserved)
        if table is not None:  # a few integer categories: one lookup per row
            offset = values.astype(np.int64) - int(cats[0])
            inside = (offset >= 0) & (offset < table.size) & ~missing
            return np.where(inside, table[np.where(inside, offset, 0)], reserved)
        pos = np.clip(np.searchsorted(cats, values), 0, cats.size - 1)
        found = (cats[pos] == values) & ~missing
        return np.where(found, pos, reserved)

    def level_label(self, j: int, code: int) -> str:
        """A readable name of code ``code`` of column ``j``: ``"fr"``, ``"(30, 41.5]"``,
        ``"missing"`` (the reserved code).

        Example:
            >>> _, enc = encode_features({"x": [1.0, 2.0, 3.0, 4.0]}, n_bins=2)
            >>> [enc.level_label(0, k) for k in range(enc.n_levels[0])]
            ['<= 2.5', '> 2.5', 'missing']
        """
        if code == self.n_levels[j] - 1:
            return "missing" if self.kinds[j] == NUMERIC else "other/missing"
        if self.kinds[j] == CATEGORICAL:
            return str(self.categories[j][code])
        e = np.asarray(self.edges[j])
        if e.size == 0:
            return "all"
        if code == 0:
            return f"<= {e[0]:.6g}"
        if code == e.size:
            return f"> {e[-1]:.6g}"
        return f"({e[code - 1]:.6g}, {e[code]:.6g}]"


def encode_features(
    features: Any,
    *,
    categorical: Any = None,
    numeric: Any = None,
    n_bins: int = 16,
    name: str = "features",
):
    """Integer codes of a feature table, and the encoder that codes new tables alike.

    Args:
        features: a dict of 1-D arrays, a structured array or a DataFrame-like object.
        categorical: column names to treat as categorical even if they hold floats.
        numeric: integer or bool column names to treat as numeric (binned) instead.
        n_bins: quantile bins per numeric column (fewer when values repeat).
        name: what to call the table in error messages.

    Returns:
        ``(codes, encoder)``: ``[n, d]`` int32 codes (column ``j`` in
        ``0..encoder.n_levels[j] - 1``) and the :class:`FeatureEncoder`.

    Raises:
        ValueError: a bad table (see :func:`feature_columns`), a name in ``categorical`` /
            ``numeric`` that is not a column, a string column named numeric, ``n_bins < 1``.

    Example:
        >>> import numpy as np
        >>> codes, enc = encode_features(
        ...     {"device": ["ios", "web", "ios"], "age": np.array([20.0, np.nan, 60.0])}
        ... )
        >>> codes.tolist(), enc.kinds, enc.n_levels
        ([[0, 0], [1, 2], [0, 1]], ('categorical', 'numeric'), (3, 3))
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}.")
    cols = feature_columns(features, name=name)
    forced_cat = _names_option(categorical, cols, "categorical", name)
    forced_num = _names_option(numeric, cols, "numeric", name)
    both = forced_cat & forced_num
    if both:
        raise ValueError(f"column(s) {sorted(both)} are named both categorical and numeric.")
    kinds, categories, edges = [], [], []
    for col, arr in cols.items():
        missing = _missing(arr)
        if col in forced_num:
            if arr.dtype.kind not in "biuf":
                raise ValueError(
                    f"{name} column {col!r} is named numeric but holds dtype {arr.dtype}."
                )
            kind = NUMERIC
        elif col in forced_cat or arr.dtype.kind in "biuUO":
            kind = CATEGORICAL
        else:
            kind = NUMERIC
        kinds.append(kind)
        if kind == NUMERIC:
            x = arr[~missing].astype(np.float64)
            edges.append(_numeric_edges(x, int(n_bins)) if x.size else np.zeros(0))
            categories.append(())
        else:
            values = _category_values(arr, missing)
            categories.append(_python_values(np.unique(values[~missing])))
            edges.append(np.zeros(0))
    encoder = FeatureEncoder(
        edges=tuple(edges), names=tuple(cols), kinds=tuple(kinds), categories=tuple(categories)
    )
    return encoder.transform(cols, name=name), encoder


def _names_option(option: Any, cols: dict, what: str, name: str) -> set[str]:
    if option is None:
        return set()
    names = {option} if isinstance(option, str) else set(option)
    unknown = sorted(str(c) for c in names - set(cols))
    if unknown:
        raise ValueError(f"{what}= names {unknown}, not columns of {name} ({list(cols)}).")
    return names
