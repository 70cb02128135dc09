"""Multicalibration: jaxcal against MCGrad on the same data, same machine, same run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_multicalibration.py \\
        --peer-python PATH/TO/VENV/bin/python
    python benchmarks/bench_multicalibration.py --quick          # small sizes, no peer

MCGrad (``pip install mcgrad``; it needs PyTorch, pandas and LightGBM, so it lives in a
virtual environment of its own, named by ``--peer-python``) is the peer: the multicalibration
method of Tax et al. (KDD 2026), with its defaults. jaxcal's rows are its defaults too:
``MulticalibrationBoosting()``, and ``PlattScaling()`` as the global baseline.

Protocol, fixed before the run:

* data: ``sim`` (``jaxcal.data.simulate_segments`` with its defaults: 20 countries with
  logit offsets, an over-confident device, one country x device cell, a numeric age
  effect), ``sim-sparse`` (100 countries, a stronger cell), ``sim-numeric`` (no categorical
  effect, a stronger age effect, milder over-confidence); ``sim`` at 1e4, 1e5 and 1e6
  training rows, the other two at 1e5, with as many test rows; Coat (scores of a BPR-MF
  model trained on the missing-not-at-random training ratings, on the random test ratings,
  label: rating >= 4; calibrated on half of the test users' ratings, judged on the other
  half; features: the users' and items' categorical attributes) and the TianGong-ST click
  log (base probabilities: a PBM fitted on half of the training sessions; calibrated on the
  other half and the validation sessions, judged on the test sessions; features: the query
  and the rank);
* seeds: 5 (``--seeds``); the simulations draw new data per seed, Coat and TianGong-ST a new
  split (and, for Coat, a new start of the ranking model); the table gives the mean and, in
  brackets, the range over seeds;
* each (data, size, seed, library) runs in a fresh process: the first fit + predict is
  timed on its own (jaxcal with an empty compilation cache per process: it compiles), then
  ``--warm`` more calls whose median is the warm time (MCGrad above 2e5 rows: its first
  call only, a fit of several minutes); imports are timed apart. Both
  libraries use the same 2 cores (XLA's thread pool; LightGBM's OpenMP threads);
* metrics, computed once for every method by the same code (``jaxcal.metrics``) on the
  test rows: log loss, ECE (15 equal-width bins), the multicalibration error in units of
  its standard deviation over the segments of all features (``multicalibration_error``,
  depth 3), and for the simulations the mean absolute error to the true probability; the
  peak resident memory of each worker process.

Progress lines go to stderr; the markdown table to stdout (and ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULT_TAG = "BENCH_RESULT "
SIM_VARIANTS = {
    "sim": {},
    "sim-sparse": {"n_countries": 100, "country_scale": 0.4, "cell_effect": 1.5},
    "sim-numeric": {
        "country_scale": 0.0,
        "cell_effect": 0.0,
        "age_effect": 1.0,
        "overconfidence": 0.7,
    },
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ data
def simulated(variant: str, n: int, seed: int) -> dict[str, np.ndarray]:
    import jax

    from jaxcal.data import simulate_segments

    data = simulate_segments(2 * n, key=jax.random.key(seed), **SIM_VARIANTS[variant])
    train, test = slice(0, n), slice(n, 2 * n)
    out = {"true_test": data.true_probs[test]}
    for part, rows in (("train", train), ("test", test)):
        out[f"scores_{part}"] = data.scores[rows]
        out[f"labels_{part}"] = data.labels[rows]
        for name, column in data.features.items():
            out[f"feature_{part}_{name}"] = column[rows]
    out["categorical"] = np.array(["country", "device"])
    return out


def _one_hot_groups(matrix: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """Coat's one-hot attribute blocks ("gender:men", ...) back to integer codes."""
    groups: dict[str, list[int]] = {}
    for j, name in enumerate(names):
        groups.setdefault(name.split(":")[0], []).append(j)
    return {g: np.argmax(matrix[:, cols], axis=1).astype(np.int32) for g, cols in groups.items()}


def coat(seed: int) -> dict[str, np.ndarray]:
    import jax

    from jaxcal.data import load_coat
    from jaxcal.recsys import BPRMF

    data = load_coat()
    model = BPRMF().fit(data.train >= 4, key=jax.random.key(seed))
    users, items = np.nonzero(data.test)  # the random test ratings (290 users x 16 items)
    logits = np.asarray(model.predict(users, items), np.float64)
    scores = np.exp(-np.logaddexp(0.0, -logits))
    labels = (data.test[users, items] >= 4).astype(np.float64)
    user_attrs = _one_hot_groups(data.user_features, list(data.user_feature_names))
    item_attrs = _one_hot_groups(data.item_features, list(data.item_feature_names))
    table = {
        **{f"user_{k}": v[users] for k, v in user_attrs.items()},
        **{f"item_{k}": v[items] for k, v in item_attrs.items()},
    }
    # half of the test users calibrate, the other half judge
    rng = np.random.default_rng(seed)
    calibrate_users = rng.permutation(data.test.shape[0])[: data.test.shape[0] // 2]
    fit_rows = np.isin(users, calibrate_users)
    out = {"categorical": np.array(sorted(table))}
    for part, rows in (("train", fit_rows), ("test", ~fit_rows)):
        out[f"scores_{part}"] = scores[rows]
        out[f"labels_{part}"] = labels[rows]
        for name, column in table.items():
            out[f"feature_{part}_{name}"] = column[rows]
    return out


def _subset(sessions, rows):
    from jaxcal.clicks import Sessions

    return Sessions.from_arrays(
        sessions.query[rows],
        sessions.doc[rows],
        sessions.clicks[rows],
        sessions.mask[rows],
        sessions.weight[rows],
    )


def tiangong(seed: int) -> dict[str, np.ndarray]:
    from jaxcal.clicks import PBM, Sessions
    from jaxcal.clicks.io import read_tiangong
    from jaxcal.data import default_data_dir

    folder = Path(default_data_dir()) / "tiangong-st-demo"
    train, valid, test = (
        read_tiangong(folder / f"{part}_per_query_quid.txt") for part in ("train", "valid", "test")
    )
    # half of the training sessions (by seed) fit the click model, the other half and the
    # validation sessions calibrate it; the test sessions judge
    rows = np.random.default_rng(seed).permutation(train.n_sessions)
    half = train.n_sessions // 2
    model = PBM().fit(_subset(train, rows[:half]))
    calibration = Sessions.concatenate([_subset(train, rows[half:]), valid])
    out = {"categorical": np.array(["query", "rank"])}
    for part, log_part in (("train", calibration), ("test", test)):
        probs = np.asarray(model.predict_marginal(log_part), np.float64)
        shown = np.asarray(log_part.mask, bool)
        ranks = np.broadcast_to(np.arange(shown.shape[1]), shown.shape)
        queries = np.broadcast_to(np.asarray(log_part.query)[:, None], shown.shape)
        out[f"scores_{part}"] = np.clip(probs[shown], 1e-6, 1 - 1e-6)
        out[f"labels_{part}"] = np.asarray(log_part.clicks, np.float64)[shown]
        out[f"feature_{part}_query"] = queries[shown].astype(np.int64)
        out[f"feature_{part}_rank"] = ranks[shown].astype(np.int32)
    return out


def make_data(name: str, n: int, seed: int) -> dict[str, np.ndarray]:
    if name in SIM_VARIANTS:
        return simulated(name, n, seed)
    if name == "coat":
        return coat(seed)
    if name == "tiangong":
        return tiangong(seed)
    raise ValueError(f"unknown data set {name!r}")


def feature_table(arrays: dict[str, np.ndarray], part: str) -> dict[str, np.ndarray]:
    prefix = f"feature_{part}_"
    return {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}


# ------------------------------------------------------------------------------ workers
def _timed_calls(fit_predict, warm: int) -> tuple[np.ndarray, float, float]:
    start = time.perf_counter()
    probs = fit_predict()
    first = time.perf_counter() - start
    times = []
    for _ in range(warm):
        start = time.perf_counter()
        fit_predict()
        times.append(time.perf_counter() - start)
    return probs, first, statistics.median(times) if times else float("nan")


def worker_jaxcal(arrays: dict[str, np.ndarray], warm: int) -> dict:
    start = time.perf_counter()
    import jax

    import jaxcal

    imports = time.perf_counter() - start
    categorical = tuple(str(c) for c in arrays["categorical"])
    train_f, test_f = feature_table(arrays, "train"), feature_table(arrays, "test")
    s_tr, y_tr, s_te = arrays["scores_train"], arrays["labels_train"], arrays["scores_test"]

    def boosting():
        fitted = jaxcal.MulticalibrationBoosting().fit(s_tr, y_tr, train_f, categorical=categorical)
        return np.asarray(jax.block_until_ready(fitted.predict(s_te, test_f)))

    def platt():
        fitted = jaxcal.PlattScaling().fit(s_tr, y_tr)
        return np.asarray(jax.block_until_ready(fitted.predict(s_te)))

    out = {"imports": imports}
    for label, run in (("jaxcal MulticalibrationBoosting", boosting), ("jaxcal Platt", platt)):
        probs, first, warm_s = _timed_calls(run, warm)
        out[label] = {"probs": probs.tolist(), "first": first, "warm": warm_s}
    # the process's first call: imports + the boosting's first fit + predict
    out["jaxcal MulticalibrationBoosting"]["fresh"] = (
        imports + out["jaxcal MulticalibrationBoosting"]["first"]
    )
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def worker_mcgrad(arrays: dict[str, np.ndarray], warm: int) -> dict:
    start = time.perf_counter()
    import pandas as pd
    from mcgrad.methods import MCGrad

    imports = time.perf_counter() - start
    categorical = [str(c) for c in arrays["categorical"]]
    frames = {}
    for part in ("train", "test"):
        columns = feature_table(arrays, part)
        frame = pd.DataFrame(columns)
        frame["score"] = arrays[f"scores_{part}"]
        frame["label"] = arrays[f"labels_{part}"]
        frames[part] = frame
    numeric = [c for c in feature_table(arrays, "train") if c not in categorical]

    def run():
        model = MCGrad()
        model.fit(
            frames["train"],
            "score",
            "label",
            categorical_feature_column_names=categorical,
            numerical_feature_column_names=numeric,
        )
        return np.asarray(
            model.predict(
                frames["test"],
                "score",
                categorical_feature_column_names=categorical,
                numerical_feature_column_names=numeric,
            )
        )

    probs, first, warm_s = _timed_calls(run, warm)
    return {
        "imports": imports,
        "MCGrad": {
            "probs": probs.tolist(),
            "first": first,
            "warm": warm_s,
            "fresh": imports + first,
        },
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_worker(python: str, which: str, data_path: str, warm: int) -> dict:
    env = dict(os.environ)
    if which == "jaxcal":
        env["JAXCAL_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="jaxcal-mc-bench-")
    command = [
        python,
        str(Path(__file__).resolve()),
        "--worker",
        which,
        "--data",
        data_path,
        "--warm",
        str(warm),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    raise RuntimeError(f"{which} worker failed:\n{proc.stderr[-4000:]}")


# ------------------------------------------------------------------------------ metrics
def score(probs: np.ndarray, arrays: dict[str, np.ndarray]) -> dict[str, float]:
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxcal import metrics

    labels = arrays["labels_test"]
    probs = np.clip(np.asarray(probs, np.float64), 1e-12, 1 - 1e-12)
    table = feature_table(arrays, "test")
    mce = metrics.multicalibration_error(
        probs, labels, table, categorical=tuple(str(c) for c in arrays["categorical"])
    )
    out = {
        "log loss": float(metrics.nll(probs, labels)),
        "ECE": float(metrics.ece(probs, labels, n_bins=15)),
        "MCE sigma": float(mce.mce_sigma),
    }
    if "true_test" in arrays:
        out["abs error to truth"] = float(np.mean(np.abs(probs - arrays["true_test"])))
    return out


# ------------------------------------------------------------------------------ main
def summarise(rows: list[dict]) -> str:
    keys = [
        "log loss",
        "ECE",
        "MCE sigma",
        "abs error to truth",
        "imports + first s",
        "first s",
        "warm s",
        "peak MB",
    ]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["data"], row["n"], row["method"]), []).append(row)
    lines = [
        "| data | n | method | " + " | ".join(keys) + " |",
        "|---|---:|---|" + "---:|" * len(keys),
    ]
    for (data, n, method), runs in groups.items():
        cells = []
        for k in keys:
            values = [r[k] for r in runs if r.get(k) is not None and np.isfinite(r[k])]
            if not values:
                cells.append("-")
                continue
            fmt = "{:.4f}" if k in ("log loss", "ECE", "abs error to truth") else "{:.2f}"
            mean = fmt.format(statistics.fmean(values))
            cells.append(
                mean
                if len(values) == 1
                else f"{mean} ({fmt.format(min(values))}-{fmt.format(max(values))})"
            )
        lines.append(f"| {data} | {n:,} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="sim,sim-sparse,sim-numeric,coat,tiangong")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="training rows of sim")
    parser.add_argument(
        "--other-sizes", default="100000", help="training rows of sim-sparse and sim-numeric"
    )
    parser.add_argument(
        "--peer-warm-max-n",
        type=int,
        default=200_000,
        help="above this many rows the peer runs its first call only",
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--warm", type=int, default=2)
    parser.add_argument("--peer-python", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", choices=("jaxcal", "mcgrad"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        with np.load(args.data, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        result = (worker_jaxcal if args.worker == "jaxcal" else worker_mcgrad)(arrays, args.warm)
        print(RESULT_TAG + json.dumps(result))
        return

    names = args.data.split(",")
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    other_sizes = [int(float(s)) for s in args.other_sizes.split(",")]
    seeds = args.seeds
    if args.quick:
        names, sizes, other_sizes, seeds = ["sim"], [2000], [2000], 1
    log(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for n in (sizes if name == "sim" else other_sizes) if name in SIM_VARIANTS else [0]:
                for seed in range(seeds):
                    arrays = make_data(name, n, seed)
                    path = os.path.join(tmp, "data.npz")
                    np.savez(path, **arrays)
                    n_train = len(arrays["scores_train"])
                    results = [run_worker(sys.executable, "jaxcal", path, args.warm)]
                    if args.peer_python:
                        peer_warm = args.warm if n_train <= args.peer_warm_max_n else 0
                        results.append(run_worker(args.peer_python, "mcgrad", path, peer_warm))
                    base = {"data": name, "n": n_train, "seed": seed}
                    rows.append(
                        {**base, "method": "uncalibrated", **score(arrays["scores_test"], arrays)}
                    )
                    for result in results:
                        for method, r in result.items():
                            if not isinstance(r, dict):
                                continue
                            rows.append(
                                {
                                    **base,
                                    "method": method,
                                    **score(np.asarray(r["probs"]), arrays),
                                    "first s": r["first"],
                                    "warm s": r["warm"],
                                    "imports + first s": r.get("fresh"),
                                    "peak MB": result["peak_rss_mb"],
                                }
                            )
                    if args.json:  # after every seed, so an interrupted run keeps its rows
                        Path(args.json).write_text(json.dumps(rows, indent=1))
                    log(
                        f"{name} n={n_train:,} seed={seed}: "
                        + ", ".join(
                            f"{r['method']} {r['log loss']:.4f}" for r in rows[-len(results) - 2 :]
                        )
                    )
    print(summarise(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
