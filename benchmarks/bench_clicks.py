"""EM iteration time of jaxcal click models vs a pure-Python per-session reference.

The reference is what a user would otherwise run: a PyClick-style loop over sessions and ranks
in CPython, with the *same exact* E-step (forward / backward recursions for DBN and CCM) and
dict-based parameter tables. (PyClick itself is not on PyPI; its measured times, from
``../shared/notes/click-models.md``, are printed for comparison: PBM ~87 ms, UBM ~131 ms,
DBN ~4.6 s, CCM ~9.1 s per 1,000 sessions per iteration. Our loop is leaner than PyClick's
object model, so ratios against it are conservative.)

jaxcal: one EM iteration = E-step over all sessions + ``segment_sum`` M-step inside the jitted
``lax.while_loop``; the log is encoded and moved to the device once, and an iteration is timed
as ``(min t(k + 1 iterations) - min t(1 iteration)) / k`` (no deduplication: simulated
sessions with shuffled SERPs rarely repeat). Compile time is reported separately.

    python benchmarks/bench_clicks.py [--sessions 1000000] [--ref-sessions 2000]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import time
from collections import defaultdict

import jax
import numpy as np

from jaxcal.clicks import MODELS, example_params, simulate

MODELS_BENCH = ("PBM", "UBM", "DBN", "CCM")
PYCLICK_MS_PER_1K = {"PBM": 87.0, "UBM": 131.0, "DBN": 4600.0, "CCM": 9100.0}


# --------------------------------------------------------------------------- reference
def _rows(log):
    q, d, c = log.query.tolist(), log.doc.tolist(), log.clicks.tolist()
    return list(zip(q, d, c, strict=True))


def reference_em_iteration(name, rows, theta, prior=(1.0, 2.0)):
    """One EM iteration in plain Python (exact posteriors, Chuklin et al. 2015)."""
    a0, b0 = prior
    alpha = theta["alpha"]
    num, den = defaultdict(float), defaultdict(float)
    snum, sden = defaultdict(float), defaultdict(float)
    n = len(rows[0][1])
    gnum, gden = defaultdict(float), defaultdict(float)
    for q, docs, clicks in rows:
        al = [alpha.get((q, d), 0.5) for d in docs]
        if name in ("PBM", "UBM"):
            prev = 0
            for r in range(n):
                a = al[r]
                g = theta["gamma"][(r, prev)] if name == "UBM" else theta["gamma"][r]
                if clicks[r]:
                    pa = pe = 1.0
                else:
                    skip = 1.0 - a * g
                    pa, pe = a * (1 - g) / skip, g * (1 - a) / skip
                key = (q, docs[r])
                num[key] += pa
                den[key] += 1.0
                gk = (r, prev) if name == "UBM" else r
                gnum[gk] += pe
                gden[gk] += 1.0
                if clicks[r]:
                    prev = r + 1
            continue
        if name == "DBN":
            sig = [theta["sigma"].get((q, d), 0.5) for d in docs]
            gam = theta["gamma"]
            kappa = [gam * (1 - s) for s in sig]
            nu = [gam] * n
        else:  # CCM
            t1, t2, t3 = theta["tau"]
            kappa = [(1 - a) * t2 + a * t3 for a in al]
            nu = [t1] * n
        eps = [1.0] * (n + 1)
        for r in range(n):
            a = al[r]
            if clicks[r]:
                eps[r + 1] = kappa[r]
            else:
                e = eps[r]
                den_ = 1 - a * e
                eps[r + 1] = e * (1 - a) * nu[r] / den_ if den_ > 0 else 0.0
        x = [0.0] * (n + 1)
        for r in range(n - 1, -1, -1):
            x[r] = al[r] + (1 - al[r]) * nu[r] * x[r + 1]
        last = max((r + 1 for r in range(n) if clicks[r]), default=0)
        for r in range(n):
            a, key, e, rk = al[r], (q, docs[r]), eps[r], r + 1
            has_next = r < n - 1
            xn = x[r + 1]
            if clicks[r]:
                pa = 1.0
            elif rk < last:
                pa = 0.0
            else:
                pa = a * (1 - e) / (1 - e * x[r])
            num[key] += pa
            den[key] += 1.0
            if name == "DBN":
                s, gam = sig[r], theta["gamma"]
                if clicks[r]:
                    d_at = 1 - (1 - s) * gam * xn
                    snum[key] += s / d_at if rk == last else 0.0
                    sden[key] += 1.0
                if has_next:
                    if rk < last:
                        gn, gd = 1.0, 1.0
                    elif rk == last:
                        d_at = 1 - (1 - s) * gam * xn
                        gn = (1 - s) * gam * (1 - xn) / d_at
                        gd = (1 - s) * (1 - gam * xn) / d_at
                    else:
                        dd = 1 - e * x[r]
                        gn = e * (1 - a) * gam * (1 - xn) / dd
                        gd = e * (1 - a) * (1 - gam * xn) / dd
                    gnum[0] += gn
                    gden[0] += gd
            else:  # CCM
                if clicks[r]:
                    if rk == last:
                        z = 1 - ((1 - a) * t2 + a * t3) * xn
                        prel = a * (1 - t3 * xn) / z
                    else:
                        prel = a * t3 / (a * t3 + (1 - a) * t2)
                    num[key] += prel
                    den[key] += 1.0
                if has_next:
                    if not clicks[r]:
                        if rk < last:
                            gn, gd = 1.0, 1.0
                        else:
                            dd = 1 - e * x[r]
                            gn = e * (1 - a) * t1 * (1 - xn) / dd
                            gd = e * (1 - a) * (1 - t1 * xn) / dd
                        gnum[0] += gn
                        gden[0] += gd
                    elif rk == last:
                        z = 1 - ((1 - a) * t2 + a * t3) * xn
                        gnum[1] += (1 - a) * t2 * (1 - xn) / z
                        gden[1] += (1 - a) * (1 - t2 * xn) / z
                        gnum[2] += a * t3 * (1 - xn) / z
                        gden[2] += a * (1 - t3 * xn) / z
                    else:
                        prel = a * t3 / (a * t3 + (1 - a) * t2)
                        gnum[1] += 1 - prel
                        gden[1] += 1 - prel
                        gnum[2] += prel
                        gden[2] += prel
    new = {"alpha": {k: (a0 + num[k]) / (b0 + den[k]) for k in den}}
    if name == "PBM":
        new["gamma"] = [(a0 + gnum[r]) / (b0 + gden[r]) for r in range(n)]
    elif name == "UBM":
        g = dict(theta["gamma"])
        g.update({k: (a0 + gnum[k]) / (b0 + gden[k]) for k in gden})
        new["gamma"] = g
    elif name == "DBN":
        new["sigma"] = {k: (a0 + snum[k]) / (b0 + sden[k]) for k in sden}
        new["gamma"] = (a0 + gnum[0]) / (b0 + gden[0])
    else:
        new["tau"] = [(a0 + gnum[i]) / (b0 + gden[i]) for i in range(3)]
    return new


def reference_init(name, n):
    theta = {"alpha": {}, "sigma": {}}
    if name == "PBM":
        theta["gamma"] = [0.5] * n
    elif name == "UBM":
        theta["gamma"] = {(r, p): 0.5 for r in range(n) for p in range(n)}
    elif name == "DBN":
        theta["gamma"] = 0.5
    else:
        theta["tau"] = [0.5, 0.5, 0.5]
    return theta


# --------------------------------------------------------------------------- jaxcal
def jaxcal_iteration_seconds(name, log, k=10, reps=3):
    """Seconds per EM iteration of the jitted loop (device arrays prepared once), and the
    compile time; ``(min t(k + 1 iterations) - min t(1 iteration)) / k``."""
    import jax.numpy as jnp

    from jaxcal.clicks._em import make_batch, run_em
    from jaxcal.clicks.sessions import encode_pairs

    est = MODELS[name]()
    index, qd = encode_pairs(log)
    batch = make_batch(qd, np.asarray(log.clicks), np.asarray(log.mask), log.weight, None)
    dtype = batch.weight.dtype
    params0 = est._init(index.query.shape[0] + 1, log.n_results, dtype)
    prior, tol = jnp.asarray([1.0, 2.0], dtype), jnp.asarray(0.0, dtype)
    cls = type(est)

    def once(n_iter):
        t = time.perf_counter()
        res = run_em(cls._stats, cls._mstep, params0, batch, prior, tol, max_iter=n_iter)
        jax.block_until_ready(res.params)
        return time.perf_counter() - t

    first = once(1) + once(k + 1)
    t1 = min(once(1) for _ in range(reps))
    tk = min(once(k + 1) for _ in range(reps))
    return (tk - t1) / k, first - t1 - tk, t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1_000_000)
    ap.add_argument("--ref-sessions", type=int, default=2000)
    ap.add_argument("--models", default=",".join(MODELS_BENCH))
    args = ap.parse_args()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_line = next((ln for ln in cpu.splitlines() if "Model name" in ln), platform.processor())
    print(
        f"machine: {model_line.split(':', 1)[-1].strip()}; jax {jax.__version__}; "
        f"devices {jax.devices()}; dtype float32 (JAX default)"
    )
    print(f"log: {args.sessions:,} simulated sessions x 10 results, 1000 queries x 15 docs\n")
    header = (
        f"{'model':5} {'jaxcal s/iter':>13} {'sess/s':>12} {'ms/1e5':>9} {'compile s':>9} "
        f"{'ref ms/1e3':>10} {'x ref':>8} {'PyClick ms/1e3':>14} {'x PyClick':>10}"
    )
    print(header)
    for name in args.models.split(","):
        p = example_params(name, n_queries=1000, n_docs=15, key=jax.random.key(0))
        log = simulate(name, p, args.sessions, key=jax.random.key(1))
        per_iter, compile_s, _ = jaxcal_iteration_seconds(name, log)
        ref_log = log[: args.ref_sessions]
        rows = _rows(ref_log)
        theta = reference_init(name, 10)
        theta = reference_em_iteration(name, rows, theta)  # warm
        t = time.perf_counter()
        reference_em_iteration(name, rows, theta)
        ref_s = time.perf_counter() - t
        ref_per_1k = 1e3 * ref_s / args.ref_sessions * 1e3  # ms per 1000 sessions
        jax_per_1k = 1e3 * per_iter / args.sessions * 1e3
        print(
            f"{name:5} {per_iter:13.3f} {args.sessions / per_iter:12.3g} "
            f"{1e3 * per_iter / args.sessions * 1e5:9.1f} {compile_s:9.1f} "
            f"{ref_per_1k:10.1f} {ref_per_1k / jax_per_1k:8.0f} "
            f"{PYCLICK_MS_PER_1K[name]:14.0f} {PYCLICK_MS_PER_1K[name] / jax_per_1k:10.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
