"""jaxcal's multicalibration metrics against MCGrad's on the same data, in float64.

For several simulated data sets (numeric and categorical features, missing values, sample
weights, more segments than ``max_segments``, tied probabilities) this script computes

* ``ecce``, ``ecce_sigma``, ``ecce_pvalue`` of all rows, and
* the multicalibration error: ``mce``, ``mce_sigma``, its p-value, the global ECCE, the
  number of segments and every segment's ECCE and ECCE / sigma,

with ``jaxcal.metrics`` (float64: ``jax_enable_x64``) and, in a subprocess under
``--peer-python`` (a Python with ``mcgrad`` installed; it needs pandas and torch, which
jaxcal does not), with MCGrad's ``ecce``, ``ecce_sigma``, ``ecce_pvalue`` and
``MulticalibrationError(..., precision_dtype="float64")`` at its default segment settings,
and prints the largest absolute difference of each quantity. The two sides exchange plain
``.npz`` files (no pickle). The same file is the peer's script (``--worker``): it imports
neither jax nor jaxcal there.

Expected: differences at float64 rounding (below 1e-9) on every data set with distinct
probabilities. On the data set with tied probabilities the ECCEs may differ: MCGrad reads
the cumulative differences after every row in the order its (unstable) sort leaves tied
rows in, jaxcal after each run of ties (independent of the row order).

    python benchmarks/compare_mcgrad_metrics.py --peer-python PATH/TO/venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

FEATURES = ("country", "device", "member", "age", "income", "tenure", "hour")


def simulate(name: str, n: int, seed: int) -> dict:
    """One data set: probabilities, labels, optional weights, features (strings with a
    missing mask), and which features are categorical."""
    rng = np.random.default_rng(seed)
    country = rng.integers(0, 20, n)
    device = rng.choice(np.array(["android", "ios", "web"]), n, p=[0.5, 0.3, 0.2])
    member = rng.random(n) < 0.3
    age = rng.normal(40, 12, n)
    logit = rng.normal(-1.0, 1.2, n)
    true_logit = logit + 0.4 * (country % 5 == 0) - 0.5 * (device == "web") + 0.02 * (age - 40)
    probs = 1 / (1 + np.exp(-logit))
    labels = (rng.random(n) < 1 / (1 + np.exp(-true_logit))).astype(np.float64)
    data = {
        "probs": probs,
        "labels": labels,
        "country": country,
        "device": device,
        "member": member,
        "age": age,
        "categorical": ["country", "device", "member"],
        "numerical": ["age"],
        "perm": rng.permutation(n),
    }
    if name == "weighted":
        propensity = 1 / (1 + np.exp(-(0.5 - 0.3 * (device == "ios") + rng.normal(0, 0.5, n))))
        data["weights"] = 1.0 / propensity  # IPS weights
    if name == "missing":
        age[rng.random(n) < 0.1] = np.nan
        data["device_missing"] = rng.random(n) < 0.05
    if name == "many":  # 7 features: more than 1000 segments at depth 3
        data["income"] = rng.lognormal(10, 1, n)
        data["tenure"] = rng.integers(0, 8, n).astype(np.float64)  # few distinct: raw values
        data["hour"] = rng.integers(0, 24, n)
        data["categorical"] = ["country", "device", "member", "hour"]
        data["numerical"] = ["age", "income", "tenure"]
    if name == "ties":
        data["probs"] = np.round(probs, 2)
    return data


def feature_table(data: dict) -> dict:
    """The features of a data set as columns; string columns with missing values become
    object columns holding None there."""
    table = {}
    for col in [str(c) for c in data["categorical"]] + [str(c) for c in data["numerical"]]:
        values = data[col]
        if col + "_missing" in data:
            values = values.astype(object)
            values[data[col + "_missing"]] = None
        table[col] = values
    return table


# ------------------------------------------------------------------------------ peer side
def _mcgrad_mce(metrics, frame, weight_column, categorical, numerical):
    return metrics.MulticalibrationError(
        frame,
        label_column="label",
        score_column="score",
        weight_column=weight_column,
        categorical_segment_columns=categorical,
        numerical_segment_columns=numerical,
        precision_dtype="float64",
    )


def worker(path_in: str, path_out: str) -> None:
    """MCGrad's numbers for every data set in ``path_in`` (run under the peer's Python)."""
    import pandas as pd
    from mcgrad import metrics

    data = np.load(path_in, allow_pickle=False)
    names = [str(s) for s in data["datasets"]]
    out = {}
    for name in names:
        get = {k[len(name) + 1 :]: data[k] for k in data.files if k.startswith(name + "/")}
        cat = [str(c) for c in get["categorical"]]
        num = [str(c) for c in get["numerical"]]
        frame = {"label": get["labels"], "score": get["probs"], **feature_table(get)}
        weights = get.get("weights")
        if weights is not None:
            frame["weight"] = weights
        df = pd.DataFrame(frame)
        t0 = time.perf_counter()
        res = {
            "ecce": metrics.ecce(get["labels"], get["probs"], weights),
            "ecce_sigma": metrics.ecce_sigma(get["labels"], get["probs"], weights),
            "ecce_pvalue": metrics.ecce_pvalue(get["labels"], get["probs"], weights),
        }

        weight_column = None if weights is None else "weight"
        mce = _mcgrad_mce(metrics, df, weight_column, cat, num)
        res.update(
            mce=mce.mce,
            mce_sigma=mce.mce_sigma,
            mce_pvalue=mce.mce_pvalue,
            global_ecce=mce.global_ecce,
            n_segments=mce.total_number_segments,
            segment_ecce=mce.segments_ecce,
            segment_ecce_sigma=mce.segments_ecce_sigma,
        )
        res["seconds"] = time.perf_counter() - t0
        perm = get["perm"]  # the same rows in another order: ties may read differently
        weights_perm = None if weights is None else weights[perm]
        res["ecce_shuffled"] = metrics.ecce(get["labels"][perm], get["probs"][perm], weights_perm)
        shuffled = _mcgrad_mce(
            metrics, df.iloc[perm].reset_index(drop=True), weight_column, cat, num
        )
        res["mce_sigma_shuffled"] = shuffled.mce_sigma
        for k, v in res.items():
            out[f"{name}/{k}"] = np.asarray(v, dtype=np.float64)
    np.savez(path_out, **out)


# ---------------------------------------------------------------------------- jaxcal side
def jaxcal_numbers(data: dict, perm: np.ndarray | None = None) -> dict:
    from jaxcal import metrics

    p, y, w = data["probs"], data["labels"], data.get("weights")
    features = feature_table(data)
    if perm is not None:
        p, y, w = p[perm], y[perm], None if w is None else w[perm]
        features = {k: v[perm] for k, v in features.items()}
    t0 = time.perf_counter()
    res = {
        "ecce": metrics.ecce(p, y, sample_weight=w),
        "ecce_sigma": metrics.ecce_sigma(p, y, sample_weight=w),
        "ecce_pvalue": metrics.ecce_pvalue(p, y, sample_weight=w),
    }
    mce = metrics.multicalibration_error(
        p, y, features, sample_weight=w, categorical=data["categorical"], numeric=data["numerical"]
    )
    res.update(
        mce=mce.mce,
        mce_sigma=mce.mce_sigma,
        mce_pvalue=mce.p_value,
        global_ecce=mce.global_ecce,
        n_segments=mce.n_segments,
        segment_ecce=mce.segment_ecce,
        segment_ecce_sigma=mce.segment_ecce_sigma,
    )
    res = {k: np.asarray(v, dtype=np.float64) for k, v in res.items()}
    res["seconds"] = time.perf_counter() - t0
    return res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer-python", help="a Python with mcgrad installed")
    parser.add_argument("--n", type=int, default=20000, help="rows per data set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    if not args.peer_python:
        parser.error("--peer-python is required (the Python of an environment with mcgrad)")

    import jax

    jax.config.update("jax_enable_x64", True)

    names = ["plain", "weighted", "missing", "many", "ties"]
    sets = {name: simulate(name, args.n, args.seed + i) for i, name in enumerate(names)}
    with tempfile.TemporaryDirectory() as tmp:
        path_in, path_out = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        arrays = {"datasets": np.array(names)}
        for name, data in sets.items():
            for k, v in data.items():
                arrays[f"{name}/{k}"] = np.asarray(v)
        np.savez(path_in, **arrays)
        subprocess.run(
            [args.peer_python, os.path.abspath(__file__), "--worker", path_in, path_out],
            check=True,
        )
        peer = dict(np.load(path_out, allow_pickle=False))

    keys = ["ecce", "ecce_sigma", "ecce_pvalue", "mce", "mce_sigma", "mce_pvalue"]
    keys += ["global_ecce", "n_segments", "segment_ecce", "segment_ecce_sigma"]
    print(f"max |jaxcal - mcgrad|, float64, n = {args.n} rows per data set\n")
    print("| data set | " + " | ".join(keys) + " | jaxcal s (first, warm) | mcgrad s |")
    print("|---" * (len(keys) + 3) + "|")
    worst = 0.0
    shuffled = {}
    for name, data in sets.items():
        first = jaxcal_numbers(data)
        ours = jaxcal_numbers(data)
        ours["first"] = first["seconds"]
        again = jaxcal_numbers(data, data["perm"])
        shuffled[name] = [
            abs(float(again["ecce"] - ours["ecce"])),
            abs(float(again["mce_sigma"] - ours["mce_sigma"])),
            abs(float(peer[f"{name}/ecce_shuffled"] - peer[f"{name}/ecce"])),
            abs(float(peer[f"{name}/mce_sigma_shuffled"] - peer[f"{name}/mce_sigma"])),
        ]
        cells = []
        for k in keys:
            a, b = ours[k], peer[f"{name}/{k}"]
            if a.shape != b.shape:
                cells.append(f"shape {a.shape} vs {b.shape}")
                worst = np.inf if name != "ties" else worst
                continue
            diff = float(np.max(np.abs(a - b))) if a.size else 0.0
            cells.append(f"{diff:.1e}")
            if name != "ties":
                worst = max(worst, diff)
        times = f"{ours['first']:.2f}, {ours['seconds']:.2f} | {float(peer[name + '/seconds']):.2f}"
        print(f"| {name} | " + " | ".join(cells) + f" | {times} |")
    print(f"\nlargest difference on data without ties: {worst:.2e}")
    print("\nthe same rows in another order: |shuffled - original| of each side's own numbers\n")
    print("| data set | jaxcal ecce | jaxcal mce_sigma | mcgrad ecce | mcgrad mce_sigma |")
    print("|---|---|---|---|---|")
    for name, diffs in shuffled.items():
        print(f"| {name} | " + " | ".join(f"{d:.1e}" for d in diffs) + " |")
    return 0 if worst <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
