"""jaxcal.sklearn.ScoreCalibrator: scikit-learn's estimator checks; the nested parameters
(clone / get_params / set_params); Pipeline, cross_val_predict and GridSearchCV, whose
probabilities and scores must equal direct jaxcal fits on the same folds (the oracle); the
install hint without scikit-learn."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import jax
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV, KFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import check_estimator, parametrize_with_checks
from sklearn.utils.validation import validate_data

import jaxcal
from jaxcal.sklearn import ScoreCalibrator

EXACT = 1e-12

# the checks that fit X with several feature columns: a score calibrator takes one column
# (a ValueError that says so); _ColumnMeanScores below runs them through a fixed projection
_SEVERAL_COLUMNS = "the check fits X with several columns; ScoreCalibrator takes one"
_EXPECTED_FAILURES = {
    name: _SEVERAL_COLUMNS
    for name in (
        "check_all_zero_sample_weights_error",
        "check_classifier_data_not_an_array",
        "check_classifiers_classes",
        "check_classifiers_one_label_sample_weights",
        "check_classifiers_train",
        "check_dict_unchanged",
        "check_dont_overwrite_parameters",
        "check_dtype_object",
        "check_estimators_dtypes",
        "check_estimators_fit_returns_self",
        "check_estimators_nan_inf",
        "check_estimators_overwrite_params",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_fit2d_predict1d",
        "check_fit_check_is_fitted",
        "check_fit_idempotent",
        "check_fit_score_takes_y",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_n_features_in",
        "check_n_features_in_after_fitting",
        "check_pipeline_consistency",
        "check_positive_only_tag_during_fit",
        "check_readonly_memmap_input",
        "check_sample_weight_equivalence_on_dense_data",
        "check_sample_weights_list",
        "check_sample_weights_not_an_array",
        "check_sample_weights_not_overwritten",
        "check_sample_weights_pandas_series",
        "check_sample_weights_shape",
        "check_supervised_y_2d",
    )
}
_EXPECTED_FAILURES["check_fit1d"] = "a 1-D X is one column of scores: accepted by design"
# Multi-class: the estimator's tag says binary only, so scikit-learn gives it no multi-class
# problem except check_classifier_not_supporting_multiclass, which it passes.


class _ColumnMeanScores(ScoreCalibrator):
    """ScoreCalibrator behind a fixed projection of X to one score (the mean of its
    columns), so that the checks that need several feature columns exercise everything
    else: fit / predict, classes, sample weights, pickling, parameters."""

    def _scores(self, X, *, reset):
        return validate_data(self, X, reset=reset, dtype=np.float64).mean(axis=1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.poor_score = True  # a fixed projection, not a trained model
        return tags


def _calibrators():
    return [jaxcal.PlattScaling(), jaxcal.IsotonicCalibration()]


@pytest.mark.parametrize("calibrator", _calibrators(), ids=lambda c: type(c).__name__)
def test_sklearn_estimator_checks(calibrator):
    """All of scikit-learn's checks pass except the expected failures, which fail (strict).
    ``check_estimator`` rather than ``parametrize_with_checks``: one test, and no failure
    reports to format for the expected failures (which take most of the time)."""
    results = check_estimator(
        ScoreCalibrator(calibrator),
        expected_failed_checks=_EXPECTED_FAILURES,
        on_fail=None,
        on_skip=None,
    )
    status = {}
    for r in results:
        status.setdefault(r["check_name"], set()).add(r["status"])
    failed = {name: s for name, s in status.items() if "failed" in s}
    assert not failed, failed
    assert {name for name, s in status.items() if "xfail" in s} == set(_EXPECTED_FAILURES)
    assert all(status[name] == {"xfail"} for name in _EXPECTED_FAILURES)
    assert sum(s == {"passed"} for s in status.values()) > 20


# scikit-learn's small check data (e.g. the 15 rows of check_sample_weight_equivalence) can
# be separable by the projected score: the SeparableDataWarning is right there, and not what
# these checks are about (the separable fit is unique, so weights still equal repetitions)
@pytest.mark.filterwarnings("ignore::jaxcal.fitting.solver.SeparableDataWarning")
@parametrize_with_checks([_ColumnMeanScores(c) for c in _calibrators()])
def test_sklearn_estimator_checks_of_a_projected_score(estimator, check):
    check(estimator)


def _scores_labels(n=300, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(2 * s - 0.5)))).astype(int)
    return s, y


def test_params_expose_the_calibrator_fields_and_set_params_replaces_it():
    est = ScoreCalibrator(jaxcal.IsotonicCalibration(trim=0.01))
    params = est.get_params(deep=True)
    cal = est.calibrator
    fields = {f.name: getattr(cal, f.name) for f in dataclasses.fields(cal)}
    assert {k: params[f"calibrator__{k}"] for k in fields} == fields
    assert set(params) == {"calibrator", "loss", "key", *(f"calibrator__{k}" for k in fields)}
    assert set(est.get_params(deep=False)) == {"calibrator", "loss", "key"}

    copy = clone(est)
    assert copy.get_params(deep=True) == params
    copy.set_params(calibrator__centered=True, calibrator__trim=0.02, loss="ips")
    assert copy.calibrator == jaxcal.IsotonicCalibration(centered=True, trim=0.02)
    assert copy.loss == "ips"
    assert est.calibrator == jaxcal.IsotonicCalibration(trim=0.01)  # the original is kept
    back = clone(copy).set_params(**params)
    assert back.get_params(deep=True) == params
    with pytest.raises(ValueError, match="'bins' for calibrator IsotonicCalibration"):
        est.set_params(calibrator__bins=3)
    with pytest.raises(ValueError, match="Invalid parameter"):
        est.set_params(no_such_thing=3)
    # the default calibrator is Platt scaling, and its fields are parameters too
    default = ScoreCalibrator()
    assert "calibrator__l2" in default.get_params()
    assert default.set_params(calibrator__l2=0.5).calibrator == jaxcal.PlattScaling(l2=0.5)


@pytest.mark.parametrize("make", [jaxcal.PlattScaling, jaxcal.IsotonicCalibration])
def test_fit_predict_equal_the_calibrator_and_keep_the_class_labels(make):
    s, y = _scores_labels()
    names = np.array(["neg", "pos"])[y]
    w = np.random.default_rng(1).uniform(0.5, 2.0, s.size)
    est = ScoreCalibrator(make()).fit(s[:, None], names, sample_weight=w)
    direct = np.asarray(make().fit(s, y, sample_weight=w).predict(s), np.float64)
    proba = est.predict_proba(s)
    assert proba.dtype == np.float64 and proba.shape == (s.size, 2)
    np.testing.assert_allclose(proba[:, 1], direct, rtol=0, atol=EXACT)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=EXACT)
    assert list(est.classes_) == ["neg", "pos"] and est.n_features_in_ == 1
    np.testing.assert_array_equal(est.predict(s), np.where(direct > 0.5, "pos", "neg"))


def test_float32_jax_still_gives_float64_probabilities():
    s, y = _scores_labels()
    with jax.enable_x64(False):
        proba = ScoreCalibrator().fit(s, y).predict_proba(s)
    assert proba.dtype == np.float64


def test_ips_loss_and_propensity_reach_the_calibrator():
    s, y = _scores_labels()
    omega = np.random.default_rng(2).uniform(0.2, 1.0, s.size)
    est = ScoreCalibrator(jaxcal.IsotonicCalibration(), loss="ips").fit(s, y, propensity=omega)
    direct = jaxcal.IsotonicCalibration().fit(s, y, propensity=omega, loss="ips").predict(s)
    np.testing.assert_allclose(est.predict_proba(s)[:, 1], np.asarray(direct), atol=EXACT)


def _fold_oracle(make, s, y, cv, w=None):
    """Out-of-fold probabilities from direct jaxcal fits, fold by fold."""
    out = np.empty(s.size)
    for train, test in cv.split(s):
        kw = {} if w is None else {"sample_weight": w[train]}
        out[test] = np.asarray(make().fit(s[train], y[train], **kw).predict(s[test]))
    return out


def test_pipeline_and_cross_val_predict_equal_direct_fits_per_fold():
    rng = np.random.default_rng(3)
    features = rng.normal(size=(240, 3))
    beta = np.array([1.5, -0.5, 0.25])
    s = features @ beta
    y = (rng.uniform(size=240) < 1 / (1 + np.exp(-s))).astype(int)
    cv = KFold(4, shuffle=True, random_state=0)
    pipe = make_pipeline(
        FunctionTransformer(np.dot, kw_args={"b": beta[:, None]}),  # a fixed linear score
        ScoreCalibrator(jaxcal.PlattScaling()),
    )
    got = cross_val_predict(pipe, features, y, cv=cv, method="predict_proba")
    np.testing.assert_allclose(got[:, 1], _fold_oracle(jaxcal.PlattScaling, s, y, cv), atol=EXACT)
    w = rng.uniform(0.5, 2.0, 240)
    est = ScoreCalibrator(jaxcal.IsotonicCalibration(centered=True))
    got = cross_val_predict(est, s, y, cv=cv, method="predict_proba", params={"sample_weight": w})
    want = _fold_oracle(lambda: jaxcal.IsotonicCalibration(centered=True), s, y, cv, w)
    np.testing.assert_allclose(got[:, 1], want, atol=EXACT)


def test_grid_search_over_calibrator_fields_scores_like_direct_fits():
    s, y = _scores_labels(240, seed=4)
    cv = KFold(3)
    grid = {"calibrator__trim": [0.01, 0.05], "calibrator__centered": [False, True]}
    search = GridSearchCV(
        ScoreCalibrator(jaxcal.IsotonicCalibration()), grid, cv=cv, scoring="neg_log_loss"
    ).fit(s, y)
    for params, score in zip(
        search.cv_results_["params"], search.cv_results_["mean_test_score"], strict=True
    ):
        hyper = {k.removeprefix("calibrator__"): v for k, v in params.items()}
        losses = []
        for train, test in cv.split(s):
            fitted = jaxcal.IsotonicCalibration(**hyper).fit(s[train], y[train])
            losses.append(log_loss(y[test], np.asarray(fitted.predict(s[test])), labels=[0, 1]))
        assert score == pytest.approx(-np.mean(losses), abs=1e-10)
    best = {k.removeprefix("calibrator__"): v for k, v in search.best_params_.items()}
    assert search.best_estimator_.calibrator == jaxcal.IsotonicCalibration(**best)


@pytest.mark.parametrize(
    ("X", "y", "match"),
    [
        (np.zeros((6, 2)), [0, 1, 0, 1, 0, 1], "X has 2 features, but ScoreCalibrator is"),
        (np.arange(6.0), [0, 1, 2, 0, 1, 2], "Only binary classification"),
        (np.arange(6.0), [1, 1, 1, 1, 1, 1], "only one class"),
        (np.arange(6.0), [0.5, 1, 0, 1, 0, 1], "Unknown label type"),
        (np.arange(5.0), [0, 1, 0, 1, 0, 1], "length"),
    ],
)
def test_bad_inputs_raise(X, y, match):
    with pytest.raises(ValueError, match=match):
        ScoreCalibrator().fit(X, np.asarray(y))


def test_missing_scikit_learn_gives_the_install_hint(monkeypatch):
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.delitem(sys.modules, "jaxcal.sklearn")
    with pytest.raises(ImportError, match=r'pip install "jaxcal\[sklearn\]"'):
        import jaxcal.sklearn  # noqa: F401


def test_import_jaxcal_does_not_import_scikit_learn():
    lines = [
        "import sys, jaxcal, jaxcal.calibrators, jaxcal.metrics",
        "assert 'sklearn' not in sys.modules, 'import jaxcal imported scikit-learn'",
        "assert 'sklearn' in dir(jaxcal) and jaxcal.sklearn.ScoreCalibrator",
        "assert 'sklearn' in sys.modules",
    ]
    run = [sys.executable, "-c", "\n".join(lines)]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_random_calibrator_takes_the_adapters_key():
    """NeuralCalibration's fit needs a key: the adapter passes its own, gives the same map as
    the calibrator fitted directly with it, and names ``key`` when it has none."""
    rng = np.random.default_rng(0)
    s = rng.normal(size=400)
    y = (rng.uniform(size=400) < 1 / (1 + np.exp(-2 * s))).astype(int)
    cal = jaxcal.NeuralCalibration(n_knots=5, rank=2, hidden=(), n_steps=50)
    key = jax.random.key(3)
    direct = np.asarray(cal.fit(s, y, key=key).predict(s), np.float64)
    adapted = ScoreCalibrator(cal, key=key).fit(s, y).predict_proba(s)[:, 1]
    np.testing.assert_allclose(adapted, direct, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="key"):
        ScoreCalibrator(cal).fit(s, y)
