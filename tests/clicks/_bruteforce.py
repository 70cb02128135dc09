"""Brute-force oracle: enumerate every hidden state of a click model on one short SERP.

Independent of the library: the generative story of each model is written out directly
(Chuklin, Markov & de Rijke 2015) over all 2^(3n) assignments of three latent bits per rank:
``A`` (attractive), ``G`` (the examination / continuation coin) and ``X`` (satisfaction for
DBN / SDBN, relevance ``R`` for CCM). Sums over the assignments consistent with the observed
clicks give exact probabilities and posteriors.
"""

from __future__ import annotations

import itertools

import numpy as np


def enumerate_states(name: str, alpha, theta: dict, n: int):
    """Return ``(prob [K], clicks [K, n], exam [K, n + 1], bits)`` over all assignments.

    ``alpha`` is the per-rank attractiveness ``[n]``; ``theta`` holds ``sigma [n]`` (DBN,
    SDBN), ``gamma`` (PBM ``[n]``, UBM ``[n, n]``, DBN scalar), ``lambda [n]`` (DCM),
    ``tau [3]`` (CCM).
    """
    bits = np.array(list(itertools.product([0, 1], repeat=3 * n)), dtype=bool)
    A, G, X = bits[:, :n], bits[:, n : 2 * n], bits[:, 2 * n :]
    K = bits.shape[0]
    prob = np.ones(K)
    exam = np.zeros((K, n + 1), bool)
    clicks = np.zeros((K, n), bool)
    e = np.ones(K, bool)
    prev = np.zeros(K, int)
    for r in range(n):
        a = alpha[r]
        prob *= np.where(A[:, r], a, 1 - a)
        if name in ("DBN", "SDBN"):
            s = theta["sigma"][r]
        elif name == "CCM":
            s = a
        else:
            s = 0.5
        prob *= np.where(X[:, r], s, 1 - s)
        if name == "PBM":
            g = theta["gamma"][r]
            prob *= np.where(G[:, r], g, 1 - g)
            exam[:, r] = G[:, r]
            clicks[:, r] = G[:, r] & A[:, r]
            continue
        if name == "UBM":
            g = theta["gamma"][r, prev]
            prob *= np.where(G[:, r], g, 1 - g)
            exam[:, r] = G[:, r]
            clicks[:, r] = G[:, r] & A[:, r]
            prev = np.where(clicks[:, r], r + 1, prev)
            continue
        exam[:, r] = e
        c = e & A[:, r]
        clicks[:, r] = c
        if name == "CM":
            p_go = np.where(c, 0.0, 1.0)
        elif name == "DCM":
            p_go = np.where(c, theta["lambda"][r], 1.0)
        elif name in ("DBN", "SDBN"):
            g = theta["gamma"] if name == "DBN" else 1.0
            p_go = np.where(c & X[:, r], 0.0, g)
        elif name == "CCM":
            t1, t2, t3 = theta["tau"]
            p_go = np.where(c, np.where(X[:, r], t3, t2), t1)
        else:
            raise ValueError(name)
        prob *= np.where(G[:, r], p_go, 1 - p_go)
        e = e & G[:, r]
    exam[:, n] = e
    return prob, clicks, exam, (A, G, X)


def click_probabilities(name, alpha, theta, observed):
    """Exact ``(P(C_r = 1 | C_<r = observed_<r), P(C_r = 1))`` for one SERP."""
    n = len(observed)
    prob, clicks, _, _ = enumerate_states(name, alpha, theta, n)
    obs = np.asarray(observed, bool)
    cond = np.zeros(n)
    marg = np.zeros(n)
    for r in range(n):
        prefix = np.all(clicks[:, :r] == obs[:r], axis=1)
        total = prob[prefix].sum()
        cond[r] = prob[prefix & clicks[:, r]].sum() / total if total > 0 else np.nan
        marg[r] = prob[clicks[:, r]].sum()
    return cond, marg


def posterior(name, alpha, theta, observed):
    """Exact posterior expectations given the whole click vector (``[n]`` each):
    ``p_attr, p_exam, p_x`` (X = satisfaction / relevance), transition numerators and
    denominators (see the tests for their definitions), and ``log P(C)``."""
    n = len(observed)
    prob, clicks, exam, (A, G, X) = enumerate_states(name, alpha, theta, n)
    sel = np.all(clicks == np.asarray(observed, bool), axis=1)
    p, Pc = prob[sel], prob[sel].sum()

    def ev(ind):
        return (p * ind[sel]).sum() / Pc

    out = {"loglik": np.log(Pc)}
    out["p_attr"] = np.array([ev(A[:, r]) for r in range(n)])
    out["p_exam"] = np.array([ev(exam[:, r]) for r in range(n)])
    out["p_x"] = np.array([ev(X[:, r]) for r in range(n)])
    E, C = exam, clicks
    if name == "DBN":
        open_ = [E[:, r] & ~(C[:, r] & X[:, r]) for r in range(n)]
        out["gamma_num"] = np.array([ev(open_[r] & E[:, r + 1]) for r in range(n - 1)] + [0.0])
        out["gamma_den"] = np.array([ev(open_[r]) for r in range(n - 1)] + [0.0])
    if name == "CCM":
        num, den = np.zeros((3, n)), np.zeros((3, n))
        for r in range(n - 1):
            for k, state in enumerate([E[:, r] & ~C[:, r], C[:, r] & ~X[:, r], C[:, r] & X[:, r]]):
                num[k, r] = ev(state & E[:, r + 1])
                den[k, r] = ev(state)
        out["tau_num"], out["tau_den"] = num, den
    return out
