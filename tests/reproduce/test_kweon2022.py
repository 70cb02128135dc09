"""``jaxcal reproduce kweon2022 --quick`` on Coat: every output exists, and every number in
the tables equals the metric recomputed independently (NumPy brute force, not
``jaxcal.metrics``) from the saved test predictions."""

from __future__ import annotations

import csv
import json
import math

import jax
import numpy as np
import pytest

from jaxcal.reproduce import kweon2022 as k

CSV_TOL = 1e-6  # the CSV tables carry 6 decimals
MD_TOL = 5e-5 + 1e-12  # the markdown tables carry 4 decimals
N_BINS = 15


def _bins(p: np.ndarray) -> np.ndarray:
    """Equal-width bins on [0, 1], half-open except the last (closed)."""
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    return np.clip(np.searchsorted(edges, p, side="right") - 1, 0, N_BINS - 1)


def brute_ece(p, y):
    b = _bins(p)
    return sum(abs(y[b == j].sum() - p[b == j].sum()) for j in range(N_BINS)) / p.size


def brute_mce(p, y, min_fraction=1e-4):
    b = _bins(p)
    need = max(1, math.ceil(min_fraction * p.size))
    gaps = [
        abs(y[b == j].mean() - p[b == j].mean()) for j in range(N_BINS) if (b == j).sum() >= need
    ]
    return max(gaps)


def brute_nll(p, y):
    eps = np.finfo(np.float64).eps
    q = np.clip(p, eps, 1 - eps)
    return -np.mean(y * np.log(q) + (1 - y) * np.log(1 - q))


BRUTE = {"ece": brute_ece, "mce": brute_mce, "nll": brute_nll}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, data_dir, monkeypatch_module):
    monkeypatch_module.setenv("JAXCAL_DATA_DIR", str(data_dir))
    out = tmp_path_factory.mktemp("kweon2022")
    summary = k.reproduce("coat", out, quick=True, quiet=True)
    return out, summary


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


@pytest.mark.slow
def test_outputs_exist(quick_run):
    out, summary = quick_run
    for protocol in k.PROTOCOLS:
        for metric in ("ece", "mce", "nll"):
            for ext in ("md", "csv"):
                assert (out / "tables" / f"{metric}_protocol_{protocol}.{ext}").is_file()
        assert (out / f"predictions_{protocol}.npz").is_file()
        for fig in (f"fig1_reliability_{protocol}_LightGCN", f"fig3_maps_{protocol}_LightGCN",
                    f"fig4_case_study_{protocol}_LightGCN"):  # fmt: skip
            assert (out / "figures" / f"{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for fig in ("fig2_scores_NCF", "fig2_scores_LightGCN"):
        assert (out / "figures" / f"{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("summary", "base_rates", "ranking", "negative_ratio"):
        assert (out / "tables" / f"{name}.md").is_file()
    assert json.loads((out / "summary.json").read_text())["dataset"] == "coat"
    assert summary["n_eval"] + summary["n_mar"] == 4640  # Coat's MAR test ratings


@pytest.mark.slow
@pytest.mark.parametrize("protocol", k.PROTOCOLS)
def test_tables_equal_metrics_recomputed_from_predictions(quick_run, protocol):
    out, _ = quick_run
    preds = np.load(out / f"predictions_{protocol}.npz")
    y = preds["labels"]
    assert set(np.unique(y)) == {0.0, 1.0}
    n_checked = 0
    for metric, brute in BRUTE.items():
        header, rows = _read_csv(out / "tables" / f"{metric}_protocol_{protocol}.csv")
        md = (out / "tables" / f"{metric}_protocol_{protocol}.md").read_text()
        for row in rows:
            method, loss = row[1], row[2]
            for model in k.MODELS:
                cell = row[header.index(model)]
                key = f"{model}__{method}__{'none' if loss == '-' else loss}"
                if cell == "":
                    assert key not in preds.files
                    continue
                expected = brute(preds[key], y)
                assert float(cell) == pytest.approx(expected, abs=CSV_TOL), (metric, key)
                assert f"{expected:.4f}" in md or abs(float(f"{expected:.4f}") - expected) < MD_TOL
                n_checked += 1
    assert n_checked >= 3 * 5 * 4  # three metrics, five models, >= 4 rows each


@pytest.mark.slow
def test_published_numbers_and_base_rates(quick_run):
    out, _ = quick_run
    header, rows = _read_csv(out / "tables" / "ece_protocol_a.csv")
    by_method = {(r[1], r[2]): r for r in rows}
    # Table 1 of the paper, Coat, Gaussian calibration with IPS: NCF 0.0062, LightGCN 0.0208
    g = by_method[("Gaussian", "IPS")]
    assert float(g[header.index("NCF (paper)")]) == pytest.approx(0.0062, abs=1e-12)
    assert float(g[header.index("LightGCN (paper)")]) == pytest.approx(0.0208, abs=1e-12)
    # implied base rates: 57 negatives per positive -> 1/58 (closed form); all unobserved
    # pairs -> positives / pairs, counted independently from the data
    header, rows = _read_csv(out / "tables" / "base_rates.csv")
    rates = {r[0]: r for r in rows}
    col = header.index("implied base rate (naive)")
    assert float(rates["a"][col]) == pytest.approx(1 / 58, abs=CSV_TOL)
    study = k.load_study("coat")
    users = study.valid.sum(1) > 0
    candidates = (study.train[users] == 0).sum()
    assert float(rates["b"][col]) == pytest.approx(study.valid.sum() / candidates, abs=CSV_TOL)


@pytest.mark.slow
def test_mar_correction_brings_level_and_ece_down(quick_run):
    """Protocol b's IPS fits inherit a far too low level (relative propensities); the logit
    shift fitted on the 5% MAR sample moves the mean prediction to about the test base rate
    and lowers ECE for every model."""
    _, summary = quick_run
    b = summary["protocols"]["b"]["metrics"]
    d = summary["protocols"]["d"]["metrics"]
    base = summary["test_base_rate"]
    for model in k.MODELS:
        key = f"{model}__Gaussian__IPS"
        assert d[key]["ece"] < 0.5 * b[key]["ece"]
        assert abs(d[key]["mean_p"] - base) < abs(b[key]["mean_p"] - base) / 4


def test_synthetic_study_absolute_propensities():
    """The simulator's study: absolute propensities are the true ones times the hold-out
    factor h w / (1 - (1 - h) w), by hand."""
    from jaxcal.data import simulate_preferences

    study = k.load_study("synthetic", seed=0)
    sim = simulate_preferences(n_users=300, n_items=300, key=jax.random.key(0), base_rate=0.15)
    # the study relabels the simulator's popularity-ordered items by a seeded permutation
    relabel = np.random.default_rng(0 + 3).permutation(300)
    omega = np.asarray(sim.propensity).reshape(300, 300)[:, relabel]
    h = study.holdout_rate
    u = int(np.flatnonzero(h > 0)[0])
    np.testing.assert_allclose(
        study.absolute[u], h[u] * omega[u] / (1 - (1 - h[u]) * omega[u]), rtol=1e-12
    )
    assert study.test_label.size == 300 * 16
    assert abs(study.mar.mean() - k.MAR_FRACTION) < 1e-3


def test_cli_and_errors(tmp_path):
    from jaxcal.cli import build_parser

    args = build_parser().parse_args(
        ["reproduce", "kweon2022", "--quick", "--protocol", "d", "--out", str(tmp_path)]
    )
    assert args.func is k.run and args.quick and args.protocol == "d"
    with pytest.raises(ValueError, match="protocols"):
        k.reproduce("coat", tmp_path, protocols=("e",))
    with pytest.raises(ValueError, match="yahoo-dir"):
        k.reproduce("yahoo", tmp_path)
    with pytest.raises(ValueError, match="dataset"):
        k.reproduce("movielens", tmp_path)


def test_random_holdout_study_uses_every_user():
    """With a random hold-out, h is the global share and protocol c's calibration set is
    every user's non-training pairs; its implied IPS level is sum(V / w_V) / #pairs, by hand
    from Coat's published propensities."""
    from jaxcal.data import load_coat

    study = k.load_study("coat", holdout="random", seed=0)
    h = study.valid.sum() / (study.valid.sum() + study.train.sum())
    np.testing.assert_allclose(study.holdout_rate, h, rtol=1e-15)
    cal = k.calibration_set(study, "c", seed=0)
    keep = study.train == 0
    assert cal.labels.size == keep.sum()
    omega = load_coat().propensities
    w_v = h * omega / (1 - (1 - h) * omega)
    by_hand = np.sum(study.valid[keep] / w_v[keep]) / keep.sum()
    assert cal.base_rate["ips"] == pytest.approx(by_hand, rel=1e-10)
    with pytest.raises(ValueError, match="holdout"):
        k.load_study("coat", holdout="first")
    with pytest.raises(ValueError, match="absolute"):
        k.load_study("coat", absolute="oracle")


def test_yahoo_study_on_small_files(tmp_path):
    """The Yahoo!R3 branch on small files in the Webscope format: the split follows the
    authors' rule and protocol c's propensity of a validation positive is the Naive Bayes
    P(O=1 | rating) (Laplace alpha = 1, counted by hand) times the hold-out factor."""
    from jaxcal.data.yahoo import YAHOO_TEST_FILE, YAHOO_TRAIN_FILE

    rng = np.random.default_rng(4)
    n_users, n_items = 200, 100
    train = np.where(
        rng.random((n_users, n_items)) < 0.2, rng.integers(1, 6, (n_users, n_items)), 0
    )
    test = np.where(rng.random((n_users, n_items)) < 0.1, rng.integers(1, 6, (n_users, n_items)), 0)
    for name, m in ((YAHOO_TRAIN_FILE, train), (YAHOO_TEST_FILE, test)):
        u, i = np.nonzero(m)
        rows = "".join(f"{a + 1}\t{b + 1}\t{m[a, b]}\n" for a, b in zip(u, i, strict=True))
        (tmp_path / name).write_text(rows)
    study = k.load_study("yahoo", yahoo_dir=str(tmp_path))
    assert study.train.shape == (15_400, 1_000)  # the published id space
    pos = (train >= 4).astype(int)
    np.testing.assert_array_equal(
        study.train[:n_users, :n_items] + study.valid[:n_users, :n_items], pos
    )
    mar_ratings = test[study.test_user[study.mar], study.test_item[study.mar]]
    obs = train[train > 0]
    n_pairs = 15_400 * 1_000
    u, i = map(int, np.argwhere(study.valid)[0])
    y = train[u, i]
    p_y_obs = ((obs == y).sum() + 1) / (obs.size + 5)
    p_y = ((mar_ratings == y).sum() + 1) / (mar_ratings.size + 5)
    omega = min(1.0, p_y_obs * (obs.size / n_pairs) / p_y)
    h = study.holdout_rate[u]
    assert study.absolute[u, i] == pytest.approx(h * omega / (1 - (1 - h) * omega), rel=1e-12)


def test_case_study_picks_three_distinct_users(tmp_path):
    """Figure 4's users: the highest and lowest mean top-5 probability and the widest spread
    (brute force over users), three distinct users even when the calibrated map is flat."""
    from types import SimpleNamespace

    rng = np.random.default_rng(0)
    n_u, n_i = 7, 12
    train = (rng.random((n_u, n_i)) < 0.2).astype(np.int64)
    study = SimpleNamespace(train=train, valid=np.zeros_like(train))
    score = rng.normal(size=(n_u, n_i))

    class Map:  # a fitted calibrator stand-in: p = f(s)
        def __init__(self, f):
            self.predict = f

    def table(path):
        with open(path / "tables" / "case_study_t.csv") as fh:
            rows = list(csv.DictReader(fh))
        return [int(rows[5 * j]["user"]) for j in range(3)]

    sigmoid = lambda s: 1 / (1 + np.exp(-s))  # noqa: E731
    k.case_study(tmp_path, study, score, Map(sigmoid), "t", "M")
    top5 = [np.sort(np.where(train[u] > 0, -np.inf, score[u]))[::-1][:5] for u in range(n_u)]
    p = np.array([sigmoid(t) for t in top5])
    assert table(tmp_path)[:2] == [int(np.argmax(p.mean(1))), int(np.argmin(p.mean(1)))]
    k.case_study(tmp_path, study, score, Map(lambda s: np.full(np.shape(s), 0.3)), "t", "M")
    assert len(set(table(tmp_path))) == 3
