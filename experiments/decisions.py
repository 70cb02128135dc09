"""Calibrated top-k decisions (jaxcal.decide): do the lists shown keep their promise?

Two evaluations, each comparing decision rules that differ only in the probabilities they
are given (``jaxcal.decide.top_k`` with the "realised" guarantee, credibility 0.8, at most
10 items per user, targets 0.1 .. 0.8):

1. **Simulator** (``jaxcal.data.simulate_preferences``: true preferences known). 500 users
   x 30 items; a calibration sample of 300 (score, relevance) pairs from 100 users; the
   other 400 users get a list from their 30 items, judged by their relevance labels.
2. **Coat** (Schnabel et al., ICML 2016). BPR-MF trained on the self-selected (MNAR)
   training ratings (rating >= 4 is a positive); the uniformly random (MAR) test ratings
   of half the users (chosen at random) calibrate the scores, the other half's 16 MAR
   items per user are the candidates, judged by their MAR ratings.

Rules: ``uncalibrated`` (sigmoid of the score taken as a probability), ``Platt (point)``
(Platt scaling's point probabilities), ``Bayesian Platt`` (200 posterior draws of Platt
scaling, NUTS), ``Venn-Abers`` (the lower end p0 of the interval), and on the simulator
``true probabilities``. Per rule and target: the share of users shown a list, and the
coverage, the share of the users shown a list whose realised precision reaches the target
(the promise is >= 0.8).

    python experiments/decisions.py [--out docs/img/decisions.png]

prints the tables of docs/decisions.md and writes the figure (about a minute on 2 CPU
cores); progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

import jaxcal
from jaxcal.bayes import NUTS
from jaxcal.data import binarize, load_coat, simulate_preferences
from jaxcal.recsys import BPRMF

TARGETS = np.round(np.arange(0.1, 0.85, 0.1), 2)
CREDIBILITY = 0.8
MAX_K = 10
N_DRAWS = 200
N_CAL_SIM = 150
_START = time.perf_counter()


def say(message: str) -> None:
    print(f"[{time.perf_counter() - _START:5.1f}s] {message}", file=sys.stderr, flush=True)


def sigmoid(x):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


def probability_sources(s_cal, y_cal, s_eval, *, seed: int) -> dict[str, dict]:
    """The ``top_k`` keyword (probs / draws / interval) of each calibrated rule."""
    point = jaxcal.PlattScaling().fit(s_cal, y_cal).predict(s_eval)
    post = jaxcal.PlattScaling().fit_bayes(
        s_cal, y_cal, key=jax.random.key(seed), method=NUTS(n_samples=250, n_warmup=250)
    )
    draws = np.asarray(post.probability_draws(s_eval))
    draws = draws[:: draws.shape[0] // N_DRAWS][:N_DRAWS]
    interval = jaxcal.VennAbers().fit(s_cal, y_cal).interval(s_eval)
    return {
        "uncalibrated": {"probs": sigmoid(s_eval)},
        "Platt (point)": {"probs": np.asarray(point)},
        "Bayesian Platt": {"draws": draws},
        "Venn-Abers": {"interval": tuple(np.asarray(v, np.float64) for v in interval)},
    }


def evaluate(sources: dict[str, dict], group, labels, *, what: str) -> dict[str, dict]:
    """Per rule and target: share of users shown a list, coverage, mean list length and
    the mean realised precision of the lists shown."""
    ids = np.unique(group)
    code = np.searchsorted(ids, group)
    out: dict[str, dict] = {}
    for name, source in sources.items():
        rows = {"shown": [], "coverage": [], "length": [], "precision": []}
        for target in TARGETS:
            d = jaxcal.decide.top_k(group, **source, target=float(target),
                                    credibility=CREDIBILITY, max_k=MAX_K)  # fmt: skip
            k, shown = np.asarray(d.k), np.asarray(d.shown)
            hits = np.bincount(code[shown], weights=labels[shown], minlength=ids.size)
            listed = k > 0
            precision = hits[listed] / np.maximum(k[listed], 1)
            met = hits[listed] >= target * k[listed] - 1e-9
            rows["shown"].append(listed.mean())
            rows["coverage"].append(met.mean() if listed.any() else np.nan)
            rows["length"].append(k[listed].mean() if listed.any() else 0.0)
            rows["precision"].append(precision.mean() if listed.any() else np.nan)
        out[name] = {key: np.array(v) for key, v in rows.items()}
        say(f"{what}: {name} decided at {len(TARGETS)} targets")
    return out


def simulator(seed: int = 0) -> dict[str, dict]:
    data = simulate_preferences(n_users=500, n_items=30, key=jax.random.key(seed), base_rate=0.3,
                                score_scale=1.5, score_shift=1.0)  # fmt: skip
    users = np.asarray(data.users)
    scores = np.asarray(data.scores, np.float64)
    relevance = np.asarray(data.relevance, np.float64)
    rng = np.random.default_rng(seed)
    cal = rng.choice(np.flatnonzero(users < 100), size=N_CAL_SIM, replace=False)
    ev = users >= 100
    say(f"simulator: {ev.sum()} candidate pairs of 400 users, {cal.size} calibration pairs")
    sources = probability_sources(scores[cal], relevance[cal], scores[ev], seed=seed)
    sources["true probabilities"] = {"probs": np.asarray(data.true_prob, np.float64)[ev]}
    return evaluate(sources, users[ev], relevance[ev], what="simulator")


def coat(seed: int = 0) -> dict[str, dict]:
    data = load_coat()
    model = BPRMF(rank=16, learning_rate=0.01, l2=0.1, n_steps=1000, batch_size=256)
    table = np.asarray(model.fit(binarize(data.train), key=jax.random.key(seed)).predict_all())
    users, items = np.nonzero(data.test)
    scores = table[users, items].astype(np.float64)
    labels = (data.test[users, items] >= 4).astype(np.float64)
    cal_users = np.random.default_rng(seed).permutation(data.test.shape[0])[:145]
    cal = np.isin(users, cal_users)
    say(f"coat: BPR-MF trained; {cal.sum()} calibration and {(~cal).sum()} candidate MAR pairs")
    sources = probability_sources(scores[cal], labels[cal], scores[~cal], seed=seed)
    return evaluate(sources, users[~cal], labels[~cal], what="coat")


def table(results: dict[str, dict], title: str) -> str:
    head = " | ".join(f"{t:.1f}" for t in TARGETS)
    lines = [f"{title}: share of users shown a list / coverage (share of those lists with "
             f"realised precision >= target), credibility {CREDIBILITY}", "",
             f"| rule | {head} |", "|---|" + "---|" * len(TARGETS)]  # fmt: skip
    for name, r in results.items():
        cells = [
            f"{s:.2f} / " + ("-" if np.isnan(c) else f"{c:.2f}")
            for s, c in zip(r["shown"], r["coverage"], strict=True)
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(sim: dict, real: dict, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 7.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2, sharex=True)
    for col, (results, title) in enumerate(((sim, "simulator"), (real, "Coat (MAR test)"))):
        top, bottom = axes[0, col], axes[1, col]
        for name, r in results.items():
            style = {"ls": ":", "color": "0.3"} if name == "true probabilities" else {}
            top.plot(TARGETS, r["coverage"], marker="o", label=name, **style)
            bottom.plot(TARGETS, r["shown"], marker="o", label=name, **style)
        top.axhline(CREDIBILITY, color="k", lw=1, ls="--", label=f"promised ({CREDIBILITY})")
        top.set(title=f"{title}: coverage of the lists shown", ylim=(-0.02, 1.02),
                ylabel="P(realised precision >= target)")  # fmt: skip
        bottom.set(title=f"{title}: users shown a list", ylim=(-0.02, 1.02),
                   xlabel="target precision", ylabel="share of users")  # fmt: skip
    axes[0, 0].legend(fontsize=8, loc="lower left")
    axes[0, 1].legend(fontsize=8, loc="lower left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, format="png")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/decisions.png", help="the figure (PNG)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sim = simulator(args.seed)
    print(table(sim, "Simulator") + "\n")
    real = coat(args.seed)
    print(table(real, "Coat") + "\n")
    lengths = " | ".join(f"{n}: {r['length'][4]:.1f}" for n, r in real.items())
    print(f"Coat, target {TARGETS[4]:.1f}: mean list length of the users shown a list: {lengths}")
    say(f"figure: {plot(sim, real, Path(args.out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
