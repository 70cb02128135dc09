"""``jaxcal reproduce hiranandani2019 --quick``: every output exists, every number in the
table equals the metric recomputed independently (NumPy, and scipy's Kendall tau-b) from the
saved test predictions, the transforms respect their constraints, and the models were chosen
without the test ratings."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from scipy import stats

from jaxcal.cli import build_parser
from jaxcal.reproduce import hiranandani2019 as h

CSV_TOL = 1e-6  # the CSV table carries 6 decimals
MODELS = ("MF", "K-C")  # MMC has its own tests (tests/recsys/test_mmc.py)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    out = tmp_path_factory.mktemp("hiranandani2019")
    args = build_parser("reproduce").parse_args(
        ["reproduce", "hiranandani2019", "--dataset", "sd2", "--quick", "--quiet",
         "--models", ",".join(MODELS), "--out", str(out)]
    )  # fmt: skip
    assert args.func(args) == 0
    return out / "sd2"


def _kendall_mean(user, rating, pred):
    taus = []
    for u in np.unique(user):
        hit = user == u
        if hit.sum() < 2:
            continue
        tau = stats.kendalltau(rating[hit], pred[hit], variant="b").statistic
        if np.isfinite(tau):
            taus.append(tau)
    return float(np.mean(taus))


def test_every_output_is_written(outputs):
    for name in ("table.md", "table.csv", "results.json", "predictions.npz", "transforms.png"):
        assert (outputs / name).is_file(), name
    assert (outputs / "transforms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_numbers_equal_metrics_recomputed_from_the_predictions(outputs):
    saved = np.load(outputs / "predictions.npz")
    user, rating = saved["user"], saved["rating"].astype(float)
    with open(outputs / "table.csv") as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(MODELS)
    for name in MODELS:
        pred = saved[name].astype(float)
        assert pred.shape == rating.shape and np.isfinite(pred).all()
        err = pred - rating
        assert float(rows[name]["test MSE"]) == pytest.approx(np.mean(err**2), abs=CSV_TOL)
        assert float(rows[name]["MAE"]) == pytest.approx(np.mean(np.abs(err)), abs=CSV_TOL)
        tau = _kendall_mean(user, rating, pred)
        assert float(rows[name]["Kendall tau-b"]) == pytest.approx(tau, abs=1e-5)
        published = h.PUBLISHED["sd2"].get(name)
        assert float(rows[name]["poster MSE"]) == pytest.approx(published)


def test_models_beat_the_mean_rating_and_transforms_keep_their_gaps(outputs):
    """A sanity floor that could fail: every model predicts the test ratings better than the
    training mean does; K-C's transforms are increasing with gaps >= eps and anchored ends."""
    split = h.load_split("sd2", seed=0, simulation={"n_users": 120, "n_items": 150})
    baseline = np.mean((split.test.rating - split.train.rating.mean()) ** 2)
    report = json.loads((outputs / "results.json").read_text())
    for name in MODELS:
        assert report["rows"][name]["mse"] < baseline, name
    truth, z = np.asarray(report["truth"]), np.asarray(report["transforms"])
    assert len(report["transform_error"]) == truth.shape[0] == 3
    norm = lambda a: (a - a[:, :1]) / (a[:, -1:] - a[:, :1])  # noqa: E731
    # each segment's error is that of some learned transform (the matched cluster)
    for err, row in zip(report["transform_error"], norm(truth), strict=True):
        assert np.isclose(np.abs(norm(z) - row).max(axis=1), err, atol=1e-9).any()
    assert np.all(np.diff(z, axis=1) >= 0.5 - 1e-6)
    np.testing.assert_allclose(z[:, 0], 1.0, atol=1e-6)
    np.testing.assert_allclose(z[:, -1], z.shape[1], atol=1e-6)


def test_the_split_keeps_test_ratings_out_of_training():
    split = h.load_split("sd1", seed=0)
    pairs = [set(zip(x.user.tolist(), x.item.tolist(), strict=True)) for x in split[:3]]
    assert not (pairs[0] & pairs[2]) and not (pairs[1] & pairs[2]) and not (pairs[0] & pairs[1])
    assert split.truth is not None and split.truth.shape[1] == 5


def test_level_means_is_the_mean_true_score_per_segment_and_level():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(6, 5))
    from jaxcal.data import Interactions

    ratings = Interactions.from_dense(rng.integers(1, 4, size=(6, 5)))
    segment = np.array([0, 0, 1, 1, 1, 0])
    got = h.level_means(scores, ratings, segment)
    for g in (0, 1):
        for r in (1, 2, 3):
            mask = (segment[:, None] == g) & (ratings.to_dense() == r)
            want = scores[mask].mean() if mask.any() else np.nan
            np.testing.assert_allclose(got[g, r - 1], want)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown data set"):
        h.load_split("netflix")
    args = build_parser("reproduce").parse_args(
        ["reproduce", "hiranandani2019", "--models", "MF,SVD++", "--quick"]
    )
    with pytest.raises(ValueError, match="unknown models"):
        args.func(args)


def test_coat_adds_inverse_propensity_rows(data_dir):
    """On Coat every CMTRF model is also fitted with the authors' propensities: its (IPS)
    row's MSE is recomputed from its predictions, and the IPS model differs from the plain
    one (a real reweighting)."""
    from jaxcal.data import load_coat

    split = h.load_split("coat", data_dir=data_dir)
    np.testing.assert_array_equal(split.propensity, load_coat(data_dir / "coat").propensities)
    study = h.run_study(split, grid=(1.0,), max_iter=3, only=("MF", "MMC"), quiet=True)
    assert set(study["rows"]) == {"MF", "MMC", "MF (IPS)"}  # MMC takes no propensities
    test = split.test
    for name in ("MF", "MF (IPS)"):
        pred = study["predictions"][name]
        want = np.mean((pred - test.rating) ** 2)
        assert study["rows"][name]["mse"] == pytest.approx(want, rel=1e-6)
    assert np.max(np.abs(study["predictions"]["MF"] - study["predictions"]["MF (IPS)"])) > 1e-3


def test_ml100k_split_is_uniform_over_every_user(tmp_path):
    """ml100k (a u.data written here, timestamps growing with the user id): a 70 / 10 / 20
    partition of every rating drawn at random, so the test set holds ratings of most users
    (a chronological split would give it only the last users)."""
    rng = np.random.default_rng(0)
    n_users, n_items, per_user = 60, 40, 20
    user = np.repeat(np.arange(1, n_users + 1), per_user)
    item = np.concatenate(
        [rng.choice(n_items, per_user, replace=False) + 1 for _ in user[::per_user]]
    )
    lines = [
        f"{u}\t{i}\t{rng.integers(1, 6)}\t{1000 * u + k}"
        for k, (u, i) in enumerate(zip(user, item, strict=True))
    ]
    (tmp_path / "ml-100k").mkdir()
    (tmp_path / "ml-100k" / "u.data").write_text("\n".join(lines) + "\n")
    split = h.load_split("ml100k", data_dir=tmp_path)
    sizes = [s.rating.size for s in (split.train, split.validation, split.test)]
    assert sizes == [840, 120, 240]
    pairs = {
        (int(u), int(i))
        for s in (split.train, split.validation, split.test)
        for u, i in zip(s.user, s.item, strict=True)
    }
    assert len(pairs) == user.size
    assert np.unique(split.test.user).size > 0.8 * n_users
