"""Bayesian calibration: jaxcal NUTS vs netcal ``method="mcmc"`` (Pyro NUTS), same data.

Time per effective sample (min bulk ESS over the coefficients, ``numpyro.diagnostics``) for
Platt and Gaussian calibration at n = 1e3 and 1e4, 1,000 posterior draws (jaxcal: 4
vectorised chains x 250 draws after 500 warm-up steps; netcal: 1 chain, by default 1,000
draws after 500 warm-up steps, fewer with ``--netcal-draws`` / ``--netcal-warmup`` where
Pyro NUTS is too slow to wait for; time per effective sample is the comparison). jaxcal is
timed after compilation (compile time reported separately). netcal has no Gaussian
(quadratic-logit) calibrator for classification; its ``LogisticCalibrationDependent``
(detection mode, one feature: Gaussian class-conditionals of logit(confidence)) is the
peer there. Then a batch of 100 independent Platt posteriors in one vectorised call vs a
Python loop of single fits.

Run: ``python benchmarks/bench_bayes.py [--quick]`` (float64; prints a table and ratios).
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxcal  # noqa: E402
from jaxcal._progress import log  # noqa: E402
from jaxcal.bayes import NUTS, fit_bayes, fit_bayes_batch  # noqa: E402

WARMUP = 500
DRAWS = 1000
CHAINS = 4


def simulate(n, seed, family):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(float)
    if family == "platt":
        s = rng.normal(1.5 * y, 1.0)
    else:  # unequal variances: a quadratic logit
        s = np.where(y == 1, rng.normal(1.2, 0.7, n), rng.normal(0.0, 1.2, n))
    return s, y


def min_ess(samples: dict) -> float:
    from numpyro.diagnostics import effective_sample_size

    vals = []
    for v in samples.values():
        v = np.asarray(v, np.float64)
        v = v.reshape(v.shape[0], v.shape[1], -1)
        for j in range(v.shape[-1]):
            if np.ptp(v[..., j]) > 0:
                vals.append(float(effective_sample_size(v[..., j])))
    return min(vals)


def time_jaxcal(cal, s, y, key):
    kw = dict(key=key, method=NUTS(n_samples=DRAWS // CHAINS, n_warmup=WARMUP, n_chains=CHAINS))
    t0 = time.perf_counter()
    post = fit_bayes(cal, s, y, **kw)
    jax.block_until_ready(post.theta)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    post = fit_bayes(cal, s, y, **kw)
    jax.block_until_ready(post.theta)
    run = time.perf_counter() - t0
    d = post.diagnostics()
    ess = min(d["ess"].values())
    return run, first - run, ess, d["divergences"]


def time_netcal(family, s, y, draws, warmup):
    import torch
    from netcal.scaling import LogisticCalibration, LogisticCalibrationDependent

    torch.set_num_threads(2)
    kw = dict(method="mcmc", mcmc_steps=draws, mcmc_chains=1, mcmc_warmup_steps=warmup)
    conf = 1.0 / (1.0 + np.exp(-s))  # netcal takes confidences in (0, 1)
    if family == "platt":
        cal = LogisticCalibration(**kw)
        x = conf
    else:
        cal = LogisticCalibrationDependent(**kw)
        x = conf[:, None]
    t0 = time.perf_counter()
    cal.fit(x, y.astype(int))
    run = time.perf_counter() - t0
    samples = {k: v.detach().cpu().numpy()[None] for k, v in cal.mcmc_model.items()}
    return run, min_ess(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="n = 1e3 only, no netcal at 1e4")
    ap.add_argument("--no-netcal", action="store_true")
    ap.add_argument("--cals", default="platt,gaussian", help="comma-separated subset")
    ap.add_argument("--no-batch", action="store_true", help="skip the batch-of-100 part")
    ap.add_argument("--netcal-draws", type=int, default=DRAWS)
    ap.add_argument("--netcal-warmup", type=int, default=WARMUP)
    ap.add_argument("--netcal-max-n", type=int, default=10**9, help="skip netcal above this n")
    args = ap.parse_args()
    sizes = (1000,) if args.quick else (1000, 10000)
    cals = {"platt": jaxcal.PlattScaling(), "gaussian": jaxcal.GaussianCalibration()}
    rows = []
    for name, cal in cals.items():
        if name not in args.cals.split(","):
            continue
        for n in sizes:
            s, y = simulate(n, 0, name)
            log(f"[bench_bayes] jaxcal {name} n={n} ...")
            jt, jc, je, jdiv = time_jaxcal(cal, s, y, jax.random.key(0))
            row = dict(cal=name, n=n, j_time=jt, j_compile=jc, j_ess=je, j_div=jdiv)
            if not args.no_netcal and n <= args.netcal_max_n:
                log(f"[bench_bayes] netcal {name} n={n} ...")
                try:
                    nt, ne = time_netcal(name, s, y, args.netcal_draws, args.netcal_warmup)
                    row.update(n_time=nt, n_ess=ne)
                except Exception as exc:  # report, keep going
                    log(f"[bench_bayes] netcal failed: {exc!r}")
            rows.append(row)
            print_row(row)
    print(
        "\n| calibrator | n | jaxcal s (compile s) | jaxcal min ESS | jaxcal ms/ESS "
        "| netcal s | netcal min ESS | netcal ms/ESS | speed-up per ESS |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        jm = 1e3 * r["j_time"] / r["j_ess"]
        line = (
            f"| {r['cal']} | {r['n']} | {r['j_time']:.2f} ({r['j_compile']:.1f}) "
            f"| {r['j_ess']:.0f} | {jm:.2f} "
        )
        if "n_time" in r:
            nm = 1e3 * r["n_time"] / r["n_ess"]
            line += f"| {r['n_time']:.1f} | {r['n_ess']:.0f} | {nm:.1f} | {nm / jm:.0f}x |"
        else:
            line += "| - | - | - | - |"
        print(line, flush=True)

    if args.no_batch:
        return
    # ---- 100 independent posteriors: one vectorised call vs a Python loop
    B, n, loop_n = 100, 1000, 10
    rng = np.random.default_rng(1)
    S = np.stack([simulate(n, 100 + b, "platt")[0] for b in range(B)])
    Y = np.stack([simulate(n, 100 + b, "platt")[1] for b in range(B)])
    kw = dict(method=NUTS(n_samples=DRAWS // CHAINS, n_warmup=WARMUP, n_chains=CHAINS))
    cal = cals["platt"]
    log("[bench_bayes] batch of 100 ...")
    t0 = time.perf_counter()
    post = fit_bayes_batch(cal, S, Y, key=jax.random.key(1), **kw)
    jax.block_until_ready(post.theta)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    post = fit_bayes_batch(cal, S, Y, key=jax.random.key(1), **kw)
    jax.block_until_ready(post.theta)
    batch_t = time.perf_counter() - t0
    keys = jax.random.split(jax.random.key(1), B)
    fit_bayes(cal, S[0], Y[0], key=keys[0], **kw)  # compile the single-problem path
    t0 = time.perf_counter()
    for b in range(loop_n):
        p = fit_bayes(cal, S[b], Y[b], key=keys[b], **kw)
        jax.block_until_ready(p.theta)
    loop_t = (time.perf_counter() - t0) * B / loop_n
    del rng
    print(
        f"\nbatch of {B} Platt posteriors (n={n}, {DRAWS} draws each): vectorised "
        f"{batch_t:.2f} s (compile {first - batch_t:.1f} s); loop {loop_t:.2f} s "
        f"(extrapolated from {loop_n} problems) -> {loop_t / batch_t:.1f}x"
    )


def print_row(r):
    log(f"[bench_bayes] {r}")


if __name__ == "__main__":
    main()
