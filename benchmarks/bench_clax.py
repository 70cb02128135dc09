"""jaxcal's click models side by side with CLAX: test perplexity, log-likelihood, wall time.

CLAX (PyPI ``clax-models``, Hager et al. 2025) fits the same click models by gradient
descent (AdamW on the conditional-click cross-entropy, mini-batches, early stopping) in JAX;
jaxcal fits them by exact EM. Both are given the same logs, trained on the same training
sessions and scored on the same test sessions by one function: :func:`jaxcal.clicks.perplexity`
(conditional perplexity: the probabilities are ``P(C_r = 1 | C_<r)``) and
:func:`jaxcal.clicks.log_likelihood` (natural log, mean per test session) on each side's
``[S, n]`` conditional click probabilities.

Logs (``--sizes``, ``--models``):

* simulated by :func:`jaxcal.clicks.simulate` from the model being benchmarked (its
  :func:`~jaxcal.clicks.example_params`, 1,000 queries x 15 documents, 10 results per SERP,
  shuffled SERPs), split at random into 80% train, 10% validation, 10% test sessions; the
  ``truth`` columns score the generating parameters on the test sessions (the floor an
  estimator can reach);
* TianGong-ST (``train`` / ``valid`` / ``test_per_query_quid.txt`` of the demo log read by
  :func:`jaxcal.clicks.read_tiangong` from :func:`jaxcal.data.default_data_dir`), unless
  ``--no-tiangong``.

The validation sessions serve only CLAX's early stopping (its ``Trainer`` needs them); jaxcal
does not see them. Pairs of the test sessions unseen in training (the ``unseen`` column:
their share of the test results): jaxcal predicts the prior mean (0.5, the Beta ``(1, 2)``
pseudo-counts of ``fit``); CLAX gives every pair of the log an embedding id, and an unseen
pair keeps its near-zero initial embedding, so it is predicted from CLAX's shared learned
baseline logit (a global attractiveness / satisfaction).

CLAX runs in its own virtual environment (it needs an older JAX), as
``benchmarks/_clax_worker.py`` under ``--clax-python``; the driver writes each log as plain
npz arrays (query, doc, clicks, mask per split) to a temporary folder, the worker trains CLAX's
PBM / UBM / DBN with CLAX's ``Trainer`` (settings: ``--clax-epochs``, ``--clax-batch-size``,
and ``--clax-lr``, the learning rates tried, of which the least validation loss wins; see the
worker's docstring) and writes its test probabilities and times back.
Set up the environment with::

    python3.11 -m venv /tmp/clax-venv
    /tmp/clax-venv/bin/pip install clax-models "jax==0.7.2" "jaxlib==0.7.2"

Times are what a user runs, in seconds of wall clock: jaxcal ``Model().fit(train)`` +
``predict_conditional(test)``, blocked with ``jax.block_until_ready``; CLAX pair encoding +
model + ``Trainer.train`` + ``predict_conditional_clicks``, blocked the same way. "first":
the first call for that log (CLAX in a fresh process; jaxcal with an empty compilation cache,
after the logs before it ran in the same process), so compilation included; "warm": the same
call again in the same process (nothing compiled). CLAX's times are those of the chosen
learning rate; "all lr" adds up its first runs at every rate tried (the cost of the search).
Speed-up: CLAX time / jaxcal time.

    python benchmarks/bench_clax.py --quick                  # smoke run, a few minutes
    python benchmarks/bench_clax.py --sizes 1e4,1e5,1e6 --out clax.md
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from jaxcal.clicks import (
    MODELS,
    Sessions,
    example_params,
    from_params,
    log_likelihood,
    perplexity,
    read_tiangong,
    simulate,
)
from jaxcal.data import default_data_dir

SPLITS = ("train", "valid", "test")
FIELDS = ("query", "doc", "clicks", "mask")
WORKER = Path(__file__).with_name("_clax_worker.py")
TIANGONG = "tiangong-st-demo"


def progress(msg: str) -> None:
    print(f"[bench_clax] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- logs
def split_log(log: Sessions, fractions=(0.8, 0.1, 0.1), seed: int = 0) -> dict[str, Sessions]:
    """Random train / valid / test split of the sessions (each part in log order)."""
    order = np.random.default_rng(seed).permutation(log.n_sessions)
    cuts = np.round(np.cumsum((0.0, *fractions)) * log.n_sessions).astype(int)
    return {
        s: log[np.sort(order[a:b])] for s, a, b in zip(SPLITS, cuts[:-1], cuts[1:], strict=True)
    }


def simulated_logs(name: str, n_sessions: int, seed: int):
    """``(splits, truth)``: a log simulated from ``name`` and the model of its true parameters."""
    params = example_params(name, n_queries=1000, n_docs=15, key=jax.random.key(seed))
    log = simulate(name, params, n_sessions, key=jax.random.key(seed + 1))
    return split_log(log, seed=seed), from_params(name, params)


def tiangong_logs() -> dict[str, Sessions]:
    folder = default_data_dir() / TIANGONG
    splits = {s: read_tiangong(folder / f"{s}_per_query_quid.txt") for s in SPLITS}
    n = max(log.n_results for log in splits.values())
    return {s: log.pad_to(n) for s, log in splits.items()}


def write_npz(path: Path, splits: dict[str, Sessions]) -> None:
    np.savez(
        path, **{f"{s}_{k}": np.asarray(getattr(splits[s], k)) for s in SPLITS for k in FIELDS}
    )


def unseen_share(train: Sessions, test: Sessions) -> float:
    """Share of the test results whose (query, document) pair no training session shows."""

    def keys(log: Sessions) -> np.ndarray:
        k = (np.asarray(log.query, np.int64)[:, None] << 31) | np.asarray(log.doc)
        return k[np.asarray(log.mask)]

    return float(np.mean(~np.isin(keys(test), keys(train))))


# --------------------------------------------------------------------------- the two sides
def run_clax(args, data: Path, models: list[str], workdir: Path) -> dict:
    out = workdir / "clax_result.npz"
    cmd = [
        args.clax_python, str(WORKER), "--data", str(data), "--out", str(out),
        "--models", ",".join(models), "--epochs", str(args.clax_epochs),
        "--batch-size", str(args.clax_batch_size), "--lr", args.clax_lr,
        "--seed", str(args.seed),
    ]  # fmt: skip
    if args.no_warm:
        cmd.append("--no-warm")
    subprocess.run(cmd, check=True)
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


def run_jaxcal(
    name: str, train: Sessions, test: Sessions, prior=(1.0, 2.0)
) -> tuple[jax.Array, float, int]:
    """Fit on ``train``, predict the test conditionals; ``(probs, seconds, EM iterations)``."""
    t0 = time.perf_counter()
    fitted = MODELS[name]().fit(train, prior=prior)
    probs = jax.block_until_ready(fitted.predict_conditional(test))
    return probs, time.perf_counter() - t0, int(fitted.n_iter)


def score(probs, test: Sessions) -> tuple[float, float]:
    """(conditional perplexity, mean log-likelihood per session) of ``probs`` on ``test``."""
    clicks, mask = np.asarray(test.clicks), np.asarray(test.mask)
    ppl = float(perplexity(probs, clicks, mask).average)
    ll = float(log_likelihood(probs, clicks, mask, reduction="mean"))
    return ppl, ll


def benchmark_log(args, label: str, splits, models: list[str], truths: dict, workdir: Path):
    """One log: CLAX's models in one worker process, then jaxcal's; one row per model."""
    train, test = splits["train"], splits["test"]
    data = workdir / "logs.npz"
    write_npz(data, splits)
    progress(f"{label}: CLAX {','.join(models)} ({train.n_sessions:,} training sessions)")
    clax = run_clax(args, data, models, workdir)
    unseen = unseen_share(train, test)
    rows = []
    for name in models:
        progress(f"{label}: jaxcal {name}")
        probs, first, n_iter = run_jaxcal(name, train, test)
        warm = np.nan
        if not args.no_warm:
            probs, warm, _ = run_jaxcal(name, train, test)
        learned, learned_s, _ = run_jaxcal(name, train, test, prior="empirical")
        truth = score(truths[name].predict_conditional(test), test) if name in truths else None
        row = {
            "model": name,
            "log": label,
            "sessions": (train.n_sessions, test.n_sessions),
            "unseen": unseen,
            "truth": truth,
            "clax": score(clax[f"{name}_probs"], test),
            "clax_s": (float(clax[f"{name}_first_s"]), float(clax[f"{name}_warm_s"])),
            "clax_grid_s": float(clax[f"{name}_grid_s"]),
            "clax_lr": float(clax[f"{name}_lr"]),
            "clax_epochs": int(clax[f"{name}_epochs"]),
            "jaxcal": score(probs, test),
            "jaxcal_s": (first, warm),
            "empirical": score(learned, test),
            "empirical_s": learned_s,
            "em_iter": n_iter,
        }
        progress(
            f"{label} {name}: CLAX ppl {row['clax'][0]:.4f} in {row['clax_s'][0]:.1f} s; "
            f"jaxcal ppl {row['jaxcal'][0]:.4f} in {first:.1f} s"
        )
        rows.append(row)
    versions = {k: str(clax[k]) for k in ("clax_version", "jax_version", "device")}
    return rows, versions


# --------------------------------------------------------------------------- report
def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if "Model name" in ln), "")
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    return f"{cpu or 'unknown CPU'}, {os.cpu_count()} cores, load average {load}"


def _pair(values, fmt: str) -> str:
    return " / ".join("-" if np.isnan(v) else format(v, fmt) for v in values)


def markdown(rows: list[dict], header: list[str]) -> str:
    cols = (
        "| model | log | train / test sessions | unseen | truth ppl / LL | CLAX ppl / LL "
        "| CLAX lr, epochs | CLAX s first / warm (all lr) | jaxcal ppl / LL | EM iters "
        "| jaxcal s first / warm | speed-up first / warm "
        '| jaxcal prior="empirical" ppl / LL, s |'
    )
    lines = [*header, "", cols, "|" + "---|" * 2 + "---:|" * 11]
    for r in rows:
        speedup = [c / j for c, j in zip(r["clax_s"], r["jaxcal_s"], strict=True)]
        truth = "-" if r["truth"] is None else _pair(r["truth"], ".4f")
        lines.append(
            f"| {r['model']} | {r['log']} | {r['sessions'][0]:,} / {r['sessions'][1]:,} "
            f"| {100 * r['unseen']:.1f}% | {truth} | {_pair(r['clax'], '.4f')} "
            f"| {r['clax_lr']:g}, {r['clax_epochs']} "
            f"| {_pair(r['clax_s'], '.2f')} ({r['clax_grid_s']:.1f}) "
            f"| {_pair(r['jaxcal'], '.4f')} | {r['em_iter']} | {_pair(r['jaxcal_s'], '.2f')} "
            f"| {_pair(speedup, '.1f')} | {_pair(r['empirical'], '.4f')}, "
            f"{r['empirical_s']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6", help="simulated sessions per log")
    ap.add_argument("--models", default="PBM,UBM,DBN")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2,000 sessions, 3 epochs")
    ap.add_argument("--no-tiangong", action="store_true", help="skip the TianGong-ST log")
    ap.add_argument("--clax-python", default="/tmp/clax-venv/bin/python")
    ap.add_argument("--clax-epochs", type=int, default=50, help="at most (early stopping)")
    ap.add_argument("--clax-batch-size", type=int, default=512)
    ap.add_argument(
        "--clax-lr", default="0.003,0.03,0.1", help="AdamW rates tried; least validation loss wins"
    )
    ap.add_argument("--no-warm", action="store_true", help="time first calls only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="also write the markdown table to this file")
    args = ap.parse_args()
    models = [m.strip().upper() for m in args.models.split(",")]
    unknown = sorted(set(models) - {"PBM", "UBM", "DBN"})
    if unknown:
        ap.error(f"--models: CLAX is compared on PBM, UBM, DBN; got {unknown}")
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.clax_epochs, args.clax_lr = [2000], 3, "0.03"
    if not Path(args.clax_python).exists():
        ap.error(f"--clax-python {args.clax_python} not found (see the module docstring)")

    rows, versions = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_clax_") as tmp:
        workdir = Path(tmp)
        # an empty compilation cache: jaxcal's first calls compile, as in a new install
        os.environ["JAXCAL_COMPILATION_CACHE"] = str(workdir / "xla")
        for n in sizes:
            for name in models:
                progress(f"simulating {n:,} {name} sessions")
                splits, truth = simulated_logs(name, n, args.seed)
                new, versions = benchmark_log(
                    args, f"sim {n:,}", splits, [name], {name: truth}, workdir
                )
                rows += new
        if not args.no_tiangong:
            new, versions = benchmark_log(args, "TianGong-ST", tiangong_logs(), models, {}, workdir)
            rows += new

    header = [
        f"Machine: {machine()}.",
        f"jaxcal: jax {jax.__version__} on {jax.devices()[0].platform}, float32. "
        f"CLAX {versions.get('clax_version')} (jax {versions.get('jax_version')} on "
        f"{versions.get('device')}, float32): AdamW, batch {args.clax_batch_size}, at most "
        f"{args.clax_epochs} epochs with early stopping (patience 0, min_delta 1e-5 on the "
        f"validation loss), learning rate chosen from {args.clax_lr} by validation loss "
        "(the seconds are the chosen rate's; all lr: the first runs of every rate).",
        "ppl: conditional perplexity (mean over ranks); LL: log-likelihood per test session "
        "(natural log); both from jaxcal.clicks.perplexity / log_likelihood on each side's "
        "conditional click probabilities. Seconds: fit + predict.",
    ]
    table = markdown(rows, header)
    print(table)
    if args.out:
        Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
