"""The whole study in one call: load and split the data, train the base models, fit and
evaluate every protocol, and write the tables, figures, predictions and summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxcal._progress import log
from jaxcal.reproduce.kweon2022.figures import write_figures
from jaxcal.reproduce.kweon2022.fitting import (
    available_calibrators,
    ranking_table,
    ratio_sweep,
    run_protocol,
    train_models,
)
from jaxcal.reproduce.kweon2022.protocol import (
    N_NEGATIVES_AUTHORS,
    PROTOCOLS,
    Study,
    load_study,
)
from jaxcal.reproduce.kweon2022.tables import write_tables

__all__ = ["reproduce"]


def _calibrators(dataset: str, *, quick: bool) -> tuple[dict[str, tuple[Any, bool]], list[str]]:
    """The calibrators of the run (Platt and Gaussian only for ``quick``) and notes."""
    calibrators, notes = available_calibrators(15 if dataset != "yahoo" else 50)
    if quick:  # a smoke run: two parametric calibrators keep the compile time down
        calibrators = {k: v for k, v in calibrators.items() if k in ("Platt", "Gaussian")}
        notes.append("--quick: only Platt and Gaussian calibration are fitted.")
    return calibrators, notes


def _run_protocols(
    study: Study,
    protocols: tuple[str, ...],
    scores: dict[str, np.ndarray],
    calibrators: dict[str, tuple[Any, bool]],
    *,
    seed: int,
    quiet: bool,
) -> dict[str, tuple]:
    """``protocol -> run_protocol(...)`` for the requested protocols (d needs b's fits,
    so b is fitted whenever d is asked for)."""
    todo = [p for p in PROTOCOLS if p in protocols or (p == "b" and "d" in protocols)]
    results: dict[str, tuple] = {}
    for protocol in todo:
        fitted_b = results["b"][2] if protocol == "d" else None
        results[protocol] = run_protocol(
            study, protocol, scores, calibrators, seed=seed, fitted_b=fitted_b, quiet=quiet
        )
    return {p: r for p, r in results.items() if p in protocols}


def _save_arrays(out: Path, study: Study, scores: dict, results: dict) -> None:
    """``predictions_<protocol>.npz`` (every calibrated test prediction) and ``scores.npz``
    (the test pairs and every model's scores on them)."""
    for protocol, (_, preds, _, _) in results.items():
        np.savez_compressed(
            out / f"predictions_{protocol}.npz",
            labels=study.test_label[study.eval_mask],
            **preds,
        )
    np.savez_compressed(
        out / "scores.npz",
        test_user=study.test_user,
        test_item=study.test_item,
        test_label=study.test_label,
        mar=study.mar,
        **{m: s[study.test_user, study.test_item] for m, s in scores.items()},
    )


def reproduce(
    dataset: str = "coat",
    out: str | Path = "kweon2022-out",
    *,
    protocols: tuple[str, ...] = PROTOCOLS,
    quick: bool = False,
    seed: int = 0,
    yahoo_dir: str | None = None,
    holdout: str = "per_user_last",
    absolute: str = "default",
    figures: bool = True,
    quiet: bool = False,
) -> dict:
    """Run the study and write its tables, figures and predictions under ``out``.

    Enables float64 in JAX (``jax_enable_x64``) for the process: the calibration fits and
    metrics are exact float64 computations, as in the authors' scipy code.

    Args:
        dataset: ``"coat"``, ``"yahoo"`` (needs ``yahoo_dir``) or ``"synthetic"``.
        out: output folder.
        protocols: any of ``"a"``, ``"b"``, ``"c"``, ``"d"`` (``"d"`` also fits ``"b"``).
        quick: tiny models, few steps, Platt and Gaussian calibration only (a smoke run
            of about a minute on Coat).
        seed: seed of the hold-out, negative sampling, MAR split and model training.
        yahoo_dir: folder of the Yahoo!R3 Webscope files.
        holdout: ``"per_user_last"`` (the authors' validation rule) or ``"random"``.
        absolute: protocol c's propensities, ``"default"`` or ``"naive_bayes"`` (see
            :func:`load_study`).
        figures: write the PNG figures (needs matplotlib).
        quiet: no progress lines.

    Returns:
        The ``summary.json`` content (metrics per protocol / model / method / loss).

    Raises:
        ValueError: unknown dataset or protocol, missing Yahoo!R3 path.
    """
    jax.config.update("jax_enable_x64", True)  # exact float64 calibration fits
    bad = [p for p in protocols if p not in PROTOCOLS]
    if bad or not protocols:
        raise ValueError(f"protocols must be among {PROTOCOLS}; got {protocols!r}.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    study = load_study(dataset, seed=seed, yahoo_dir=yahoo_dir, holdout=holdout, absolute=absolute)
    log(
        f"kweon2022: {dataset}: {int(study.train.sum())} training / {int(study.valid.sum())} "
        f"validation positives, {study.test_label.size} MAR test ratings",
        quiet=quiet,
    )
    scores = train_models(study, quick=quick, seed=seed, quiet=quiet)
    ranking = ranking_table(study, scores)
    calibrators, notes = _calibrators(dataset, quick=quick)
    for n in notes:
        log(f"kweon2022: {n}", quiet=quiet)
    results = _run_protocols(study, protocols, scores, calibrators, seed=seed, quiet=quiet)
    ratios = (N_NEGATIVES_AUTHORS,) if quick else (1, 2, 4, 8, 16, N_NEGATIVES_AUTHORS)
    sweep = ratio_sweep(study, scores, calibrators, ratios, seed=seed, quiet=quiet)
    info = {
        "test_base_rate": float(study.test_label[study.eval_mask].mean()),
        "dataset": dataset,
        "quick": quick,
        "seed": seed,
        "n_eval": int(study.eval_mask.sum()),
        "n_mar": int(study.mar.sum()),
        "absolute_propensities": study.absolute_source,
        "holdout": holdout,
        "skipped": notes,
    }
    _save_arrays(out, study, scores, results)
    write_tables(out, dataset, results, ranking, info, sweep)
    if figures:
        write_figures(out, study, scores, results, figure_model="LightGCN")
    summary = {
        **info,
        "ranking": ranking,
        "negative_ratio": sweep,
        "protocols": {p: {"info": r[3], "metrics": r[0]} for p, r in results.items()},
        "seconds": time.perf_counter() - t0,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    log(f"kweon2022: wrote {out} [{summary['seconds']:.1f}s]", quiet=quiet)
    return summary
