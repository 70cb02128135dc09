"""ENIR's modified PAV path written with Python lists (one group per fused block): an
oracle independent of jaxcal's JAX path, shared by the ENIR tests."""

from __future__ import annotations

import numpy as np


def breakpoint_models(W, y, s1, s0, n_points, eps):
    """Every breakpoint model of the path over runs with weights ``W``, means ``y`` and
    weighted positives / negatives ``s1`` / ``s0``: ``[(-BIC/2, fitted runs, groups)]``
    (``n_points`` enters the BIC penalty; ``eps`` clips the likelihood's probabilities)."""
    groups = [[W[i], y[i], s1[i], s0[i], [i]] for i in range(W.size)]
    lam, models = 0.0, []
    while True:
        vals = [g[1] for g in groups]
        k = len(groups)
        slopes = []
        for i in range(k):
            up = i > 0 and vals[i - 1] > vals[i]
            down = i < k - 1 and vals[i] > vals[i + 1]
            slopes.append((float(up) - float(down)) / groups[i][0])
        ts = []
        for i in range(k - 1):
            den = slopes[i + 1] - slopes[i]
            if vals[i] == vals[i + 1]:
                ts.append(0.0)
                continue
            t = (vals[i] - vals[i + 1]) / den if den != 0 else np.inf
            ts.append(t if t > 0 else np.inf)
        d = min(ts, default=np.inf)
        if d > 0 and (lam > 0 or d == np.inf):
            fit = np.empty(W.size)
            ll = 0.0
            for g in groups:
                fit[g[4]] = g[1]
                p = min(max(g[1], eps), 1 - eps)
                ll += g[2] * np.log(p) + g[3] * np.log(1 - p)
            models.append((ll - 0.5 * len(groups) * np.log(n_points), fit, [g[4] for g in groups]))
        if d == np.inf:
            break
        for i, g in enumerate(groups):
            g[1] += slopes[i] * d
        lam += d
        merged = [groups[0]]
        for i in range(1, k):
            if ts[i - 1] <= d * (1 + 1e-12) + 1e-15:
                a, b = merged[-1], groups[i]
                merged[-1] = [a[0] + b[0], (a[0] * a[1] + b[0] * b[1]) / (a[0] + b[0]),
                              a[2] + b[2], a[3] + b[3], a[4] + b[4]]  # fmt: skip
            else:
                merged.append(groups[i])
        groups = merged
    return models
