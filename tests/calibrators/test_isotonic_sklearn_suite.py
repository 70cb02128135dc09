"""scikit-learn's own isotonic tests, run against jaxcal.

The test functions of the installed scikit-learn's ``sklearn/tests/test_isotonic.py`` are
imported (not copied) and run with the module's ``IsotonicRegression``,
``isotonic_regression`` and ``check_increasing`` replaced by thin adapters onto jaxcal:

* ``IsotonicRegression`` -> :class:`JaxcalIsotonicRegression`, scikit-learn's estimator API
  around ``IsotonicCalibration``'s map (``jaxcal.calibrators.isotonic.isotonic_map``: the
  calibrator after its label checks, fitting real-valued targets, without the clip to
  [0, 1]); ``predict`` / ``transform`` are the fitted map's ``predict``.
* ``isotonic_regression(y, ...)`` -> ``jaxcal.isotonic_regression(arange(n), y, ...)``.
* ``check_increasing`` -> ``jaxcal.calibrators.isotonic.check_increasing``.

The adapters only translate conventions (an ``[n, 1]`` input is a column of scores, the
fit's dtype is that of ``X``, the ``_build_y`` / ``_build_f`` hooks one test calls); every
number comes from jaxcal. Every test passes except the deliberate differences listed in
``DIFFERENCES`` (expected to fail, strictly) and the tests of scikit-learn's private tie
function in ``NOT_RUN``; docs/nonparametric.md lists the same.
"""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest

import jaxcal
from jaxcal._validation import check_sample_weight, check_scores
from jaxcal.calibrators.isotonic import FittedIsotonic, check_increasing, isotonic_map

skt = pytest.importorskip("sklearn.tests.test_isotonic")

DIFFERENCES = {
    "test_assert_raises_exceptions": "jaxcal's ValueError messages differ from scikit-learn's "
    "(the same cases raise, see test_same_bad_inputs_raise), and predict maps scores of any "
    "shape element-wise, so a [3, 10] array is predicted, not rejected",
    "test_isotonic_2darray_more_than_1_feature": "as above: jaxcal's message for a 2-D fit "
    "input, and predict / transform map a 2-D array element-wise",
    "test_isotonic_regression_oob_raise": "the ValueError names jaxcal's `scores`, not "
    "scipy's `x_new` (the raise itself is checked in test_same_bad_inputs_raise)",
    "test_get_feature_names_out": "scikit-learn's feature-name API is not part of jaxcal",
    "test_isotonic_regression_output_predict": "scikit-learn's pandas output API is not "
    "part of jaxcal",
}
NOT_RUN = {
    "test_make_unique_dtype": "tests scikit-learn's private _make_unique (pooling of close "
    "scores); jaxcal ties only equal scores, see test_ties_only_equal_scores",
    "test_make_unique_tolerance": "as test_make_unique_dtype",
}


def _scores(X, name="X") -> np.ndarray:
    """A column ``[n, 1]`` is scikit-learn's way of passing one feature: flattened."""
    arr = np.asarray(X)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.reshape(-1)
    return arr


class JaxcalIsotonicRegression:
    """scikit-learn's ``IsotonicRegression`` API on jaxcal's isotonic map."""

    def __init__(self, *, y_min=None, y_max=None, increasing=True, out_of_bounds="nan"):
        self.y_min = y_min
        self.y_max = y_max
        self.increasing = increasing
        self.out_of_bounds = out_of_bounds

    def _set_map(self, fitted: FittedIsotonic, dtype) -> None:
        self.fitted_ = fitted
        self.increasing_ = fitted.increasing
        kx, ky = np.asarray(fitted.knots_x), np.asarray(fitted.knots_y)
        if not fitted.increasing:  # knots in -X: back to increasing X
            kx, ky = -kx[::-1], ky[::-1]
        self.X_thresholds_, self.y_thresholds_ = kx.astype(dtype), ky.astype(dtype)
        self.X_min_, self.X_max_ = self.X_thresholds_[0], self.X_thresholds_[-1]
        self.dtype_ = dtype

    def _fit_data(self, X, y, sample_weight):
        X = _scores(X)
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        x = check_scores(X, name="X")
        t = check_scores(y, name="y")
        if t.shape != x.shape:
            raise ValueError(f"length mismatch: {x.size} X values but {t.size} y values.")
        return x, t, check_sample_weight(sample_weight, x.size), dtype

    def fit(self, X, y, sample_weight=None):
        x, t, w, dtype = self._fit_data(X, y, sample_weight)
        fitted = isotonic_map(
            x,
            t,
            w,
            increasing="auto" if self.increasing == "auto" else bool(self.increasing),
            out_of_bounds=self.out_of_bounds,
            lo=-np.inf if self.y_min is None else self.y_min,
            hi=np.inf if self.y_max is None else self.y_max,
        )
        self._set_map(fitted, dtype)
        return self

    def predict(self, T):
        T = np.asarray(_scores(T), dtype=getattr(self, "dtype_", np.float64))
        return np.asarray(self.fitted_.predict(T))

    transform = predict

    def fit_transform(self, X, y, sample_weight=None):
        return self.fit(X, y, sample_weight=sample_weight).transform(X)

    # The two hooks test_fast_predict calls: the fitted values at every distinct score
    # with weight (jaxcal.isotonic_regression), and a map through all of them.
    def _build_y(self, X, y, sample_weight, trim_duplicates=True):
        if trim_duplicates:
            self.fit(X, y, sample_weight=sample_weight)
            return self.X_thresholds_, self.y_thresholds_
        x, t, w, dtype = self._fit_data(X, y, sample_weight)
        increasing = check_increasing(x, t, w) if self.increasing == "auto" else self.increasing
        self.increasing_ = bool(increasing)
        fitted = jaxcal.isotonic_regression(
            x, t, sample_weight=w, increasing=self.increasing_, y_min=self.y_min, y_max=self.y_max
        )
        xs, first = np.unique(x[w > 0], return_index=True)
        return xs.astype(dtype), np.asarray(fitted)[w > 0][first].astype(dtype)

    def _build_f(self, X, y):
        u, v = (X, y) if self.increasing_ else (-X[::-1], y[::-1])
        knots = FittedIsotonic(
            knots_x=np.asarray(u, np.float64),
            knots_y=np.asarray(v, np.float64),
            increasing=self.increasing_,
            out_of_bounds=self.out_of_bounds,
        )
        self._set_map(knots, np.asarray(X).dtype)


def _isotonic_regression(y, *, sample_weight=None, y_min=None, y_max=None, increasing=True):
    """scikit-learn's functional form (the data in sequence order) on jaxcal's."""
    y = np.asarray(y)
    x = np.arange(y.shape[0], dtype=np.float32 if y.dtype == np.float32 else np.float64)
    out = jaxcal.isotonic_regression(
        x, y, sample_weight=sample_weight, y_min=y_min, y_max=y_max, increasing=increasing
    )
    return np.asarray(out)


def _cases():
    """Every test function of scikit-learn's module, expanded over its parametrize marks."""
    for name, fn in sorted(vars(skt).items()):
        if not (name.startswith("test_") and inspect.isfunction(fn)):
            continue
        grids = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        axes = []
        for mark in grids:
            names = (
                [a.strip() for a in mark.args[0].split(",")]
                if isinstance(mark.args[0], str)
                else list(mark.args[0])
            )
            values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
            axes.append([dict(zip(names, v, strict=True)) for v in values])
        for combo in itertools.product(*axes):
            kwargs = {k: v for part in combo for k, v in part.items()}
            label = "-".join(str(getattr(v, "__name__", v)) for v in kwargs.values())
            marks = []
            if name in DIFFERENCES:
                marks = [pytest.mark.xfail(strict=True, reason=DIFFERENCES[name])]
            elif name in NOT_RUN:
                marks = [pytest.mark.skip(reason=NOT_RUN[name])]
            yield pytest.param(name, kwargs, id=f"{name}[{label}]" if label else name, marks=marks)


def test_the_module_is_scikit_learns():
    assert skt.__name__ == "sklearn.tests.test_isotonic"
    names = {c.values[0] for c in _cases()}
    assert set(DIFFERENCES) | set(NOT_RUN) <= names
    assert len(names) > 30  # the whole module, not an empty import


@pytest.mark.parametrize(("name", "kwargs"), list(_cases()))
def test_sklearn_isotonic_suite(name, kwargs, monkeypatch):
    monkeypatch.setattr(skt, "IsotonicRegression", JaxcalIsotonicRegression)
    monkeypatch.setattr(skt, "isotonic_regression", _isotonic_regression)
    monkeypatch.setattr(skt, "check_increasing", check_increasing)
    getattr(skt, name)(**kwargs)


def test_same_bad_inputs_raise():
    """The cases of the deliberately different tests raise ValueError in jaxcal too."""
    ir = JaxcalIsotonicRegression()
    rng = np.random.RandomState(42)
    with pytest.raises(ValueError, match="length mismatch"):
        ir.fit([0, 1, 2], [5, 7, 3], [0.1, 0.6])
    with pytest.raises(ValueError, match="length mismatch"):
        ir.fit([0, 1, 2], [5, 7])
    with pytest.raises(ValueError, match="1-D"):
        ir.fit(rng.randn(3, 10), [0, 1, 2])
    with pytest.raises(ValueError, match="1-D"):
        ir.fit(np.c_[np.arange(10), np.arange(10)], np.arange(10))
    y = np.array([3, 7, 5, 9, 8, 7, 10])
    ir = JaxcalIsotonicRegression(increasing="auto", out_of_bounds="raise").fit(np.arange(7), y)
    with pytest.raises(ValueError, match="below it"):
        ir.predict([-10, 16])
    assert ir.predict(rng.randn(3, 10).clip(0, 6)).shape == (3, 10)  # element-wise


def test_ties_only_equal_scores():
    """scikit-learn pools 0 and 1e-16 (closer than its resolution); jaxcal keeps them
    apart, so an increasing target is fitted exactly."""
    from sklearn.isotonic import IsotonicRegression

    x = np.array([0.0, 1e-16, 1.0, 1.0 + 1e-14])
    y = np.array([0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(jaxcal.isotonic_regression(x, y)), y)
    ours = JaxcalIsotonicRegression().fit(x, y)
    np.testing.assert_array_equal(ours.X_thresholds_, x)
    sk = IsotonicRegression().fit(x, y)
    np.testing.assert_array_equal(sk.X_thresholds_, [0.0, 1.0, 1.0 + 1e-14])
