"""Per-user ranking metrics against scikit-learn and direct NumPy loops."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import ndcg_score, roc_auc_score

from jaxcal.metrics import ranking

TOL = 1e-10  # float64, exact computations


def _problem(seed=0, n_users=25, n_items=40, ties=False):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(n_users, n_items))
    if ties:
        scores = np.round(scores, 0)  # heavy ties
    mask = rng.uniform(size=scores.shape) < 0.5
    labels = (rng.uniform(size=scores.shape) < 0.3).astype(np.int64)
    # users with undefined metrics: one with only negatives, one with nothing evaluated
    labels[0] = 0
    mask[1] = False
    mask[1, 0] = True
    return scores, labels, mask


@pytest.mark.parametrize("ties", [False, True])
def test_auc_matches_sklearn_per_user(ties):
    scores, labels, mask = _problem(ties=ties)
    per_user = np.asarray(ranking.auc(scores, labels, mask=mask, per_user=True))
    expected = np.full(scores.shape[0], np.nan)
    for u in range(scores.shape[0]):
        y, s = labels[u][mask[u]], scores[u][mask[u]]
        if 0 < y.sum() < y.size:
            expected[u] = roc_auc_score(y, s)
    np.testing.assert_array_equal(np.isnan(per_user), np.isnan(expected))
    ok = ~np.isnan(expected)
    np.testing.assert_allclose(per_user[ok], expected[ok], rtol=0, atol=TOL)
    mean = float(ranking.auc(scores, labels, mask=mask))
    assert abs(mean - expected[ok].mean()) < TOL


def test_auc_brute_force_pairs_and_default_mask():
    scores, labels, _ = _problem(seed=3, n_users=6, n_items=12, ties=True)
    labels[0, 0] = 1
    expected = []
    for s, y in zip(scores, labels, strict=True):
        pos, neg = s[y == 1], s[y == 0]
        if pos.size and neg.size:
            cmp = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
            expected.append(cmp.mean())
    assert abs(float(ranking.auc(scores, labels)) - np.mean(expected)) < TOL


def _ndcg_loop(scores, gains, mask, k):
    out = np.full(scores.shape[0], np.nan)
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    for u in range(scores.shape[0]):
        s, g = scores[u][mask[u]], gains[u][mask[u]].astype(float)
        if g.sum() <= 0:
            continue
        top = np.argsort(-s, kind="stable")[:k]
        ideal = np.sort(g)[::-1][:k]
        out[u] = (g[top] @ disc[: top.size]) / (ideal @ disc[: ideal.size])
    return out


@pytest.mark.parametrize("k", [1, 3, 10, 100])
def test_ndcg_matches_sklearn_and_loop(k):
    scores, labels, mask = _problem(seed=1)
    gains = labels * np.random.default_rng(7).integers(1, 4, size=labels.shape)  # graded
    per_user = np.asarray(ranking.ndcg_at_k(scores, gains, k=k, mask=mask, per_user=True))
    loop = _ndcg_loop(scores, gains, mask, k)
    np.testing.assert_array_equal(np.isnan(per_user), np.isnan(loop))
    ok = ~np.isnan(loop)
    np.testing.assert_allclose(per_user[ok], loop[ok], rtol=0, atol=TOL)
    for u in np.flatnonzero(ok):
        g, s = gains[u][mask[u]], scores[u][mask[u]]
        if g.size > 1:  # sklearn needs at least two documents
            assert abs(per_user[u] - ndcg_score(g[None], s[None], k=k)) < TOL
    assert abs(float(ranking.ndcg_at_k(scores, gains, k=k, mask=mask)) - loop[ok].mean()) < TOL


@pytest.mark.parametrize("k", [1, 5, 40])
def test_recall_matches_loop(k):
    scores, labels, mask = _problem(seed=2)
    per_user = np.asarray(ranking.recall_at_k(scores, labels, k=k, mask=mask, per_user=True))
    expected = np.full(scores.shape[0], np.nan)
    for u in range(scores.shape[0]):
        s, y = scores[u][mask[u]], labels[u][mask[u]]
        if y.sum() == 0:
            continue
        top = np.argsort(-s, kind="stable")[:k]
        expected[u] = y[top].sum() / y.sum()
    np.testing.assert_array_equal(np.isnan(per_user), np.isnan(expected))
    ok = ~np.isnan(expected)
    np.testing.assert_allclose(per_user[ok], expected[ok], rtol=0, atol=TOL)
    mean = float(ranking.recall_at_k(scores, labels, k=k, mask=mask))
    assert abs(mean - expected[ok].mean()) < TOL


def test_one_dimensional_input_is_one_user():
    s, y = np.array([0.9, 0.1, 0.5, 0.3]), np.array([1, 0, 0, 1])
    assert abs(float(ranking.auc(s, y)) - roc_auc_score(y, s)) < TOL
    assert float(ranking.recall_at_k(s, y, k=2)) == 0.5


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ranking.auc(np.ones((2, 3)), np.ones((2, 4))), "shape mismatch"),
        (lambda: ranking.auc(np.array([[np.nan, 1.0]]), np.array([[1, 0]])), "NaN"),
        (lambda: ranking.auc(np.array([[0.1, 1.0]]), np.array([[2, 0]])), "0/1"),
        (lambda: ranking.auc(np.array([[0.1, 1.0]]), np.array([[1, 1]])), "undefined"),
        (
            lambda: ranking.auc(np.ones((1, 2)), np.array([[1, 0]]), mask=np.zeros((1, 2), bool)),
            "no entry",
        ),
        (lambda: ranking.auc(np.ones((1, 2)), np.array([[1, 0]]), mask=np.ones((1, 3))), "mask"),
        (lambda: ranking.auc(np.zeros((0, 3)), np.zeros((0, 3))), "non-empty"),
        (lambda: ranking.ndcg_at_k(np.ones((1, 2)), np.array([[1, 0]]), k=0), "positive integer"),
        (lambda: ranking.ndcg_at_k(np.ones((1, 2)), np.array([[-1, 0]]), k=1), ">= 0"),
        (lambda: ranking.recall_at_k(np.ones((1, 2)), np.array([[0, 0]]), k=1), "undefined"),
        (lambda: ranking.recall_at_k(np.ones((1, 2)), np.array([[1, 0]]), k=1.5), "k must"),
    ],
)
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()
