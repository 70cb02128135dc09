"""``jaxcal clicks fit MODEL``: fit a click model to log files, streamed, on one or more processes.

Examples::

    jaxcal clicks fit dbn --log shards/*.parquet --out dbn.npz
    jaxcal clicks fit ubm --log shards/*.parquet --processes 4 --chunk-sessions 200000 --out ubm.npz

The log files (Parquet, npz, TianGong-ST or Yandex text; see ``jaxcal.clicks.sources``) are
read chunk by chunk, so the log never has to fit in memory. By default each process writes
its part of the log once, deduplicated and encoded, to a temporary folder (``--spill DIR``
chooses the folder, ``--no-spill`` re-reads the files on every iteration). One line per EM
iteration reports the log-likelihood and the sessions per second. The fitted model is
written to ``--out`` and read back with ``jaxcal.load``.

``--processes N`` starts N local processes, joined by ``jax.distributed``; process ``i``
reads the files ``i, i + N, i + 2N, ...`` of ``--log``, the sufficient statistics are summed
across processes after every E-step, and every process holds the same model. On several
hosts, start one process per host yourself, each with its own files and the same
coordinator (process 0's ``host:port``)::

    host0$ jaxcal clicks fit dbn --log part0/*.parquet --out dbn.npz \\
               --coordinator host0:8476 --n-processes 2 --process-id 0
    host1$ jaxcal clicks fit dbn --log part1/*.parquet --out dbn.npz \\
               --coordinator host0:8476 --n-processes 2 --process-id 1

Process 0 writes ``--out``.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import jax

from jaxcal import distributed
from jaxcal._progress import log
from jaxcal._serialization import save
from jaxcal.cli._parsers import documented_parser
from jaxcal.clicks import RunOptions, cascade, ccm, ctr, dbn, dcm, pbm, ubm

__all__ = ["add_parser", "run", "MODELS"]

#: command-line name -> estimator class
MODELS = {
    "gctr": ctr.GCTR,
    "rctr": ctr.RCTR,
    "dctr": ctr.DCTR,
    "pbm": pbm.PBM,
    "cm": cascade.CascadeModel,
    "dcm": dcm.DCM,
    "dbn": dbn.DBN,
    "sdbn": dbn.SDBN,
    "ccm": ccm.CCM,
    "ubm": ubm.UBM,
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``jaxcal clicks`` (its ``fit`` action) with the subcommands of a parser.

    Example:
        >>> import argparse
        >>> from jaxcal.cli.clicks import add_parser
        >>> parser = argparse.ArgumentParser(prog="jaxcal")
        >>> add_parser(parser.add_subparsers(dest="command"))
        >>> args = parser.parse_args(["clicks", "fit", "dbn", "--log", "a.pq", "--out", "m.npz"])
        >>> args.model, args.chunk_sessions, args.max_iter
        ('dbn', 100000, 50)
    """
    parser = subparsers.add_parser(
        "clicks",
        help="fit click models to logs larger than memory, on one or more processes",
        description="Click models on log files.",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    fit = documented_parser(sub, "fit", "fit a click model by streamed EM", __doc__)
    fit.add_argument("model", choices=sorted(MODELS), help="click model")
    fit.add_argument("--log", nargs="+", required=True, metavar="PATH", help="log files")
    fit.add_argument("--out", required=True, help="where to write the fitted model")
    fit.add_argument("--processes", type=int, default=1, help="local processes (default 1)")
    fit.add_argument(
        "--chunk-sessions", type=int, default=100_000, help="SERPs per chunk (default 100000)"
    )
    fit.add_argument("--max-iter", type=int, default=50, help="EM iterations at most")
    fit.add_argument("--tol", type=float, default=1e-6, help="stop below this change")
    fit.add_argument(
        "--prior",
        default="1,2",
        help="Beta pseudo-counts NUMERATOR,DENOMINATOR (default 1,2), or 'empirical' (learned)",
    )
    spill = fit.add_mutually_exclusive_group()
    spill.add_argument("--spill", metavar="DIR", help="folder for the encoded log")
    spill.add_argument(
        "--no-spill", action="store_true", help="re-read the files on every iteration"
    )
    fit.add_argument("--float64", action="store_true", help="compute in double precision")
    fit.add_argument("--quiet", action="store_true", help="no progress lines")
    multi = fit.add_argument_group("several hosts (one process each)")
    multi.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address")
    multi.add_argument("--n-processes", type=int, help="processes in the job")
    multi.add_argument("--process-id", type=int, help="this process's index")
    fit.set_defaults(func=run)


def _prior(text: str) -> tuple[float, float] | str:
    if text == "empirical":
        return text
    try:
        a, b = (float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(
            f"--prior must be NUMERATOR,DENOMINATOR or empirical; got {text!r}."
        ) from None
    return a, b


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def _launch(args: argparse.Namespace, argv: list[str]) -> int:
    """Start ``--processes`` local workers (this command with a coordinator, a process id
    and its share of the files) and wait for them."""
    n = args.processes
    if len(args.log) < n:
        raise ValueError(f"--processes {n} needs at least {n} log files; got {len(args.log)}.")
    coordinator = f"localhost:{_free_port()}"
    base = _without(argv, ("--log", "--processes"))
    workers = []
    for i in range(n):
        command = [
            *base,
            "--log",
            *args.log[i::n],
            "--coordinator",
            coordinator,
            "--n-processes",
            str(n),
            "--process-id",
            str(i),
        ]
        if i > 0:
            command.append("--quiet")
        code = "import sys; from jaxcal.cli import main; sys.exit(main(sys.argv[1:]))"
        workers.append(subprocess.Popen([sys.executable, "-c", code, *command]))
    return _supervise(workers)


def _supervise(workers: list[subprocess.Popen]) -> int:
    """Wait for the workers; when one fails, stop the others (they would wait forever in a
    collective for the one that is gone) and return its exit status."""
    try:
        while True:
            codes = [w.poll() for w in workers]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                i, c = bad[0]
                print(f"jaxcal clicks: process {i} failed (exit status {c}).", file=sys.stderr)
                return c if c > 0 else 1
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.2)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` without the given options and their values (``--log`` takes several)."""
    out, skip = [], False
    for token in argv:
        if token.startswith("-"):
            name = token.split("=", 1)[0]
            skip = name in options
            if skip:
                continue
        if not skip:
            out.append(token)
    return out


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcal clicks fit`` with parsed arguments.

    Example:
        >>> import jaxcal
        >>> from jaxcal.cli import main
        >>> from jaxcal.clicks import Sessions
        >>> Sessions.from_arrays([0, 0], [[1, 2], [2, 1]], [[1, 0], [0, 1]]).to_npz("log.npz")
        >>> main(["clicks", "fit", "dctr", "--log", "log.npz", "--out", "dctr.npz", "--quiet"])
        0
        >>> jaxcal.load("dctr.npz").params["alpha"].tolist()  # doc 1: 2 clicks of 2; doc 2: 0
        [0.75, 0.25, 0.5]
    """
    if args.processes < 1:
        raise ValueError(f"--processes must be a positive integer; got {args.processes}.")
    joined = (args.coordinator, args.n_processes, args.process_id)
    if any(v is not None for v in joined) and not all(v is not None for v in joined):
        raise ValueError("--coordinator, --n-processes and --process-id go together.")
    if args.processes > 1:
        if args.coordinator is not None:
            raise ValueError("--processes starts local processes; do not give --coordinator.")
        return _launch(args, args.argv)
    if args.float64:
        jax.config.update("jax_enable_x64", True)
    if args.coordinator is not None:
        distributed.initialize(args.coordinator, args.n_processes, args.process_id)
    prior = _prior(args.prior)
    spill = False if args.no_spill else (args.spill or True)
    model = MODELS[args.model]()
    run_options = RunOptions(
        chunk_sessions=args.chunk_sessions, spill=spill, progress=not args.quiet
    )
    log(f"jaxcal clicks fit {args.model}: {len(args.log)} log files", quiet=args.quiet)
    start = time.perf_counter()
    fitted = model.fit(args.log, prior=prior, max_iter=args.max_iter, tol=args.tol, run=run_options)
    if distributed.process_index() == 0:
        save(fitted, args.out)
        log(
            f"{int(fitted.n_iter)} iterations, {len(fitted.pair_query)} query-document pairs, "
            f"{time.perf_counter() - start:.1f}s; wrote {args.out}",
            quiet=args.quiet,
        )
    return 0
