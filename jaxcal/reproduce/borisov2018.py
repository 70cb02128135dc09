"""Borisov et al. (CIKM 2018): per-rank isotonic calibration of click models, Tables 1-3.

Protocol (paper, Sec. 4): train each click model (CCM, DBN, DCM, UBM; EM with 50 iterations,
DCM in closed form) under every Beta prior ``a / b`` with ``a in {1, 2, 3}``, ``a < b <= 10``
(24 priors); evaluate the average perplexity (Eq. 6, unconditional probabilities; the
conditional variant too) on a test log for

1. *Baseline w/o dev set*: trained on the training log;
2. *Baseline w/ dev set*: trained on training + development logs;
3. *Calibrated*: trained on the training log, calibrated per rank on the development log.

and report the mean over priors (Table 1) and the variance over priors, absolute (Table 2,
x 100) and relative to row 1 (Table 3). Logs: the TianGong-ST demo (train / valid / test
files) and a simulated log (DBN ground truth, Zipf-distributed queries so that many
query-document pairs are rare, which is where priors matter). Reliability diagrams (100
buckets) of the most miscalibrated prior are written as PNGs.

Run with ``jaxcal reproduce borisov2018 --out results/borisov2018`` or
``python experiments/click_calibration.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxcal._progress import log, progress
from jaxcal.clicks import (
    MODELS,
    Sessions,
    calibrate_click_model,
    example_params,
    perplexity,
    read_tiangong,
    reliability_by_rank,
    simulate,
)
from jaxcal.data import default_data_dir
from jaxcal.plot.clicks import reliability_by_rank_diagram

__all__ = ["PRIORS", "add_arguments", "run", "run_study", "simulated_logs", "tiangong_logs"]

#: the paper's 24 priors (numerator, denominator)
PRIORS: tuple[tuple[int, int], ...] = tuple((a, b) for a in (1, 2, 3) for b in range(a + 1, 11))
PAPER_MODELS = ("CCM", "DBN", "DCM", "UBM")
ROWS = ("Baseline w/o dev set", "Baseline w/ dev set", "Calibrated")
# Table 1 of the paper (Yandex log), for the comparison in docs
PAPER_TABLE1 = {
    "CCM": (1.3896, 1.3890, 1.3722),
    "DBN": (1.3915, 1.3908, 1.3705),
    "DCM": (1.3826, 1.3822, 1.3752),
    "UBM": (1.3724, 1.3719, 1.3659),
}
CLIP = 1e-6  # a model can assign probability 0 to an observed event (CM-like limits); see docs


def tiangong_logs(data_dir: Path) -> tuple[Sessions, Sessions, Sessions]:
    """``(train, dev, test)`` from the TianGong-ST demo folder (``tiangong-st-demo`` in
    ``data_dir``: its ``train``, ``valid`` and ``test`` files).

    Example:
        >>> from pathlib import Path
        >>> from jaxcal.reproduce.borisov2018 import tiangong_logs
        >>> folder = Path("data/tiangong-st-demo")
        >>> folder.mkdir(parents=True, exist_ok=True)
        >>> line = "1\\t5\\t[1, 2]\\t[0, 0]\\t[1, 0]\\n"  # one SERP, a click at rank 1
        >>> for part in ("train", "valid", "test"):
        ...     _ = (folder / f"{part}_per_query_quid.txt").write_text(line)
        >>> [log.n_sessions for log in tiangong_logs(Path("data"))]
        [1, 1, 1]
    """
    d = Path(data_dir) / "tiangong-st-demo"
    return tuple(read_tiangong(d / f"{s}_per_query_quid.txt") for s in ("train", "valid", "test"))


def simulated_logs(
    n_train: int, *, n_queries: int | None = None, serp_variants: int | None = 3, seed: int = 0
) -> tuple[Sessions, Sessions, Sessions]:
    """``(train, dev, test)`` of sizes ``n``, ``n / 10``, ``n / 10`` from a DBN with
    Zipf(1.1) query frequencies over ``n_queries`` queries of 15 documents.

    Args:
        n_train: training sessions.
        n_queries: number of queries; default ``max(2000, n_train // 100)``, so that the
            query set grows with the log and its tail stays rare (where priors matter).
        serp_variants: fixed SERPs per query (:func:`jaxcal.clicks.simulate`: variant ``v``
            shown with probability proportional to ``2^-v``); ``None`` draws a fresh random
            ordering per session (no two sessions alike, no deduplication gain).
        seed: random seed (the study's command line takes an integer; it becomes
            ``jax.random.key(seed)`` here).

    Example:
        >>> from jaxcal.reproduce.borisov2018 import simulated_logs
        >>> train, dev, test = simulated_logs(1000, n_queries=50)
        >>> train.n_sessions, dev.n_sessions, test.n_sessions
        (1000, 100, 100)
    """
    if n_queries is None:
        n_queries = max(2000, n_train // 100)
    key = jax.random.key(seed)
    k0, k1, k2, k3 = jax.random.split(key, 4)
    params = example_params("DBN", n_queries=n_queries, n_docs=15, key=k0)
    params["query_probs"] = 1.0 / np.arange(1, n_queries + 1) ** 1.1
    n_dev = max(n_train // 10, 1)
    return tuple(
        simulate("DBN", params, n, key=k, serp_variants=serp_variants)
        for n, k in ((n_train, k1), (n_dev, k2), (n_dev, k3))
    )


def _ppl(probs, s: Sessions) -> float:
    p = np.clip(np.asarray(probs), CLIP, 1 - CLIP)
    return float(perplexity(p, s.clicks, s.mask, sample_weight=s.weight).average)


def run_study(
    logs: tuple[Sessions, Sessions, Sessions],
    *,
    models: tuple[str, ...] = PAPER_MODELS,
    priors: tuple[tuple[int, int], ...] = PRIORS,
    max_iter: int = 50,
    name: str = "log",
    out: Path | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run the protocol on one ``(train, dev, test)`` triple.

    Args:
        logs: the ``(train, dev, test)`` logs.
        models: click model names (``jaxcal.clicks.MODELS``).
        priors: the Beta priors ``(a, b)`` to train with.
        max_iter: EM iterations at most.
        name: the logs' name, in progress lines and figure files.
        out: a folder for the reliability diagrams (PNG; needs matplotlib), or ``None``.
        quiet: no progress lines.

    Returns:
        ``{model: {"marginal": [[row1, row2, row3] per prior], "conditional": ...,
        "priors": ...}}`` of test perplexities, plus ``"seconds"``.

    Example:
        >>> from jaxcal.reproduce.borisov2018 import run_study, simulated_logs
        >>> logs = simulated_logs(1000, n_queries=50)
        >>> res = run_study(logs, models=("DCM",), priors=((1, 2), (1, 5)), quiet=True)
        >>> len(res["DCM"]["marginal"]), len(res["DCM"]["marginal"][0])  # priors x rows
        (2, 3)
    """
    t0 = time.perf_counter()
    train, dev, test = (s.deduplicate() for s in logs)
    train_dev = Sessions.concatenate([train, dev]).deduplicate()
    results: dict[str, Any] = {
        "unique_rows": {
            "train": train.n_sessions,
            "dev": dev.n_sessions,
            "test": test.n_sessions,
            "train+dev": train_dev.n_sessions,
        }
    }
    log(f"{name}: distinct rows after deduplication {results['unique_rows']}", quiet=quiet)
    grid = [(m, p) for m in models for p in priors]
    worst: dict[str, tuple[float, Any, Any]] = {}
    for m, prior in progress(grid, f"{name}: model x prior", quiet=quiet):
        est = MODELS[m]()
        base = est.fit(train, prior=prior, max_iter=max_iter)
        base_dev = est.fit(train_dev, prior=prior, max_iter=max_iter)
        cal = calibrate_click_model(base, dev)
        r = results.setdefault(m, {"marginal": [], "conditional": [], "priors": [], "n_iter": []})
        r["priors"].append(list(prior))
        r["n_iter"].append([int(base.n_iter), int(base_dev.n_iter)])
        for kind in ("marginal", "conditional"):
            fn = f"predict_{kind}"
            r[kind].append(
                [
                    _ppl(getattr(base, fn)(test), test),
                    _ppl(getattr(base_dev, fn)(test), test),
                    _ppl(getattr(cal, fn)(test), test),
                ]
            )
        gap = r["marginal"][-1][0] - r["marginal"][-1][2]
        if m not in worst or gap > worst[m][0]:
            worst[m] = (gap, base, cal)
    results["seconds"] = time.perf_counter() - t0
    if out is not None:
        for m, (_, base, cal) in worst.items():
            kw = {"mask": test.mask, "sample_weight": test.weight}
            diagrams = {
                "uncalibrated": reliability_by_rank(base.predict_marginal(test), test.clicks, **kw),
                "calibrated": reliability_by_rank(cal.predict_marginal(test), test.clicks, **kw),
            }
            path = Path(out) / f"{name}_{m}_reliability.png"
            try:
                reliability_by_rank_diagram(
                    diagrams, path, title=f"{m}, prior {base.prior}, {name} test log"
                )
            except ImportError:  # pragma: no cover - plot extra not installed
                log("matplotlib not installed: skipping reliability diagrams", quiet=quiet)
                break
    return results


def summarise(results: dict[str, Any], *, kind: str = "marginal") -> dict[str, Any]:
    """Tables 1-3: mean over priors, 100 x variance, variance relative to row 1.

    Example:
        >>> from jaxcal.reproduce.borisov2018 import summarise
        >>> results = {"DBN": {"marginal": [[1.4, 1.4, 1.3], [1.6, 1.5, 1.3]]}, "seconds": 1.0}
        >>> table = summarise(results)
        >>> [round(v, 6) for v in table["DBN"]["mean"]], table["DBN"]["var_rel"][2]
        ([1.5, 1.45, 1.3], 0.0)
    """
    table: dict[str, Any] = {}
    for m, r in results.items():
        if not isinstance(r, dict) or kind not in r:  # "seconds", "unique_rows"
            continue
        a = np.asarray(r[kind])  # [priors, 3]
        var = a.var(axis=0, ddof=1) if a.shape[0] > 1 else np.zeros(3)
        table[m] = {
            "mean": a.mean(axis=0).tolist(),
            "var100": (100 * var).tolist(),
            "var_rel": (var / var[0] if var[0] > 0 else np.full(3, np.nan)).tolist(),
            "calibrated_better_all_priors": bool(np.all(a[:, 2] < a[:, 0])),
        }
    return table


def markdown(table: dict[str, Any], title: str) -> str:
    """The three tables as markdown.

    Example:
        >>> from jaxcal.reproduce.borisov2018 import markdown, summarise
        >>> table = summarise({"DBN": {"marginal": [[1.4, 1.4, 1.3], [1.6, 1.5, 1.3]]}})
        >>> print(markdown(table, "sim").splitlines()[6])
        | 1 | Baseline w/o dev set | 1.5000 |
    """
    models = list(table)
    lines = [f"### {title}", ""]
    for key, head, fmt in (
        ("mean", "Average perplexity (Table 1)", "{:.4f}"),
        ("var100", "100 x variance over priors (Table 2)", "{:.4f}"),
        ("var_rel", "Variance relative to row 1 (Table 3)", "{:.2%}"),
    ):
        lines += [f"{head}:", "", "| # | Method | " + " | ".join(models) + " |"]
        lines.append("|---|---|" + "---:|" * len(models))
        for i, row in enumerate(ROWS):
            cells = [fmt.format(table[m][key][i]) for m in models]
            lines.append(f"| {i + 1} | {row} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``jaxcal reproduce borisov2018``.

    Example:
        >>> import argparse
        >>> from jaxcal.reproduce.borisov2018 import add_arguments
        >>> parser = argparse.ArgumentParser()
        >>> add_arguments(parser)
        >>> args = parser.parse_args(["--quick", "--models", "DCM"])
        >>> args.quick, args.models, args.sim_sessions
        (True, 'DCM', 20000)
    """
    parser.add_argument("--out", type=Path, default=Path("results/borisov2018"))
    parser.add_argument("--data-dir", type=Path, default=None, help="default: shared data")
    parser.add_argument(
        "--sim-sessions", type=int, default=20_000, help="simulated training sessions (0: skip)"
    )
    parser.add_argument(
        "--sim-queries",
        type=int,
        default=None,
        help="queries of the simulated world (default max(2000, sim-sessions / 100))",
    )
    parser.add_argument(
        "--serp-variants",
        type=int,
        default=3,
        help="fixed SERPs per simulated query (0: a fresh random ordering per session)",
    )
    parser.add_argument("--skip-tiangong", action="store_true", help="only the simulated log")
    parser.add_argument("--models", default=",".join(PAPER_MODELS))
    parser.add_argument("--max-iter", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="4 priors instead of 24 (smoke test)")
    parser.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the study; write results.json, tables.md and reliability PNGs to ``args.out``.

    Example:
        >>> import argparse, contextlib, io, json
        >>> from jaxcal.reproduce.borisov2018 import add_arguments, run
        >>> parser = argparse.ArgumentParser()
        >>> add_arguments(parser)
        >>> args = parser.parse_args(["--out", "borisov", "--skip-tiangong", "--sim-sessions",
        ...                           "1000", "--sim-queries", "50", "--models", "DCM",
        ...                           "--quick", "--quiet"])
        >>> with contextlib.redirect_stdout(io.StringIO()):  # the tables, also in tables.md
        ...     code = run(args)
        >>> with open("borisov/results.json") as f:
        ...     report = json.load(f)
        >>> code, sorted(report["logs"])
        (0, ['simulated'])
    """
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = tuple(m.strip().upper() for m in args.models.split(",") if m.strip())
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown click models {unknown}; choose from {sorted(MODELS)}.")
    priors = PRIORS[::6] if args.quick else PRIORS
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    logs = {} if args.skip_tiangong else {"tiangong": tiangong_logs(data_dir)}
    if args.sim_sessions > 0:
        logs["simulated"] = simulated_logs(
            args.sim_sessions,
            n_queries=args.sim_queries,
            serp_variants=args.serp_variants or None,
        )
    if not logs:
        raise ValueError("nothing to run: --skip-tiangong with --sim-sessions 0.")
    report: dict[str, Any] = {
        "priors": [list(p) for p in priors],
        "max_iter": args.max_iter,
        "sim": {
            "sessions": args.sim_sessions,
            "queries": args.sim_queries,
            "serp_variants": args.serp_variants,
        },
        "logs": {},
    }
    text = []
    for name, triple in logs.items():
        sizes = [int(s.total_weight) for s in triple]
        log(f"{name}: train / dev / test sessions = {sizes}", quiet=args.quiet)
        res = run_study(
            triple,
            models=models,
            priors=priors,
            max_iter=args.max_iter,
            name=name,
            out=out,
            quiet=args.quiet,
        )
        tables = {k: summarise(res, kind=k) for k in ("marginal", "conditional")}
        report["logs"][name] = {"sizes": sizes, "raw": res, "tables": tables}
        rows = res["unique_rows"]
        minutes = res["seconds"] / 60
        text.append(
            f"{name}: train / dev / test sessions {sizes}, distinct rows {rows}, "
            f"{minutes:.1f} min\n"
        )
        text.append(markdown(tables["marginal"], f"{name} ({sizes[0]} train sessions)"))
        text.append(markdown(tables["conditional"], f"{name}: conditional perplexity"))
    (out / "results.json").write_text(json.dumps(report, indent=1))
    (out / "tables.md").write_text("\n".join(text))
    print("\n".join(text))
    return 0
