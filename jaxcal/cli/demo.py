r"""``jaxcal demo``: calibrate a simulated recommender's scores, naively and with IPS.

The demo runs the whole story of the library on data whose truth is known
(:func:`jaxcal.data.simulate_preferences`, see its module docstring for the model):

1. simulate ``n_users x n_items`` user-item pairs with true preference probabilities
   :math:`r_{ui}`, popularity-driven (missing-not-at-random) exposure :math:`\omega_{ui}`,
   clicks :math:`Y = O R` and noisy, distorted ranking scores :math:`s_{ui}`;
2. split the pairs at random into a validation part (used with its clicks, as a real
   system would) and a test part (used with its relevance :math:`R \sim
   \mathrm{Bernoulli}(r)`, the ideal missing-at-random labels);
3. fit every calibrator on the validation clicks twice: with the naive log-loss, which
   learns :math:`P(Y = 1 \mid s) = E[\omega r \mid s]` and so under-estimates preference,
   and with the unbiased IPS loss :math:`\mathrm{softplus}(z) - (Y/\omega) z` (Schnabel et
   al. 2016; Saito et al. 2020; Kweon, Kang and Yu, AAAI 2022);
4. print ECE, MCE, NLL and AUC on the test pairs against their true preferences, and the
   root-mean-square distance to the true probabilities :math:`r` (only a simulator can
   report it); write the table as CSV and, with matplotlib, reliability diagrams, fitted
   maps and score histograms as PNGs.

The same run is available from Python as :func:`run_demo`.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

import jaxcal.calibrators
from jaxcal._progress import log
from jaxcal.data import simulate_preferences
from jaxcal.debias import popularity_propensity
from jaxcal.metrics import auc, ece, mce, nll
from jaxcal.plot import calibration_map, reliability_diagram, score_histograms

__all__ = ["CALIBRATORS", "DemoResult", "DemoRow", "add_parser", "run", "run_demo"]

#: Every calibrator the demo tries, in table order; missing ones are skipped with a note.
CALIBRATORS = (
    "PlattScaling",
    "TemperatureScaling",
    "BetaCalibration",
    "GaussianCalibration",
    "GammaCalibration",
    "ExponentialCalibration",
    "HistogramBinning",
    "IsotonicCalibration",
    "BBQ",
)
PROPENSITIES = ("true", "popularity")
LOSSES = ("naive", "ips")
BASELINE = "sigmoid(score)"
ORACLE = "true probability r"
COLUMNS = ("calibrator", "loss", "ece", "mce", "nll", "auc", "rmse_true")
MCE_MIN_FRACTION = 1e-4  # MCE ignores bins under 0.01% of the pairs (Kweon et al.'s code)


@dataclass(frozen=True)
class DemoRow:
    """One line of the demo table (metrics on the test pairs)."""

    calibrator: str
    loss: str  #: "naive", "ips", or "-" for the reference rows
    ece: float  #: ECE against the relevance labels R (``n_bins`` equal-width bins)
    mce: float  #: MCE against R (bins with >= 0.01% of the pairs)
    nll: float  #: mean log-loss against R
    auc: float  #: ROC AUC against R
    rmse_true: float  #: sqrt(mean((p - r)^2)), distance to the true probabilities


@dataclass(frozen=True)
class DemoResult:
    """Everything :func:`run_demo` computed (the CLI prints and plots it)."""

    rows: list[DemoRow]
    data: Any  #: the :class:`jaxcal.data.SyntheticData`
    validation: np.ndarray  #: indices of the validation pairs
    test: np.ndarray  #: indices of the test pairs
    propensity: np.ndarray  #: propensities used by the IPS fits (validation pairs)
    fitted: dict[tuple[str, str], Any] = field(default_factory=dict)  #: (name, loss) -> fit
    probs: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  #: test probs
    skipped: dict[str, str] = field(default_factory=dict)  #: name -> reason


@dataclass(frozen=True)
class _Problem:
    """The arrays the calibrators are fitted on (validation pairs) and scored on (test
    pairs), and the number of ECE / MCE bins."""

    s_val: np.ndarray  #: validation scores
    y_val: np.ndarray  #: validation clicks
    omega: np.ndarray  #: propensities of the validation pairs (IPS loss)
    s_test: np.ndarray  #: test scores
    r_test: np.ndarray  #: test relevance labels R ~ Bernoulli(r)
    t_test: np.ndarray  #: test true probabilities r
    n_bins: int


#: what fitting one (calibrator, loss) gives: (fitted, test probabilities, row) or None,
#: and the reason it was skipped or None
_FitOutcome = tuple[tuple[Any, np.ndarray, DemoRow] | None, str | None]


def _progress(quiet: bool) -> Callable[[str], None]:
    """A progress printer: stderr lines prefixed with the seconds since this call."""
    start = time.perf_counter()

    def say(message: str) -> None:
        log(f"[{time.perf_counter() - start:5.1f}s] {message}", quiet=quiet)

    return say


def _calibrator_class(name: str) -> Any:
    """The calibrator class ``jaxcal.calibrators.<name>``, or ``None`` if it is not there."""
    try:
        return getattr(jaxcal.calibrators, name)
    except (ImportError, AttributeError):
        return None


def _metrics_row(name: str, loss: str, p, problem: _Problem) -> DemoRow:
    """The table row of test probabilities ``p``: metrics against the relevance labels and
    the distance to the true probabilities."""
    relevance, n_bins = problem.r_test, problem.n_bins
    return DemoRow(
        calibrator=name,
        loss=loss,
        ece=float(ece(p, relevance, n_bins=n_bins)),
        mce=float(mce(p, relevance, n_bins=n_bins, min_fraction=MCE_MIN_FRACTION)),
        nll=float(nll(p, relevance)),
        auc=float(auc(p, relevance)),
        rmse_true=float(np.sqrt(np.mean((np.asarray(p) - problem.t_test) ** 2))),
    )


def _check_choices(calibrators: Sequence[str], propensity: str) -> None:
    """``ValueError`` for unknown (or no) calibrator names or an unknown propensity."""
    unknown = [c for c in calibrators if c not in CALIBRATORS]
    if unknown or not calibrators:
        raise ValueError(f"unknown calibrator(s) {unknown}; choose from {', '.join(CALIBRATORS)}.")
    if propensity not in PROPENSITIES:
        raise ValueError(f"propensity must be one of {PROPENSITIES}; got {propensity!r}.")


def _ips_propensity(data: Any, val: np.ndarray, propensity: str) -> np.ndarray:
    """Propensities of the validation pairs: the simulator's exposure probabilities
    (``"true"``), or the popularity estimate from the items' validation clicks."""
    if propensity == "true":
        return np.asarray(data.propensity)[val]
    items, clicks = np.asarray(data.items), np.asarray(data.clicks)
    counts = np.bincount(items[val], weights=clicks[val], minlength=data.n_items)
    return popularity_propensity(counts)[items[val]]


def _problem(data: Any, val: np.ndarray, test: np.ndarray, omega, n_bins: int) -> _Problem:
    """The validation and test arrays of the split."""
    scores, clicks = np.asarray(data.scores), np.asarray(data.clicks)
    relevance, true_prob = np.asarray(data.relevance), np.asarray(data.true_prob)
    return _Problem(
        s_val=scores[val], y_val=clicks[val], omega=omega, s_test=scores[test],
        r_test=relevance[test], t_test=true_prob[test], n_bins=n_bins,
    )  # fmt: skip


def _available(calibrators: Sequence[str], skipped: dict[str, str], say) -> list[str]:
    """The calibrators of this installation; the others are noted in ``skipped``."""
    available = []
    for name in calibrators:
        if _calibrator_class(name) is None:
            skipped[name] = "not available in this installation"
            say(f"{name}: skipped (not available in this installation)")
        else:
            available.append(name)
    return available


def _fit_one(name: str, loss: str, problem: _Problem, say) -> _FitOutcome:
    """Fit, predict and score one (calibrator, loss); runs in a worker thread."""
    kw = {} if loss == "naive" else {"propensity": problem.omega}
    try:
        fitted = _calibrator_class(name)().fit(problem.s_val, problem.y_val, loss=loss, **kw)
    except ValueError as exc:  # e.g. a calibrator that does not take IPS targets
        say(f"{name} ({loss}): skipped ({exc})")
        return None, str(exc)
    p = np.asarray(fitted.predict(problem.s_test))
    row = _metrics_row(name, loss, p, problem)
    say(f"fitted {name} ({loss})")
    return (fitted, p, row), None


def _fit_all(
    names: Sequence[str], problem: _Problem, jobs: int, say
) -> dict[tuple[str, str], _FitOutcome]:
    """Every (calibrator, loss) fit, keyed in table order (``names``, then :data:`LOSSES`)."""
    # Compiling each calibrator's solver dominates the run time; XLA compiles outside the
    # GIL, so calibrators compile side by side. Naive and IPS fits of one calibrator share
    # a compiled solver, so they run one after the other in the same task.
    workers = max(1, min(int(jobs), len(names) or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            n: pool.submit(lambda n=n: [_fit_one(n, lss, problem, say) for lss in LOSSES])
            for n in names
        }
        return {
            (n, lss): out
            for n in names
            for lss, out in zip(LOSSES, futures[n].result(), strict=True)
        }


def _collect(result: DemoResult, outcomes: dict[tuple[str, str], _FitOutcome]) -> None:
    """Add the fits, test probabilities and rows to ``result`` (in the order of
    ``outcomes``, whatever the completion order), and the failures to ``skipped``."""
    for key, (out, error) in outcomes.items():
        if out is None:
            result.skipped[f"{key[0]} ({key[1]})"] = error
            continue
        result.fitted[key], result.probs[key], row = out
        result.rows.append(row)


def run_demo(
    *,
    seed: int = 0,
    n_users: int = 300,
    n_items: int = 400,
    validation_fraction: float = 0.5,
    n_bins: int = 15,
    propensity: str = "true",
    calibrators: Sequence[str] = CALIBRATORS,
    jobs: int | None = None,
    quiet: bool = False,
) -> DemoResult:
    r"""Simulate, fit every calibrator naively and with IPS, and score them against the truth.

    Runs in float64 (it enables ``jax_enable_x64``, as the exact solvers are meant to).

    Args:
        seed: the run's integer seed; ``jax.random.key(seed)`` is split in two, one key for
            the simulator (``simulate_preferences(key=...)``) and one for the split
            (``data.split(key=...)``).
        n_users: number of simulated users.
        n_items: number of simulated items.
        validation_fraction: share of the pairs used for fitting (the rest is the test set).
        n_bins: equal-width bins of ECE / MCE.
        propensity: ``"true"`` uses the simulator's exposure probabilities
            :math:`\omega_{ui}` in the IPS loss; ``"popularity"`` estimates them as
            ``jaxcal.debias.popularity_propensity`` of the items' validation clicks
            (relative propensities, as in Kweon et al. 2022: right shape, wrong level).
        calibrators: names in ``jaxcal.calibrators`` (default: all of :data:`CALIBRATORS`;
            those not available in this installation are skipped and listed in
            ``skipped``).
        jobs: calibrators fitted side by side in threads (default: the number of CPUs, at
            most 4); results do not depend on it.
        quiet: no progress lines on stderr.

    Returns:
        A :class:`DemoResult`: one :class:`DemoRow` per (calibrator, loss), after the
        reference row ``sigmoid(score)`` (the raw scores read as logits), and before the
        row of the true probabilities (the floor set by label noise).

    Raises:
        ValueError: an unknown calibrator name or propensity, or simulator parameters out of
            range.
    """
    jax.config.update("jax_enable_x64", True)
    _check_choices(calibrators, propensity)
    if jobs is None:
        jobs = min(4, os.cpu_count() or 1)
    say = _progress(quiet)
    say(f"simulating {n_users} users x {n_items} items (seed {seed})")
    k_data, k_split = jax.random.split(jax.random.key(seed))
    data = simulate_preferences(n_users=n_users, n_items=n_items, key=k_data)
    val, test = data.split(validation_fraction=validation_fraction, key=k_split)
    omega = _ips_propensity(data, val, propensity)
    problem = _problem(data, val, test, omega, n_bins)
    result = DemoResult([], data, val, test, omega)
    raw = 1.0 / (1.0 + np.exp(-problem.s_test))
    result.rows.append(_metrics_row(BASELINE, "-", raw, problem))
    names = _available(calibrators, result.skipped, say)
    _collect(result, _fit_all(names, problem, jobs, say))
    result.rows.append(_metrics_row(ORACLE, "-", problem.t_test, problem))
    return result


# ----------------------------------------------------------------------------- output


def format_table(rows: Sequence[DemoRow]) -> str:
    """The rows as an aligned plain-text table (4 decimals)."""
    header = ("calibrator", "loss", "ECE", "MCE", "NLL", "AUC", "RMSE(r)")
    cells = [header] + [
        (r.calibrator, r.loss, *(f"{v:.4f}" for v in (r.ece, r.mce, r.nll, r.auc, r.rmse_true)))
        for r in rows
    ]
    widths = [max(len(row[j]) for row in cells) for j in range(len(header))]

    def line(row):
        left = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        return "  ".join(left + [c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True)])

    rule = "-" * len(line(cells[0]))
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def write_csv(rows: Sequence[DemoRow], path: Path) -> Path:
    """Write the table with full precision (``repr`` of the floats)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(COLUMNS)
        for r in rows:
            writer.writerow([getattr(r, c) if isinstance(getattr(r, c), str)
                             else repr(float(getattr(r, c))) for c in COLUMNS])  # fmt: skip
    return path


def write_plots(result: DemoResult, out: Path, *, n_bins: int, say) -> list[Path]:
    """Reliability diagrams, fitted maps and score histograms (needs matplotlib)."""
    data, val, test = result.data, result.validation, result.test
    scores = np.asarray(data.scores)
    relevance, true_prob = np.asarray(data.relevance)[test], np.asarray(data.true_prob)[test]
    lo, hi = np.quantile(scores[val], [0.001, 0.999])
    paths = []
    for loss, what in (("naive", "naive log-loss"), ("ips", "IPS loss")):
        probs = {n: p for (n, lss), p in result.probs.items() if lss == loss}
        if not probs:
            continue
        paths.append(reliability_diagram(
            probs, relevance, out / f"reliability_{loss}.png", ece_bins=n_bins,
            title=f"Fitted on validation clicks with the {what}; test pairs vs true preference",
        ))  # fmt: skip
        say(f"wrote {paths[-1]}")
        fitted = {n: f for (n, lss), f in result.fitted.items() if lss == loss}
        paths.append(calibration_map(
            fitted, (lo, hi), out / f"maps_{loss}.png",
            scores=scores[test], labels=relevance,
            reference=(scores[test], true_prob), reference_label="E[r | s] (truth, binned)",
            title=f"Calibration maps fitted with the {what}",
        ))  # fmt: skip
        say(f"wrote {paths[-1]}")
    paths.append(score_histograms(
        scores[val], np.asarray(data.clicks)[val], out / "score_histograms.png",
        log=True, title="Validation scores by click (MNAR labels)",
    ))  # fmt: skip
    say(f"wrote {paths[-1]}")
    return paths


# -------------------------------------------------------------------------------- CLI


def _checked(convert: Callable, accept: Callable, expected: str) -> Callable:
    """An argparse ``type``: ``convert(text)``, rejected unless ``accept(value)``."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}; got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}; got {value}")
        return value

    return parse


_positive_int = _checked(int, lambda v: v >= 1, "a positive integer")
_fraction = _checked(float, lambda v: 0.0 < v < 1.0, "a number in (0, 1)")


def _names(text: str) -> list[str]:
    if text.strip() == "all":
        return list(CALIBRATORS)
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in CALIBRATORS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown calibrator(s) {unknown or text!r}; choose from {', '.join(CALIBRATORS)}"
        )
    return names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``jaxcal demo``."""
    parser = subparsers.add_parser(
        "demo",
        help="calibrate a simulated recommender, naively and with IPS (no data needed)",
        description=(
            "Simulate user-item preferences with known truth, popularity-driven "
            "(missing-not-at-random) exposure and noisy ranking scores; fit every calibrator "
            "on validation clicks with the naive and the unbiased IPS loss; print ECE / MCE / "
            "NLL / AUC on test pairs against their true preferences, and write results.csv "
            "and PNG plots (reliability diagrams, fitted maps, score histograms) to --out."
        ),
        epilog=(
            "Columns: ECE and MCE with N_BINS equal-width bins (MCE ignores bins with under "
            "0.01% of the pairs), NLL = mean log-loss, AUC = ROC AUC, all against the test "
            "pairs' relevance R ~ Bernoulli(r); RMSE(r) = distance to the true probabilities "
            "r. Plots need matplotlib (pip install 'jaxcal[plot]'). Runs in float64."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulator and split")
    parser.add_argument("--n-users", type=_positive_int, default=300, help="simulated users")
    parser.add_argument("--n-items", type=_positive_int, default=400, help="simulated items")
    parser.add_argument(
        "--validation-fraction", type=_fraction, default=0.5,
        help="share of the pairs used to fit the calibrators (the rest is the test set)",
    )  # fmt: skip
    parser.add_argument("--n-bins", type=_positive_int, default=15, help="bins of ECE / MCE")
    parser.add_argument(
        "--propensity", choices=PROPENSITIES, default="true",
        help="propensities of the IPS loss: the simulator's true exposure probabilities, or "
        "item-popularity estimates (jaxcal.debias.popularity_propensity)",
    )  # fmt: skip
    parser.add_argument(
        "--calibrators", type=_names, default="all", metavar="NAME[,NAME...]",
        help="'all', or a comma-separated subset of: " + ", ".join(CALIBRATORS),
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=Path("jaxcal-demo"),
        help="output folder for results.csv and the PNG plots",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=_positive_int, default=min(4, os.cpu_count() or 1),
        help="calibrators fitted side by side (threads); results do not depend on it",
    )  # fmt: skip
    parser.add_argument("--no-plots", action="store_true", help="do not draw PNG plots")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=run)


def _summary(result: DemoResult, args: argparse.Namespace) -> str:
    """The lines above the table: the simulated data, the split and the metrics."""
    data, val, test = result.data, result.validation, result.test
    settings = dict(data.settings)
    return (
        f"jaxcal demo: {data.n_pairs:,} user-item pairs ({data.n_users} users x "
        f"{data.n_items} items), seed {args.seed}.\n"
        f"  true preference rate {float(np.mean(data.true_prob)):.3f}; exposure rate "
        f"{settings['exposure_rate']:.3f}, missing-not-at-random (item popularity); click rate "
        f"{float(np.mean(np.asarray(data.clicks)[val])):.3f} on the validation pairs.\n"
        f"  Calibrators fitted on {val.size:,} validation pairs' clicks (IPS with "
        f"{args.propensity} propensities); metrics on {test.size:,} test pairs against their "
        f"true preferences\n  (relevance R ~ Bernoulli(r); ECE/MCE with {args.n_bins} "
        "equal-width bins; RMSE(r) = distance to the true probabilities r).\n"
    )


def _plots_wanted(args: argparse.Namespace) -> bool:
    return not args.no_plots and importlib.util.find_spec("matplotlib") is not None


def _preload_matplotlib() -> None:
    """Import matplotlib's figure and Agg canvas in a background thread: the import takes
    about a second, which then overlaps the fits instead of delaying the first plot (the
    plots import the same modules; Python's import lock makes them wait for this import if
    it is not done)."""

    def load() -> None:
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401

    threading.Thread(target=load, name="jaxcal-demo-matplotlib", daemon=True).start()


def _write_outputs(result: DemoResult, args: argparse.Namespace, say) -> list[Path]:
    """results.csv and, unless ``--no-plots`` or without matplotlib, the PNG plots."""
    out: Path = args.out
    written = [write_csv(result.rows, out / "results.csv")]
    if _plots_wanted(args):
        written += write_plots(result, out, n_bins=args.n_bins, say=say)
    elif not args.no_plots:
        print("  plots skipped: matplotlib is not installed (pip install 'jaxcal[plot]').")
    return written


def run(args: argparse.Namespace) -> int:
    """Run the demo for parsed arguments; print the table; write CSV and plots."""
    say = _progress(args.quiet)
    if _plots_wanted(args):
        _preload_matplotlib()
    result = run_demo(
        seed=args.seed,
        n_users=args.n_users,
        n_items=args.n_items,
        validation_fraction=args.validation_fraction,
        n_bins=args.n_bins,
        propensity=args.propensity,
        calibrators=args.calibrators,
        jobs=args.jobs,
        quiet=args.quiet,
    )
    print(_summary(result, args))
    print(format_table(result.rows))
    for name, reason in result.skipped.items():
        print(f"  skipped {name}: {reason}")
    written = _write_outputs(result, args, say)
    print(f"\nwrote {', '.join(str(p) for p in written)}")
    say("done")
    return 0
