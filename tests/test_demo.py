"""``jaxcal demo`` end to end: a small run through ``jaxcal.cli.main``, its PNGs, and its table
recomputed independently from the simulator's output (scikit-learn / scipy fits, numpy metrics).
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import math

import jax
import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, roc_auc_score

from jaxcal.cli import demo, main
from jaxcal.data import simulate_preferences

SEED, N_USERS, N_ITEMS, N_BINS = 3, 100, 150, 10
NAMES = ("PlattScaling", "GaussianCalibration")
FIT_TOL = 1e-6  # metrics of our exact fits vs scipy / sklearn optimisers (solver tolerance)
TOL = 1e-12  # metrics of identical probabilities


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    argv = ["demo", "--seed", str(SEED), "--n-users", str(N_USERS), "--n-items",
            str(N_ITEMS), "--n-bins", str(N_BINS), "--calibrators", ",".join(NAMES),
            "--out", str(out)]  # fmt: skip
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    with open(out / "results.csv", newline="") as fh:
        rows = {(r["calibrator"], r["loss"]): r for r in csv.DictReader(fh)}
    return {"code": code, "out": out, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(),
            "rows": rows}  # fmt: skip


@pytest.fixture(scope="module")
def truth():
    """The simulator's output, regenerated through the public API."""
    k_data, k_split = jax.random.split(jax.random.key(SEED))  # the demo's keys for --seed
    d = simulate_preferences(n_users=N_USERS, n_items=N_ITEMS, key=k_data)
    val, test = d.split(validation_fraction=0.5, key=k_split)
    a = {k: np.asarray(getattr(d, k)) for k in ("scores", "clicks", "relevance", "true_prob",
                                               "propensity")}  # fmt: skip
    return {"val": val, "test": test, **a}


# ------------------------------------------------------------------ independent oracles


def numpy_ece_mce(p, y, n_bins, min_fraction=1e-4):
    """Equal-width bins [k/B, (k+1)/B), the last closed, by integer division."""
    ids = np.minimum((p * n_bins).astype(int), n_bins - 1)
    ece, gaps = 0.0, []
    for b in range(n_bins):
        m = ids == b
        if not m.any():
            continue
        gap = abs(y[m].mean() - p[m].mean())
        ece += m.sum() / p.size * gap
        if m.sum() >= max(1, math.ceil(min_fraction * p.size)):
            gaps.append(gap)
    return ece, max(gaps)


def ips_objective(theta, features, t):
    """sum softplus(z) - t z with z = features @ theta, its gradient and Hessian."""
    z = features @ theta
    q = expit(z)
    value = np.sum(np.logaddexp(0.0, z) - t * z)
    return value, features.T @ (q - t), (features * (q * (1 - q))[:, None]).T @ features


def oracle_probs(name, loss, tr):
    """Fit the calibrator's objective with scipy / scikit-learn; test-set probabilities."""
    s, y = tr["scores"][tr["val"]], tr["clicks"][tr["val"]]
    t = y if loss == "naive" else y / tr["propensity"][tr["val"]]
    s_test = tr["scores"][tr["test"]]

    def feats(x):
        return np.c_[x, np.ones_like(x)] if name == "PlattScaling" else np.c_[x**2, x, x * 0 + 1]

    if name == "PlattScaling" and loss == "naive":  # unpenalised logistic regression
        lr = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(s[:, None], y)
        return lr.predict_proba(s_test[:, None])[:, 1]
    f = feats(s)
    cons = []
    if name == "GaussianCalibration":  # monotone on the training range: 2 a s + b >= 0
        for end in (s.min(), s.max()):
            row = np.array([2 * end, 1.0, 0.0])
            cons.append(
                {"type": "ineq", "fun": lambda th, r=row: r @ th, "jac": lambda th, r=row: r}
            )
    # the mean loss (same minimiser): its values are O(1), so ftol is within float64 reach
    res = minimize(
        lambda th: tuple(v / s.size for v in ips_objective(th, f, t)[:2]), np.zeros(f.shape[1]),
        jac=True, method="SLSQP", constraints=cons, options={"ftol": 1e-15, "maxiter": 2000},
    )  # fmt: skip
    assert res.success, res.message
    return expit(feats(s_test) @ res.x)


# ------------------------------------------------------------------------------ tests


def test_demo_runs_and_reports_progress(run):
    assert run["code"] == 0
    assert "simulating 100 users x 150 items" in run["stderr"]
    for name in NAMES:
        for loss in ("naive", "ips"):
            assert f"fitted {name} ({loss})" in run["stderr"]
    assert "15,000 user-item pairs" in run["stdout"]


def test_table_lists_every_row_and_matches_the_csv(run):
    rows = run["rows"]
    expected = [(demo.BASELINE, "-")] + [(n, lss) for n in NAMES for lss in ("naive", "ips")]
    assert list(rows) == [*expected, (demo.ORACLE, "-")]
    lines = run["stdout"].splitlines()
    for (name, loss), row in rows.items():
        line = next(ln for ln in lines if ln.startswith(name + " ") and f" {loss} " in ln)
        cells = line[len(name) :].split()
        assert cells[0] == loss
        printed = [float(c) for c in cells[1:]]
        full = [float(row[c]) for c in ("ece", "mce", "nll", "auc", "rmse_true")]
        np.testing.assert_allclose(printed, full, atol=5e-5 + 1e-12)  # 4 printed decimals


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("loss", ["naive", "ips"])
def test_numbers_recomputed_independently(run, truth, name, loss):
    row = run["rows"][name, loss]
    p = oracle_probs(name, loss, truth)
    y, r = truth["relevance"][truth["test"]], truth["true_prob"][truth["test"]]
    ref_ece, ref_mce = numpy_ece_mce(p, y, N_BINS)
    assert abs(float(row["ece"]) - ref_ece) < FIT_TOL
    assert abs(float(row["mce"]) - ref_mce) < FIT_TOL
    assert abs(float(row["nll"]) - log_loss(y, p)) < FIT_TOL
    assert abs(float(row["rmse_true"]) - np.sqrt(np.mean((p - r) ** 2))) < FIT_TOL
    assert abs(float(row["auc"]) - roc_auc_score(y, p)) < FIT_TOL
    if name == "PlattScaling":  # strictly increasing: the AUC of the raw scores
        assert abs(float(row["auc"]) - roc_auc_score(y, truth["scores"][truth["test"]])) < TOL
    # (Gaussian calibration is monotone on the training range only: a test score past the
    # vertex of its parabola can swap a pair, so its AUC is the oracle map's, above)


def test_reference_rows_recomputed_exactly(run, truth):
    y, r = truth["relevance"][truth["test"]], truth["true_prob"][truth["test"]]
    for key, p in ((demo.BASELINE, expit(truth["scores"][truth["test"]])), (demo.ORACLE, r)):
        row = run["rows"][key, "-"]
        ref_ece, ref_mce = numpy_ece_mce(p, y, N_BINS)
        assert abs(float(row["ece"]) - ref_ece) < TOL
        assert abs(float(row["mce"]) - ref_mce) < TOL
        assert abs(float(row["nll"]) - log_loss(y, p)) < TOL
        assert abs(float(row["auc"]) - roc_auc_score(y, p)) < TOL
    assert float(run["rows"][demo.ORACLE, "-"]["rmse_true"]) == 0.0


def test_ips_beats_naive_against_the_truth(run):
    for name in NAMES:
        naive, ips = run["rows"][name, "naive"], run["rows"][name, "ips"]
        assert float(ips["ece"]) < 0.5 * float(naive["ece"]), name
        assert float(ips["rmse_true"]) < float(naive["rmse_true"]), name


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_pngs_are_valid_images(run):
    from matplotlib.image import imread

    names = ["reliability_naive", "maps_naive", "reliability_ips", "maps_ips", "score_histograms"]
    for stem in names:
        path = run["out"] / f"{stem}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", stem
        img = imread(path)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100, stem
        assert img.std() > 0.01, stem  # not a blank canvas
        assert str(path) in run["stdout"]


def test_no_plots_and_missing_calibrators(tmp_path, monkeypatch, capsys):
    # a calibrator absent from the installation is skipped with a note, not an error
    real = demo._calibrator_class
    monkeypatch.setattr(demo, "_calibrator_class", lambda n: None if n == "BBQ" else real(n))
    code = main(["demo", "--seed", str(SEED), "--n-users", str(N_USERS), "--n-items",
                 str(N_ITEMS), "--calibrators", "PlattScaling,BBQ", "--out", str(tmp_path),
                 "--no-plots", "--quiet"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0 and out.err == ""  # --quiet: no progress lines
    assert "skipped BBQ: not available" in out.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_missing_matplotlib_skips_plots_with_a_hint(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "matplotlib" else real(n, *a)
    )
    code = main(["demo", "--seed", str(SEED), "--n-users", str(N_USERS), "--n-items",
                 str(N_ITEMS), "--calibrators", "PlattScaling", "--out", str(tmp_path),
                 "--quiet"])  # fmt: skip
    assert code == 0
    assert "pip install 'jaxcal[plot]'" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.png"))


def test_popularity_propensities(truth):
    result = demo.run_demo(seed=SEED, n_users=N_USERS, n_items=N_ITEMS, propensity="popularity",
                           calibrators=["PlattScaling"], quiet=True)  # fmt: skip
    items = np.arange(N_USERS * N_ITEMS) % N_ITEMS
    val = truth["val"]
    counts = np.zeros(N_ITEMS)
    np.add.at(counts, items[val], truth["clicks"][val])
    expected = np.maximum(np.sqrt(counts / counts.max()), 0.1)[items[val]]
    np.testing.assert_allclose(result.propensity, expected, rtol=TOL)
    with pytest.raises(ValueError, match="propensity"):
        demo.run_demo(n_users=5, n_items=5, propensity="guess")
    with pytest.raises(ValueError, match="unknown calibrator"):
        demo.run_demo(n_users=5, n_items=5, calibrators=["Nope"])


# The code blocks of docs/*.md (the tutorial's included) run in tests/test_docs_examples.py.


def test_threads_do_not_change_results(run):
    # the CLI run used --jobs = min(4, cpu count); one thread gives the same numbers exactly
    result = demo.run_demo(seed=SEED, n_users=N_USERS, n_items=N_ITEMS, n_bins=N_BINS,
                           calibrators=list(NAMES), jobs=1, quiet=True)  # fmt: skip
    for row in result.rows:
        ref = run["rows"][row.calibrator, row.loss]
        for col in ("ece", "mce", "nll", "auc", "rmse_true"):
            assert getattr(row, col) == float(ref[col]), (row.calibrator, row.loss, col)
