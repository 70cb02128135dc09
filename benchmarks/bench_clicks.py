"""EM iteration time of jaxcal click models vs a pure-Python per-session reference.

The reference is what a user would otherwise run: a PyClick-style loop over sessions and ranks
in CPython, with the *same exact* E-step (forward / backward recursions for DBN and CCM) and
dict-based parameter tables. (PyClick itself is not on PyPI; its times, measured separately
with PyClick's own code in CPython, are printed for comparison: PBM ~87 ms, UBM ~131 ms,
DBN ~4.6 s, CCM ~9.1 s per 1,000 sessions per iteration. Our loop is leaner than PyClick's
object model, so ratios against it are conservative.)

jaxcal: one EM iteration = E-step over all sessions + ``segment_sum`` M-step inside the jitted
``lax.while_loop``; the log is encoded and moved to the device once, and an iteration is timed
as ``(min t(k + 1 iterations) - min t(1 iteration)) / k`` (no deduplication: simulated
sessions with shuffled SERPs rarely repeat). Compile time is reported separately. The
reference iteration and the two jaxcal runs are interleaved ``--reps`` times and the minimum
of each is kept, so that both sides are measured under the same (shared-machine) load; wall
clock and process CPU time are both reported, with the load average.

    python benchmarks/bench_clicks.py [--sessions 1000000] [--ref-sessions 2000]
"""

from __future__ import annotations

import argparse
import os
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
def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def jaxcal_runner(name, log):
    """A function ``n_iter -> (wall s, CPU s)`` running ``n_iter`` EM iterations of the
    jitted loop on the log (encoded and moved to the device once)."""
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
        w0, c0 = _clock()
        res = run_em(cls._stats, cls._mstep, params0, batch, prior, tol, max_iter=n_iter)
        jax.block_until_ready(res.params)
        w1, c1 = _clock()
        return w1 - w0, c1 - c0

    return once


def reference_runner(name, log):
    """A function ``() -> (wall s, CPU s)`` of one pure-Python EM iteration on ``log``."""
    rows = _rows(log)
    theta = reference_em_iteration(name, rows, reference_init(name, log.n_results))  # warm

    def once():
        w0, c0 = _clock()
        reference_em_iteration(name, rows, theta)
        w1, c1 = _clock()
        return w1 - w0, c1 - c0

    return once


def load_average() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1_000_000)
    ap.add_argument("--ref-sessions", type=int, default=2000)
    ap.add_argument("--models", default=",".join(MODELS_BENCH))
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions (min taken)")
    ap.add_argument("--iters", type=int, default=10, help="k in t(k + 1) - t(1)")
    args = ap.parse_args()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_line = next((ln for ln in cpu.splitlines() if "Model name" in ln), platform.processor())
    print(
        f"machine: {model_line.split(':', 1)[-1].strip()}, {os.cpu_count()} cores; "
        f"jax {jax.__version__}; devices {jax.devices()}; dtype float32 (JAX default)"
    )
    print(f"log: {args.sessions:,} simulated sessions x 10 results, 1000 queries x 15 docs")
    print(f"load average at start: {load_average()}\n")
    header = (
        f"{'model':5} {'jaxcal s/iter':>13} {'sess/s':>10} {'ms/1e5':>8} {'compile s':>9} "
        f"{'ref ms/1e3':>10} {'x ref':>7} {'x ref CPU':>9} {'PyClick ms/1e3':>14} "
        f"{'x PyClick':>9} {'load':>14}"
    )
    print(header)
    k = args.iters
    for name in args.models.split(","):
        p = example_params(name, n_queries=1000, n_docs=15, key=jax.random.key(0))
        log = simulate(name, p, args.sessions, key=jax.random.key(1))
        jax_once = jaxcal_runner(name, log)
        ref_once = reference_runner(name, log[: args.ref_sessions])
        first = jax_once(1)[0] + jax_once(k + 1)[0]  # compiles
        t1, tk, ref = [], [], []
        for _ in range(args.reps):  # interleaved, so both sides see the same load
            t1.append(jax_once(1))
            ref.append(ref_once())
            tk.append(jax_once(k + 1))
        w1, wk = min(t[0] for t in t1), min(t[0] for t in tk)
        c1, ck = min(t[1] for t in t1), min(t[1] for t in tk)
        per_iter, per_iter_cpu = (wk - w1) / k, (ck - c1) / k
        compile_s = first - w1 - wk
        ref_wall = min(t[0] for t in ref) / args.ref_sessions  # s per session
        ref_cpu = min(t[1] for t in ref) / args.ref_sessions
        jax_wall, jax_cpu = per_iter / args.sessions, per_iter_cpu / args.sessions
        print(
            f"{name:5} {per_iter:13.3f} {1 / jax_wall:10.3g} {1e8 * per_iter / args.sessions:8.1f} "
            f"{compile_s:9.1f} {1e6 * ref_wall:10.1f} {ref_wall / jax_wall:7.0f} "
            f"{ref_cpu / jax_cpu:9.0f} {PYCLICK_MS_PER_1K[name]:14.0f} "
            f"{PYCLICK_MS_PER_1K[name] / (1e6 * jax_wall):9.0f} {load_average():>14}",
            flush=True,
        )
    print(
        "\nx ref: wall-clock ratio (min over interleaved repetitions); x ref CPU: ratio of "
        "process CPU time (XLA may use both cores, so this is the conservative one)."
    )


if __name__ == "__main__":
    main()
