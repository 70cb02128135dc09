"""The conventions of the parametric and binning calibrators (docs/api.md): a fitted
calibrator's float leaves have the dtype of the scores it was fitted on, constructors refuse
bad hyperparameters when the calibrator is made (a ``ValueError`` naming the parameter), and
each estimator's ``fit`` returns the fitted type that ``jaxcal.calibrators`` (and ``jaxcal``)
export under its name.

Oracles: a float32 fit computes in float32 whatever the x64 flag, so with x64 on it is the
same fit as with x64 off (JAX's float32 default), leaf for leaf; and its predictions are the
float64 fit's to float32 precision.
"""

from __future__ import annotations

import dataclasses
import math
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
import jaxcal.calibrators as C
from jaxcal.calibrators._base import FittedCalibrator

F32_PROB_ATOL = 1e-4  # float32 vs float64 predictions (solver tolerance 1e-9 in float32)
# the same float32 program with x64 on and off: the numbers agree to a few float32 ulps
# (XLA may fuse or order the float32 arithmetic differently when the flag changes)
SAME_FIT_RTOL = 1e-5

PARAMETRIC = {
    "platt": C.PlattScaling,
    "temperature": C.TemperatureScaling,
    "beta": C.BetaCalibration,
    "gaussian": C.GaussianCalibration,
    "gamma": C.GammaCalibration,
    "exponential": C.ExponentialCalibration,
}
ESTIMATORS = {
    **{name: cls() for name, cls in PARAMETRIC.items()},
    "gaussian_generative": C.GaussianCalibration(method="generative"),
    "exponential_generative": C.ExponentialCalibration(method="generative"),
    "beta_none": C.BetaCalibration(rescale="none"),
    "histogram_quantile": C.HistogramBinning(n_bins=8),
    "histogram_uniform": C.HistogramBinning(n_bins=8, strategy="uniform"),
    "bbq": C.BBQ(),
    "bbq_rank": C.BBQ(score_scale="rank"),
    "enir": C.ENIR(),
}
FITTED = {
    "platt": C.FittedPlatt,
    "temperature": C.FittedTemperature,
    "beta": C.FittedBeta,
    "gaussian": C.FittedGaussian,
    "gamma": C.FittedGamma,
    "exponential": C.FittedExponential,
    "gaussian_generative": C.FittedGaussian,
    "exponential_generative": C.FittedExponential,
    "beta_none": C.FittedBeta,
    "histogram_quantile": C.FittedHistogram,
    "histogram_uniform": C.FittedHistogram,
    "bbq": C.FittedBBQ,
    "bbq_rank": C.FittedBBQ,
    "enir": C.FittedENIR,
}


def _problem(name: str, n: int = 300, seed: int = 0):
    """Scores in the calibrator's domain, labels with P(y = 1 | s) increasing in s."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-1.5 * z))).astype(float)
    if name in ("gamma", "exponential", "exponential_generative"):
        return np.exp(z), y
    if name.startswith(("beta_none", "histogram", "bbq", "enir")):
        return 1 / (1 + np.exp(-z)), y
    return z, y


def _float_leaves(tree) -> list:
    return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.floating)]


def _dtypes(tree) -> set[str]:
    return {np.dtype(jnp.result_type(x)).name for x in _float_leaves(tree)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_fitted_leaves_have_the_dtype_of_the_scores(name, dtype):
    """x64 on (this suite): float32 scores give float32 leaves, float64 give float64, and
    ``predict`` of scores in that dtype returns it."""
    s, y = _problem(name)
    s = s.astype(dtype)
    fitted = ESTIMATORS[name].fit(s, y)
    assert type(fitted) is FITTED[name]
    assert _dtypes(fitted) == {np.dtype(dtype).name}
    assert fitted.predict(s).dtype == dtype


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_float32_fit_does_not_depend_on_the_x64_flag(name):
    """The float32 fit computes in float32: with x64 on it is the fit JAX's float32 default
    gives (x64 off), leaf by leaf; and its map is the float64 fit's to float32 precision."""
    s, y = _problem(name, seed=1)
    s32 = s.astype(np.float32)
    est = ESTIMATORS[name]
    on = est.fit(s32, y)
    with jax.enable_x64(False):
        off = est.fit(s32, y)
        assert _dtypes(off) == {"float32"}
        off_leaves = [np.asarray(x) for x in _float_leaves(off)]
    on_leaves = [np.asarray(x) for x in _float_leaves(on)]
    assert len(on_leaves) == len(off_leaves)
    for a, b in zip(on_leaves, off_leaves, strict=True):
        np.testing.assert_allclose(a, b, rtol=SAME_FIT_RTOL, atol=1e-6)
    grid = np.sort(s32)
    p64 = np.asarray(est.fit(s32.astype(np.float64), y).predict(grid.astype(np.float64)))
    np.testing.assert_allclose(np.asarray(on.predict(grid)), p64, atol=F32_PROB_ATOL)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(PARAMETRIC))
def test_fit_batch_leaves_have_the_dtype_of_the_scores(name, dtype):
    """``fit_batch`` follows the scores' dtype too, and each row is the single fit of that
    row in that dtype."""
    rows = [_problem(name, n=200, seed=k) for k in range(3)]
    s = np.stack([r[0] for r in rows]).astype(dtype)
    y = np.stack([r[1] for r in rows])
    est = PARAMETRIC[name]()
    batch = est.fit_batch(s, y)
    assert _dtypes(batch) == {np.dtype(dtype).name}
    # same algorithm batched and looped; float32 rows agree to the solver's tolerance
    rtol = 1e-4 if dtype == np.float32 else 1e-8
    for k in range(3):
        single = est.fit(s[k], y[k])
        np.testing.assert_allclose(
            np.asarray(batch.predict(s))[k], np.asarray(single.predict(s[k])), rtol=rtol
        )


def test_float32_fit_on_scores_beyond_the_float32_arithmetic_range():
    """float32 scores of 1e6 (beyond the 2**16 that float32 maps compute with as they are):
    the float32 fit rescales them exactly by a power of two, as with x64 off, and keeps
    float32 leaves; the map is the one of the scores divided by 1e6."""
    s, y = _problem("platt", seed=2)
    big = (s * 1e6).astype(np.float32)
    fitted = C.PlattScaling().fit(big, y)
    assert _dtypes(fitted) == {"float32"}
    assert int(fitted.scaling.exponent) != 0
    with jax.enable_x64(False):
        off = C.PlattScaling().fit(big, y)
    np.testing.assert_allclose(np.asarray(fitted.theta), np.asarray(off.theta), rtol=1e-5)
    small = C.PlattScaling().fit(big.astype(np.float64) / 1e6, y)
    np.testing.assert_allclose(
        np.asarray(fitted.predict(big)), np.asarray(small.predict(big / 1e6)), atol=F32_PROB_ATOL
    )


def test_fit_chunks_follows_the_dtype_of_the_chunks():
    s, y = _problem("platt", n=600, seed=3)
    parts = [(s[i : i + 200], y[i : i + 200]) for i in (0, 200, 400)]
    as32 = [(a.astype(np.float32), b) for a, b in parts]
    fitted32 = C.PlattScaling().fit_chunks(as32)
    assert _dtypes(fitted32) == {"float32"}
    # one float64 chunk makes the fit float64 (as fit on the concatenated scores would)
    mixed = [as32[0], parts[1], as32[2]]
    assert _dtypes(C.PlattScaling().fit_chunks(mixed)) == {"float64"}
    ref = C.PlattScaling().fit(s.astype(np.float32), y)
    np.testing.assert_allclose(np.asarray(fitted32.theta), np.asarray(ref.theta), rtol=1e-4)


def test_integer_scores_fit_in_the_default_float():
    """Scores without a float dtype of their own fit in JAX's default float."""
    s, y = _problem("platt", seed=4)
    counts = np.round(s * 3).astype(np.int64)
    assert _dtypes(C.PlattScaling().fit(counts, y)) == {"float64"}
    assert _dtypes(C.HistogramBinning().fit(list(counts), y)) == {"float64"}
    with jax.enable_x64(False):
        assert _dtypes(C.ENIR().fit(counts, y)) == {"float32"}


# --- hyperparameters checked when the calibrator is made -------------------------------

BAD_HYPERPARAMETERS = [
    (C.PlattScaling, {"l2": -1.0}, "l2"),
    (C.PlattScaling, {"l2": float("nan")}, "l2"),
    (C.PlattScaling, {"l2": float("inf")}, "l2"),
    (C.PlattScaling, {"l2": "0.1"}, "l2"),
    (C.PlattScaling, {"max_iter": 0}, "max_iter"),
    (C.PlattScaling, {"max_iter": 10.5}, "max_iter"),
    (C.PlattScaling, {"tol": 0.0}, "tol"),
    (C.PlattScaling, {"method": "generative"}, "method"),
    (C.TemperatureScaling, {"l2": -1e-3}, "l2"),
    (C.TemperatureScaling, {"method": "bayes"}, "method"),
    (C.BetaCalibration, {"rescale": "logit"}, "rescale"),
    (C.BetaCalibration, {"margin": 0.0}, "margin"),
    (C.BetaCalibration, {"margin": float("nan")}, "margin"),
    (C.GaussianCalibration, {"method": "Generative"}, "method"),
    (C.GaussianCalibration, {"tol": -1e-9}, "tol"),
    (C.GammaCalibration, {"shift": 0.0}, "shift"),
    (C.GammaCalibration, {"shift": float("inf")}, "shift"),
    (C.GammaCalibration, {"relative_shift": "yes"}, "relative_shift"),
    (C.ExponentialCalibration, {"max_iter": True}, "max_iter"),
    (C.HistogramBinning, {"n_bins": 0}, "n_bins"),
    (C.HistogramBinning, {"n_bins": 2.5}, "n_bins"),
    (C.HistogramBinning, {"strategy": "equal"}, "strategy"),
    (C.BBQ, {"c": 0.5}, "c must"),
    (C.BBQ, {"c": float("nan")}, "c must"),
    (C.BBQ, {"equivalent_sample_size": 0.0}, "equivalent_sample_size"),
    (C.BBQ, {"score_scale": "probabilities"}, "score_scale"),
    (C.ENIR, {"eps": 0.0}, "eps"),
    (C.ENIR, {"eps": 0.5}, "eps"),
    (C.ENIR, {"eps": float("nan")}, "eps"),
]


@pytest.mark.parametrize(
    "cls, kwargs, match",
    BAD_HYPERPARAMETERS,
    ids=[f"{c.__name__}-{next(iter(k))}-{k[next(iter(k))]!r}" for c, k, _ in BAD_HYPERPARAMETERS],
)
def test_constructor_refuses_bad_hyperparameters(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)
    # replace() makes a new calibrator: the same check
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(cls(), **kwargs)


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (C.PlattScaling, {"l2": 0, "max_iter": np.int64(5), "tol": 1e-6}),
        (C.BetaCalibration, {"margin": 1, "rescale": "none"}),
        (C.GammaCalibration, {"shift": np.float32(0.5), "relative_shift": np.bool_(False)}),
        (C.HistogramBinning, {"n_bins": np.int32(1), "strategy": "uniform"}),
        (C.BBQ, {"c": 1, "equivalent_sample_size": 0.5, "score_scale": "logit"}),
        (C.ENIR, {"eps": 0.25}),
    ],
)
def test_constructor_accepts_valid_edge_values(cls, kwargs):
    cal = cls(**kwargs)
    for key, value in kwargs.items():
        assert getattr(cal, key) == value


def test_gamma_and_beta_families_hold_python_scalars():
    """The families (static fields of the fitted map, saved with it) hold the checked
    hyperparameters as Python scalars whatever the estimator was given."""
    gamma = C.GammaCalibration(shift=np.float32(0.5), relative_shift=np.bool_(False)).family
    assert type(gamma.shift) is float and type(gamma.relative_shift) is bool
    assert type(C.BetaCalibration(margin=1).family.margin) is float


# --- fitted types ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PARAMETRIC))
def test_parametric_fit_returns_the_declared_fitted_class(name):
    """The class's ``fitted_class``, the type argument its ``fit`` is annotated with, and the
    type ``fit`` returns are the exported ``Fitted*`` class."""
    cls = PARAMETRIC[name]
    s, y = _problem(name)
    (base,) = cls.__orig_bases__
    assert typing.get_args(base) == (cls.fitted_class,) == (FITTED[name],)
    assert type(cls().fit(s, y)) is FITTED[name]


@pytest.mark.parametrize("name", sorted(n for n in C.__all__ if n.startswith("Fitted")))
def test_fitted_types_are_exported_from_calibrators_and_jaxcal(name):
    cls = getattr(C, name)
    assert isinstance(cls, type) and issubclass(cls, FittedCalibrator)
    assert getattr(jaxcal, name) is cls
    assert (cls.__doc__ or "").strip()


def test_every_calibrator_with_a_fitted_type_exports_it():
    """Each estimator's fitted type is exported under the name ``Fitted<stem>``."""
    expected = {
        "PlattScaling": "FittedPlatt",
        "TemperatureScaling": "FittedTemperature",
        "BetaCalibration": "FittedBeta",
        "GaussianCalibration": "FittedGaussian",
        "GammaCalibration": "FittedGamma",
        "ExponentialCalibration": "FittedExponential",
        "SplineCalibration": "FittedSpline",
        "IsotonicCalibration": "FittedIsotonic",
        "HistogramBinning": "FittedHistogram",
        "BBQ": "FittedBBQ",
        "ENIR": "FittedENIR",
        "SmoothedIsotonic": "FittedSmoothedIsotonic",
        "VennAbers": "FittedVennAbers",
        "NeuralCalibration": "FittedNeuralCalibration",
        "MulticalibrationBoosting": "FittedMulticalibrationBoosting",
    }
    assert set(expected.values()) | {"FittedIsotonicCounts", "FittedCalibrator"} == {
        n for n in C.__all__ if n.startswith("Fitted")
    }
    s, y = _problem("histogram_quantile")
    for estimator, fitted in expected.items():
        if estimator in ("NeuralCalibration", "MulticalibrationBoosting"):
            continue  # they need feature tables (their own test files)
        with np.errstate(all="ignore"):
            got = type(getattr(C, estimator)().fit(s, y))
        assert got is getattr(C, fitted), estimator


def test_predict_logit_is_the_logit_of_predict():
    s, y = _problem("gaussian")
    fitted = C.GaussianCalibration().fit(s, y)
    grid = np.linspace(s.min(), s.max(), 17)
    z = np.asarray(fitted.predict_logit(grid))
    coef = fitted.coefficients
    formula = float(coef["a"]) * grid**2 + float(coef["b"]) * grid + float(coef["c"])
    np.testing.assert_allclose(z, formula, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(fitted.predict(grid)), 1 / (1 + np.exp(-formula)), rtol=1e-12
    )
    assert not hasattr(fitted, "logit")
    assert math.isfinite(float(np.asarray(fitted.predict_logit(np.array([1e30])))[0]))


def test_beta_none_checks_the_clip_in_the_dtype_of_the_fit():
    """Probabilities that float32's clip into [eps, 1 - eps] makes all equal (eps = 1.2e-7)
    are refused by the float32 fit, as with x64 off, also with x64 on and in a batch; the
    float64 fit of the same values is identified and fits."""
    s = np.array([1e-9, 2e-9, 3e-9, 4e-9, 5e-9, 6e-9])
    y = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    beta = C.BetaCalibration(rescale="none")
    with pytest.raises(ValueError, match="float32"):
        beta.fit(s.astype(np.float32), y)
    with pytest.raises(ValueError, match="problem 1: .*float32"):
        beta.fit_batch(np.stack([s * 1e6, s]).astype(np.float32), np.stack([y, y]))
    with pytest.raises(ValueError, match="float32"):
        beta.fit_chunks([(s[:3].astype(np.float32), y[:3]), (s[3:].astype(np.float32), y[3:])])
    assert _dtypes(beta.fit(s, y)) == {"float64"}
