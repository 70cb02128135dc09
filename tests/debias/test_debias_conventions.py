"""The conventions of ``jaxcal.debias`` (docs/api.md): logits come from ``predict_logit``
(the formula of each model, checked in NumPy), ``predict`` is their sigmoid, a correction
keeps the dtype of the calibrator it corrects, the result types are exported, and every
hyperparameter is checked eagerly with a ``ValueError`` that names it."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import special

import jaxcal
from jaxcal import debias
from jaxcal.debias import (
    BaseRateCorrected,
    LogisticPropensity,
    logistic_propensity,
    naive_bayes_propensity,
    negative_sampling_base_rate,
    popularity_propensity,
    prior_shift_correction,
    rescale_propensity,
    uniform_propensity,
)

EXACT = 1e-12


def _scores_labels(n=400, seed=0, shift=0.0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < special.expit(1.5 * s + shift)).astype(float)
    return s, y


def test_logistic_propensity_predict_logit_is_the_linear_predictor():
    rng = np.random.default_rng(0)
    xu, xi = rng.normal(size=(7, 3)), rng.normal(size=(5, 2))
    model = LogisticPropensity(
        intercept=np.array(-0.3), user_coef=rng.normal(size=3), item_coef=rng.normal(size=2)
    )
    eta = -0.3 + (xu @ np.asarray(model.user_coef))[:, None]
    eta = eta + (xi @ np.asarray(model.item_coef))[None, :]
    np.testing.assert_allclose(np.asarray(model.predict_logit(xu, xi)), eta, rtol=EXACT)
    np.testing.assert_allclose(np.asarray(model.predict(xu, xi)), special.expit(eta), rtol=EXACT)
    assert not hasattr(model, "logits")


def test_base_rate_corrected_predict_logit_adds_the_shift():
    """Exact logits of a parametric map plus the shift; the clipped logit of ``predict``
    for a map without logits (histogram), plus the shift; ``predict`` is their sigmoid."""
    s, y = _scores_labels()
    platt = jaxcal.PlattScaling().fit(s, y)
    corrected = BaseRateCorrected(base=platt, shift=np.float64(0.7))
    z = float(platt.a) * s + float(platt.b) + 0.7
    np.testing.assert_allclose(np.asarray(corrected.predict_logit(s)), z, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(corrected.predict(s)), special.expit(z), rtol=1e-10)
    p = 1 / (1 + np.exp(-s))
    hist = jaxcal.HistogramBinning(n_bins=4).fit(p, y)
    corrected = BaseRateCorrected(base=hist, shift=np.float64(-0.2))
    eps = np.finfo(np.float64).eps  # the clip of the logit of predict (maps reach 0 and 1)
    q = np.clip(np.asarray(hist.predict(p)), eps, 1 - eps)
    np.testing.assert_allclose(
        np.asarray(corrected.predict_logit(p)), special.logit(q) - 0.2, rtol=1e-10
    )
    assert not hasattr(corrected, "logit")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prior_shift_correction_keeps_the_dtype_of_the_calibrator(dtype):
    """x64 on: a calibrator fitted on float32 scores gets a float32 shift, whose value is the
    float64 root of the MAR score equation of its float32 logits, to float32 precision."""
    s, y = _scores_labels(seed=1)
    fitted = jaxcal.PlattScaling().fit(s[:300].astype(dtype), y[:300])
    corrected = prior_shift_correction(fitted, s[300:], y[300:])
    assert corrected.shift.dtype == dtype
    z = np.asarray(fitted.predict_logit(s[300:]), np.float64)
    # the root of sum(sigmoid(z + d) - y) by bisection in float64
    lo, hi = -20.0, 20.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.sum(special.expit(z + mid) - y[300:]) < 0 else (lo, mid)
    tol = 1e-5 if dtype == np.float32 else 1e-9
    assert float(corrected.shift) == pytest.approx(0.5 * (lo + hi), abs=tol)


def test_result_types_are_exported():
    for name in ("BaseRateCorrected", "LogisticPropensity", "NaiveBayesPropensity"):
        assert name in debias.__all__
        assert getattr(debias, name).__module__.startswith("jaxcal.debias.")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: negative_sampling_base_rate(0), "n_negatives"),
        (lambda: negative_sampling_base_rate(float("nan")), "n_negatives"),
        (lambda: negative_sampling_base_rate("57"), "n_negatives"),
        (lambda: negative_sampling_base_rate(57, negative_weight=-1.0), "negative_weight"),
        (
            lambda: negative_sampling_base_rate(57, mean_inverse_propensity=float("inf")),
            "mean_inverse_propensity",
        ),
        (lambda: uniform_propensity(-1), "n must"),
        (lambda: uniform_propensity(2.5), "n must"),
        (lambda: uniform_propensity(3, 0.0), "value"),
        (lambda: uniform_propensity(3, float("nan")), "value"),
        (lambda: popularity_propensity(np.array([1.0, 2.0]), power=0.0), "power"),
        (lambda: popularity_propensity(np.array([1.0, 2.0]), power=float("nan")), "power"),
        (lambda: popularity_propensity(np.array([1.0, 2.0]), clip=float("nan")), "clip"),
        (lambda: rescale_propensity(np.array([1.0, 0.5]), float("nan")), "target_rate"),
        (
            lambda: naive_bayes_propensity(np.array([[1, 0], [0, 2]]), np.array([1, 2]), alpha=-1),
            "alpha",
        ),
        (
            lambda: logistic_propensity(np.eye(3), np.eye(3), np.eye(3), l2=float("inf")),
            "l2",
        ),
        (lambda: logistic_propensity(np.eye(3), np.eye(3), np.eye(3), tol=0.0), "tol"),
    ],
)
def test_bad_options_raise_value_errors_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_prior_shift_correction_checks_tol_first():
    s, y = _scores_labels(seed=2)
    fitted = jaxcal.PlattScaling().fit(s, y)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="tol"):
            prior_shift_correction(fitted, s, y, tol=bad)
    # a tolerance that is fine is used: the jitted root solver gives the same shift
    a = prior_shift_correction(fitted, s, y, tol=1e-13)
    b = jax.jit(lambda c, x: c.predict(x))(a, s)
    np.testing.assert_allclose(np.asarray(b), np.asarray(a.predict(s)), rtol=1e-12)
