"""The realistic SERP model of the simulator (``serp_variants``) and deduplication.

Oracles: a Python ``Counter`` over row tuples (deduplication), the stated variant
probabilities ``2^-v / sum`` (binomial tolerances, fixed seeds), and the model's exact
marginal click probabilities (themselves checked against brute-force enumeration in
test_exact_estep.py)."""

from __future__ import annotations

from collections import Counter, defaultdict

import jax
import numpy as np
import pytest

from jaxcal.clicks import Sessions, example_params, from_params, simulate

Z = 5.0  # binomial standard errors allowed in the statistical checks (fixed seeds)


def _row_tuples(log):
    for i in range(log.n_sessions):
        k = int(log.mask[i].sum())
        yield (int(log.query[i]), tuple(log.doc[i, :k].tolist()), tuple(log.clicks[i, :k].tolist()))


def test_deduplicate_equals_counter():
    rng = np.random.default_rng(0)
    S, n = 3000, 4
    query = rng.integers(0, 3, S)
    doc = rng.integers(0, 3, (S, n))  # few distinct SERPs: many repeats
    lengths = rng.integers(1, n + 1, S)
    mask = np.arange(n) < lengths[:, None]
    clicks = (rng.random((S, n)) < 0.3) & mask
    weight = rng.integers(1, 4, S).astype(float)
    log = Sessions.from_arrays(query, doc, clicks.astype(int), mask, weight)
    want: defaultdict = defaultdict(float)
    for row, w in zip(_row_tuples(log), weight, strict=True):
        want[row] += w
    dedup = log.deduplicate()
    got = dict(zip(_row_tuples(dedup), dedup.weight.tolist(), strict=True))
    assert dedup.n_sessions == len(want) < S
    assert got == dict(want)
    # rows come out in lexicographic order of (query, doc..., clicks..., mask...)
    keys = np.concatenate(
        [dedup.query[:, None], dedup.doc, dedup.clicks, dedup.mask.astype(int)], axis=1
    )
    assert [tuple(k) for k in keys] == sorted(tuple(k) for k in keys)
    assert dedup.deduplicate().n_sessions == dedup.n_sessions


K_VARIANTS, N_QUERIES, N_SESSIONS = 3, 2, 8000


@pytest.fixture(scope="module", params=["DBN", "UBM"])
def variant_log(request):
    name = request.param
    params = example_params(name, n_queries=N_QUERIES, key=jax.random.key(0))
    log = simulate(name, params, N_SESSIONS, key=jax.random.key(3), serp_variants=K_VARIANTS)
    return name, params, log


def test_serp_variants_are_fixed_and_follow_their_probabilities(variant_log):
    _, _, log = variant_log
    k, n_q, S = K_VARIANTS, N_QUERIES, N_SESSIONS
    probs = 2.0 ** -np.arange(k)
    probs /= probs.sum()
    for q in range(n_q):
        serps = Counter(map(tuple, log.doc[log.query == q].tolist()))
        assert len(serps) == k  # k fixed SERPs, no per-session reshuffles
        for serp in serps:
            assert len(set(serp)) == len(serp) and max(serp) < 15  # docs from q's pool
        count = np.array(sorted(serps.values(), reverse=True), float)
        total = count.sum()
        sd = np.sqrt(total * probs * (1 - probs))
        assert np.all(np.abs(count - total * probs) < Z * sd), (count, total * probs)
    assert log.deduplicate().n_sessions < S / 4  # realistic logs repeat


def test_clicks_on_a_fixed_serp_follow_the_model(variant_log):
    """Observed CTR per rank on each query's most common SERP equals the true model's exact
    marginal P(C_r = 1) within binomial error."""
    name, params, log = variant_log
    truth = from_params(name, params)
    for q in range(N_QUERIES):
        at_q = log[log.query == q]
        top = Counter(map(tuple, at_q.doc.tolist())).most_common(1)[0][0]
        rows = at_q[np.all(at_q.doc == np.array(top), axis=1)]
        p = np.asarray(truth.predict_marginal(rows[:1]))[0]
        ctr = rows.clicks.mean(axis=0)
        sd = np.sqrt(p * (1 - p) / rows.n_sessions)
        assert np.all(np.abs(ctr - p) < Z * sd), (ctr, p)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_serp_variants_raise(bad):
    with pytest.raises(ValueError, match="serp_variants"):
        params = {"alpha": np.full((1, 10), 0.5), "gamma": np.full(10, 0.5)}
        simulate("PBM", params, 10, key=jax.random.key(0), serp_variants=bad)
