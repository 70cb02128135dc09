"""MulticalibrationBoosting: closed-form Newton steps, recovery of planted segment effects,
weights against duplicated rows, the training-loss guarantee, batches against loops, files,
jax.export, the pure fit against the eager one, and bad inputs."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal.calibrators import MulticalibrationBoosting
from jaxcal.calibrators.multicalibration import FittedMulticalibrationBoosting

PURE_RTOL = 1e-9  # the same float64 program on padded and unpadded rows


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def log_loss(p, y, w=None):
    w = np.ones_like(p) if w is None else w
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return -np.sum(w * (y * np.log(p) + (1 - y) * np.log(1 - p))) / np.sum(w)


def planted(seed, n):
    """Logits missing a per-country offset, an over-confident device, one country x
    device cell and an age effect; returns (logit, labels, table, true probability)."""
    rng = np.random.default_rng(seed)
    country, device = rng.integers(0, 6, n), rng.integers(0, 3, n)
    age = rng.uniform(18, 80, n)
    logit = rng.normal(-0.3, 1.5, n)
    offset = np.array([-1.0, -0.5, 0.0, 0.3, 0.6, 1.0])
    z = np.where(device == 2, 0.5 * logit, logit) + offset[country]
    z = z + 1.0 * ((country == 1) & (device == 1)) + 0.6 * np.tanh((age - 45) / 10)
    p = sigmoid(z)
    y = (rng.uniform(size=n) < p).astype(float)
    table = {"country": country, "device": device, "age": age}
    return logit, y, table, p


FAST = MulticalibrationBoosting(n_rounds=40, learning_rate=0.3)


@pytest.fixture(scope="module")
def planted_fit():
    s, y, table, p = planted(0, 4000)
    return s, y, table, p, FAST.fit(s, y, table)


def test_one_depth_one_round_is_the_newton_step():
    """Constant scores and one categorical feature with three categories: the tree is the
    best two-group partition of the categories (all three tried by hand) and each leaf is
    the Newton step -G/(H + l2) from logit 0; the final rescaling then fits the two
    groups' label rates exactly (the maximum likelihood of a two-valued logit)."""
    rng = np.random.default_rng(1)
    n = 600
    c = rng.integers(0, 3, n)
    y = (rng.uniform(size=n) < np.array([0.2, 0.5, 0.7])[c]).astype(float)
    s = np.zeros(n)
    l2 = 2.0
    cal = MulticalibrationBoosting(
        max_depth=1,
        n_rounds=1,
        early_stopping=False,
        learning_rate=1.0,
        l2=l2,
        min_samples=1,
        score_type="logit",  # zeros are logits here (in [0, 1], "auto" would read probabilities)
    ).fit(s, y, {"c": c})
    g, h = 0.5 - y, np.full(n, 0.25)  # gradient and Hessian of the log loss at logit 0

    def gain(left):
        def score(m):
            return g[m].sum() ** 2 / (h[m].sum() + l2)

        return score(left) + score(~left) - score(np.ones(n, bool))

    groups = [np.isin(c, [k]) for k in range(3)]  # {k} against the other two
    best = groups[int(np.argmax([gain(m) for m in groups]))]
    leaf = np.asarray(cal.leaf_values)[0]
    left = np.asarray(cal.split_left)[0, 0][c]  # the feature's codes are its categories
    assert int(cal.split_features[0, 0]) == 0 and (left == best).all() | (left == ~best).all()
    for m, value in ((left, leaf[0]), (~left, leaf[1])):
        np.testing.assert_allclose(value, -g[m].sum() / (h[m].sum() + l2), rtol=1e-10)
    p = np.asarray(cal.predict(s, {"c": c}))
    for m in (best, ~best):
        np.testing.assert_allclose(p[m], y[m].mean(), rtol=1e-8)


def test_recovers_planted_segment_effects(planted_fit):
    """Against the known truth: the mean absolute error to the true probability is less
    than half that of the input and of a global Platt map; over the 18 country x device
    segments the mean prediction's error to the mean true probability is on average under
    0.4 of the input's, and the worst segment is better than the input's worst (n = 4000:
    the country x device cell holds ~210 rows, and is only partly recovered)."""
    s, y, table, p, cal = planted_fit
    q = np.asarray(cal.predict(s, table))
    platt = np.asarray(jaxcal.PlattScaling().fit(s, y).predict(s))
    err = np.abs(q - p).mean()
    assert err < 0.5 * np.abs(sigmoid(s) - p).mean()
    assert err < 0.5 * np.abs(platt - p).mean()
    fit_err, input_err = [], []
    for c, d in itertools.product(range(6), range(3)):
        m = (table["country"] == c) & (table["device"] == d)
        fit_err.append(abs(q[m].mean() - p[m].mean()))
        input_err.append(abs(sigmoid(s[m]).mean() - p[m].mean()))
    assert np.mean(fit_err) < 0.4 * np.mean(input_err)
    assert max(fit_err) < max(input_err)
    # held-out data of the same simulation: still closer to the truth than the input
    s2, _, table2, p2 = planted(1, 4000)
    q2 = np.asarray(cal.predict(s2, table2))
    assert np.abs(q2 - p2).mean() < 0.6 * np.abs(sigmoid(s2) - p2).mean()


def test_early_stopping_picks_the_best_held_out_round(planted_fit):
    """The chosen number of trees minimises the recorded mean held-out loss."""
    cal = planted_fit[-1]
    cv = np.asarray(cal.cv_loss)
    k = int(cal.n_rounds)
    assert 0 < k <= 40 and cv[k] == np.nanmin(cv)
    assert np.isfinite(cv[: k + 1]).all()


def test_sample_weight_equals_duplicated_rows():
    """Integer sample weights are duplicated rows, and so are the ips_positive weights of
    propensity 1/2 (positives counted twice). Scores on a few distinct values (each its
    own bin), no early stopping (folds deal rows, not weights), min_samples = 0 (it counts
    rows)."""
    rng = np.random.default_rng(2)
    n = 400
    s = rng.choice([-1.0, 0.0, 0.5, 1.5], n)
    c = rng.integers(0, 4, n)
    y = (rng.uniform(size=n) < sigmoid(s + 0.4 * c - 0.6)).astype(float)
    k = rng.integers(1, 4, n)
    est = MulticalibrationBoosting(n_rounds=8, early_stopping=False, min_samples=0, max_depth=2)
    dup = np.repeat(np.arange(n), k)
    grid = np.array([-1.0, 0.0, 0.5, 1.5] * 4), {"c": np.repeat(np.arange(4), 4)}
    weighted = est.fit(s, y, {"c": c}, sample_weight=k).predict(*grid)
    repeated = est.fit(s[dup], y[dup], {"c": c[dup]}).predict(*grid)
    np.testing.assert_allclose(np.asarray(weighted), np.asarray(repeated), rtol=1e-8)
    omega = np.where(rng.uniform(size=n) < 0.5, 0.5, 1.0)
    ips = est.fit(s, y, {"c": c}, propensity=omega, loss="ips_positive").predict(*grid)
    twice = np.repeat(np.arange(n), np.where((y == 1) & (omega == 0.5), 2, 1))
    want = est.fit(s[twice], y[twice], {"c": c[twice]}).predict(*grid)
    np.testing.assert_allclose(np.asarray(ips), np.asarray(want), rtol=1e-8)


@pytest.mark.parametrize("seed", [3, 4])
def test_training_loss_is_never_worse_than_the_input(seed):
    """Calibrated input (labels drawn from sigmoid(score)), an irrelevant feature: the
    training log loss is at most the input's."""
    rng = np.random.default_rng(seed)
    n = 1000
    s = rng.normal(0, 2, n)
    y = (rng.uniform(size=n) < sigmoid(s)).astype(float)
    table = {"noise": rng.integers(0, 5, n)}
    q = np.asarray(FAST.fit(s, y, table).predict(s, table))
    assert log_loss(q, y) <= log_loss(sigmoid(s), y) + 1e-12


def test_a_harmful_correction_falls_back_to_the_identity():
    """Three huge steps (learning rate 50) wreck a calibrated, informative score beyond
    what the rescaling repairs: the fit is the identity, whose loss is the input's."""
    rng = np.random.default_rng(5)
    n = 1000
    s = rng.normal(0, 3, n)
    y = (rng.uniform(size=n) < sigmoid(s)).astype(float)
    table = {"noise": rng.integers(0, 5, n)}
    est = MulticalibrationBoosting(n_rounds=3, learning_rate=50.0, early_stopping=False, l2=0.0)
    cal = est.fit(s, y, table)
    assert int(cal.n_rounds) == 0 and float(cal.a) == 1.0 and float(cal.b) == 0.0
    np.testing.assert_allclose(np.asarray(cal.predict(s, table)), sigmoid(s), rtol=1e-12)
    # the same trees with a small step are kept: the fallback is not always on
    assert int(est.__class__(n_rounds=3, early_stopping=False).fit(s, y, table).n_rounds) == 3


def test_fit_batch_equals_a_loop():
    """Three problems in one vmapped program equal three single fits (categorical
    features whose every level occurs in each problem: one encoder codes them alike)."""
    rng = np.random.default_rng(6)
    P, n = 3, 500
    s = rng.normal(size=(P, n))
    c = rng.integers(0, 4, (P, n))
    y = rng.uniform(size=(P, n)) < sigmoid(s + 0.5 * c - 0.8 + np.arange(P)[:, None] * 0.3)
    est = MulticalibrationBoosting(n_rounds=20, max_depth=2)
    batch = est.fit_batch(s, y.astype(float), {"c": c})
    got = np.asarray(batch.predict(s, {"c": c}))
    for i in range(P):
        single = est.fit(s[i], y[i].astype(float), {"c": c[i]})
        assert int(batch.n_rounds[i]) == int(single.n_rounds)
        np.testing.assert_allclose(got[i], np.asarray(single.predict(s[i], {"c": c[i]})), rtol=1e-9)


def test_save_load_round_trip(tmp_path, planted_fit):
    """A fitted correction with string, integer and numeric (NaN) columns round-trips."""
    rng = np.random.default_rng(7)
    n = 800
    s = rng.normal(size=n)
    table = {
        "site": rng.choice(["fr", "de", "us"], n),
        "rank": rng.integers(1, 6, n),
        "age": np.where(rng.uniform(size=n) < 0.1, np.nan, rng.uniform(18, 80, n)),
    }
    y = (rng.uniform(size=n) < sigmoid(s + (table["site"] == "fr"))).astype(float)
    cal = MulticalibrationBoosting(n_rounds=10, max_depth=2).fit(s, y, table)
    cal.save(tmp_path / "mc.npz")
    back = jaxcal.load(tmp_path / "mc.npz")
    assert isinstance(back, FittedMulticalibrationBoosting)
    np.testing.assert_array_equal(
        np.asarray(back.predict(s, table)), np.asarray(cal.predict(s, table))
    )
    s2, y2, table2, _, planted_cal = planted_fit
    planted_cal.save(tmp_path / "planted.npz")
    np.testing.assert_array_equal(
        np.asarray(jaxcal.load(tmp_path / "planted.npz").predict(s2, table2)),
        np.asarray(planted_cal.predict(s2, table2)),
    )


def test_new_sizes_in_a_bucket_and_new_rates_compile_nothing(compiles):
    """Rows padded to size buckets (600, 700 and 900 rows all pad to 1024) and traced
    numeric hyperparameters: after a warm-up, new sizes and new rates compile nothing."""

    def data(n, seed):
        rng = np.random.default_rng(seed)
        s, c = rng.normal(size=n), rng.integers(0, 4, n)
        return s, (rng.uniform(size=n) < sigmoid(s + 0.3 * c)).astype(float), {"c": c}

    est = MulticalibrationBoosting(n_rounds=12, early_stopping=False, max_depth=2)
    s, y, table = data(600, 0)
    est.fit(s, y, table).predict(s, table)  # warm-up
    with compiles() as c:
        for n, rate, l2 in ((700, 0.1, 3.0), (900, 0.3, 0.5)):
            s, y, table = data(n, n)
            new = MulticalibrationBoosting(
                n_rounds=12,
                early_stopping=False,
                max_depth=2,
                learning_rate=rate,
                l2=l2,
                min_samples=5,
            )
            jax.block_until_ready(new.fit(s, y, table).predict(s, table))
    assert c.count == 0


def test_auto_score_type_reads_probabilities_in_the_unit_interval():
    """score_type="auto": scores in [0, 1] are probabilities (the fit equals
    score_type="probability"), others logits (equals "logit"); inside jit the program
    makes the same choice, and a traced auto fit predicts what the eager fit predicts."""
    s, y, table, _ = planted(5, 1500)
    p = sigmoid(s)
    for scores, kind in ((p, "probability"), (s, "logit")):
        auto = FAST.fit(scores, y, table)
        named = MulticalibrationBoosting(n_rounds=40, learning_rate=0.3, score_type=kind)
        assert auto.score_type == kind
        np.testing.assert_array_equal(
            np.asarray(auto.predict(scores, table)),
            np.asarray(named.fit(scores, y, table).predict(scores, table)),
        )
        codes = auto.codes(table)
        levels = auto.n_levels

        def pure(s, y, x, levels=levels):
            return FAST.fit_pure(s, y, x, n_levels=levels).predict_codes(s, x)

        np.testing.assert_allclose(
            np.asarray(jax.jit(pure)(scores, y, codes)),
            np.asarray(
                named.fit_pure(scores, y, codes, n_levels=levels).predict_codes(scores, codes)
            ),
            rtol=1e-9,
            atol=1e-12,
        )


def test_without_features_the_score_alone_is_corrected():
    """No table: trees split on the score's bins only, and fix a miscalibrated logit."""
    rng = np.random.default_rng(9)
    s = rng.normal(size=2000)
    p = sigmoid(2 * s - 0.5)
    y = (rng.uniform(size=2000) < p).astype(float)
    q = np.asarray(FAST.fit(s, y).predict(s))
    assert np.abs(q - p).mean() < 0.5 * np.abs(sigmoid(s) - p).mean()


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"a": np.zeros((10, 2))}, "must be 1-D"),
        ({"a": np.zeros(9)}, "has 9 rows"),
        ({"a": np.zeros(10), "b": np.zeros(11)}, "rows"),
        ({"a": np.full(10, np.inf)}, "infinite"),
        ({1: np.zeros(10)}, "names must be strings"),
        ([1, 2, 3], "table of columns"),
    ],
)
def test_bad_tables_raise(table, match):
    s = np.linspace(-1, 1, 10)
    y = np.arange(10) % 2
    with pytest.raises(ValueError, match=match):
        FAST.fit(s, y, table)


def test_bad_inputs_raise(planted_fit):
    s, y, table, _, cal = planted_fit
    with pytest.raises(ValueError, match="max_depth"):
        MulticalibrationBoosting(max_depth=0).fit(s, y, table)
    with pytest.raises(ValueError, match="learning_rate"):
        MulticalibrationBoosting(learning_rate=-1.0).fit(s, y, table)
    with pytest.raises(ValueError, match="score_type"):
        MulticalibrationBoosting(score_type="odds").fit(s, y, table)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        MulticalibrationBoosting(score_type="probability").fit(s, y, table)
    with pytest.raises(ValueError, match="labels"):
        FAST.fit(s, y + 2, table)
    with pytest.raises(ValueError, match="categorical= names"):
        FAST.fit(s, y, table, categorical=["nope"])
    with pytest.raises(ValueError, match="lacks the column"):
        cal.predict(s, {"country": table["country"]})
    with pytest.raises(ValueError, match="pass features="):
        cal.predict(s)
    with pytest.raises(ValueError, match="non-finite"):
        cal.predict(np.full(len(s), np.nan), table)
    with pytest.raises(ValueError, match="codes must have shape"):
        cal.predict_codes(s, cal.codes(table)[:, :1])


def test_sklearn_adapter_passes_feature_columns():
    """In the scikit-learn adapter, X's first column is the score and the others are
    numeric features: the same map as the estimator on that table."""
    from jaxcal.sklearn import ScoreCalibrator

    rng = np.random.default_rng(10)
    n = 1000
    s, x = rng.normal(size=n), rng.uniform(size=n)
    y = (rng.uniform(size=n) < sigmoid(s + 2 * (x > 0.5) - 1)).astype(int)
    est = MulticalibrationBoosting(n_rounds=10, max_depth=2)
    clf = ScoreCalibrator(est).fit(np.stack([s, x], 1), y)
    want = est.fit(s, y, {"x1": x}).predict(s, {"x1": x})
    np.testing.assert_allclose(
        clf.predict_proba(np.stack([s, x], 1))[:, 1], np.asarray(want), rtol=1e-12
    )
