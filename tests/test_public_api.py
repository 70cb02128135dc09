"""The public names: each resolves to the object its module defines, and does what its name
says on a problem whose answer is known."""

import importlib
import importlib.metadata
import inspect
import types

import jax
import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

import jaxcal

SUBPACKAGES = [
    "calibrators",
    "metrics",
    "data",
    "debias",
    "decide",
    "distributed",
    "plot",
    "scoremodels",
    "recsys",
    "clicks",
    "bayes",
    "sklearn",
]

CALIBRATORS = sorted(
    n
    for n in jaxcal.__all__
    if inspect.isclass(getattr(jaxcal, n)) and not n.startswith("Fitted")  # estimators only
)
# binning maps and ENIR's near-isotonic ensemble need not be monotone
_NOT_MONOTONE = {"BBQ", "ENIR", "HistogramBinning", "MulticalibrationBoosting"}
_SCORES_IN_01 = {"BetaCalibration", "BBQ", "HistogramBinning"}
_POSITIVE_SCORES = {"GammaCalibration", "ExponentialCalibration"}


def _problem(name):
    """Scores for the calibrator's domain, and labels with P(y = 1 | s) increasing in s."""
    rng = np.random.default_rng(0)
    s = rng.normal(size=400)
    y = (rng.uniform(size=400) < 1 / (1 + np.exp(-2 * s))).astype(float)
    if name in _SCORES_IN_01:
        s = 1 / (1 + np.exp(-s))
    elif name in _POSITIVE_SCORES:
        s = np.exp(s)
    return s, y


@pytest.mark.parametrize("name", sorted(n for n in jaxcal.__all__ if n != "__version__"))
def test_top_level_names_are_their_modules_objects(name):
    obj = getattr(jaxcal, name)
    if isinstance(obj, types.ModuleType):
        assert obj is importlib.import_module(f"jaxcal.{name}")
    else:
        assert obj is getattr(importlib.import_module(obj.__module__), name)
        assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def test_version_is_the_installed_distributions():
    assert jaxcal.__version__ == importlib.metadata.version("jaxcal")


@pytest.mark.parametrize("name", CALIBRATORS)
def test_each_calibrator_fits_a_monotone_map_that_round_trips(name, tmp_path):
    """fit + predict give probabilities of the input's shape, non-decreasing in the score
    (except binning maps), that track the label rate; save / load gives the same map."""
    s, y = _problem(name)
    random = {"key": jax.random.key(0)} if name == "NeuralCalibration" else {}  # its init
    fitted = getattr(jaxcal, name)().fit(s, y, **random)
    grid = np.sort(s)
    p = np.asarray(fitted.predict(grid))
    assert p.shape == grid.shape and np.all((p >= 0) & (p <= 1))
    if name not in _NOT_MONOTONE:
        assert np.all(np.diff(p) >= -1e-6), f"{name} is not monotone"
    assert p[-40:].mean() > p[:40].mean() + 0.3  # it separates low from high scores
    assert abs(p.mean() - y.mean()) < 0.1  # and keeps the level of the labels
    path = tmp_path / f"{name}.npz"
    fitted.save(path)
    np.testing.assert_array_equal(np.asarray(jaxcal.load(path).predict(grid)), p)
    np.testing.assert_array_equal(
        np.asarray(fitted.predict(grid.reshape(20, 20))), p.reshape(20, 20)
    )


def test_isotonic_regression_is_sklearns():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=200), rng.normal(size=200)
    want = IsotonicRegression().fit_transform(x, y)
    np.testing.assert_allclose(np.asarray(jaxcal.isotonic_regression(x, y)), want, atol=1e-5)


def test_negative_downsampling_correction_is_the_closed_form():
    """Keeping a share r of the negatives turns odds p / (1 - p) into odds / r; the
    correction inverts it: q = p r / (p r + 1 - p)."""
    p, r = np.array([0.1, 0.5, 0.9]), 0.25
    got = np.asarray(jaxcal.negative_downsampling_correction(p, r))
    np.testing.assert_allclose(got, p * r / (p * r + 1 - p), rtol=1e-6)


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_subpackage_names_resolve(package):
    module = importlib.import_module(f"jaxcal.{package}")
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"jaxcal.{package} advertises names it cannot import: {missing}"


def test_metrics_names_compute_known_values():
    m = jaxcal.metrics
    p, y = np.array([0.2, 0.2, 0.8, 0.8]), np.array([0, 1, 1, 1])
    # one bin per distinct probability: |0.2 - 0.5| and |0.8 - 1| weighted 1/2 each
    assert abs(float(m.ece(p, y, n_bins=2)) - 0.25) < 1e-6
    assert abs(float(m.auc(p, y)) - (2 / 3 + 1 / 6)) < 1e-6
    assert m.ranking is importlib.import_module("jaxcal.metrics.ranking")
    scores, labels = np.array([[0.9, 0.1, 0.5]]), np.array([[1, 0, 1]])
    assert float(m.recall_at_k(scores, labels, k=1)) == 0.5
    assert abs(float(m.ndcg_at_k(scores, labels, k=3)) - 1.0) < 1e-6


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute"):
        jaxcal.no_such_thing  # noqa: B018


def test_rating_names_compute_known_values():
    """The explicit-rating names: a simulation whose ratings its own thresholds reproduce, an
    exact three-way split, and metrics with closed-form values."""
    sim = jaxcal.data.simulate_ratings(
        "sd2", n_users=30, n_items=40, density=0.3, key=jax.random.key(0)
    )
    x = sim.ratings
    cuts = sim.thresholds[sim.segment[x.user]]
    assert np.array_equal(x.rating, 1 + (sim.latent[:, None] >= cuts).sum(1))
    parts = jaxcal.data.split_ratings(x, validation=0.1, test=0.2, key=jax.random.key(0))
    assert sum(p.size for p in parts) == x.size
    assert abs(float(jaxcal.metrics.rating_mse([1, 3], [2.0, 3.0])) - 0.5) < 1e-6
    assert abs(float(jaxcal.metrics.rating_mae([1, 3], [2.0, 5.0])) - 1.5) < 1e-6
    mean, per_user = jaxcal.metrics.kendall_tau_per_user([0, 0, 0], [1, 2, 3], [3.0, 2.0, 1.0])
    assert float(mean) == -1.0 and per_user.shape == (1,)
    assert callable(jaxcal.data.load_movielens) and callable(jaxcal.data.fetch_movielens)


def test_counts_names_compute_known_values():
    """Counts by distinct score: the isotonic fit and the metrics from counts, on a problem
    with known answers (the PAV of [0, 1, 0, 1] pools the middle pair into 1/2)."""
    counts = jaxcal.calibrators.score_counts([0.1, 0.3, 0.4, 0.8], [0, 1, 0, 1])
    assert jaxcal.metrics.ScoreCounts is jaxcal.calibrators.ScoreCounts is type(counts)
    fitted = jaxcal.IsotonicCalibration(interpolation="step").fit_counts(counts)
    assert isinstance(fitted, jaxcal.calibrators.FittedIsotonicCounts)
    np.testing.assert_allclose(fitted.predict([0.1, 0.3, 0.4, 0.8]), [0, 0.5, 0.5, 1])
    assert jaxcal.metrics.auc_from_counts(counts) == 0.75
    assert abs(jaxcal.metrics.brier_from_counts(counts) - (0.01 + 0.49 + 0.16 + 0.04) / 4) < 1e-12
