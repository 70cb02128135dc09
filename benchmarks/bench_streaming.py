"""Streamed EM on a simulated log in Parquet shards: seconds per iteration, peak memory, and
1 / 2 / 4 local processes.

    python benchmarks/bench_streaming.py --sessions 100000000 --models dbn,ubm --processes 1
    python benchmarks/bench_streaming.py --sessions 10000000 --models dbn --processes 1,2,4

The log is drawn once from a DBN (``--queries`` queries x 15 documents, 10 results, uniform
query frequencies, a fresh random SERP per session, so deduplication finds little to merge)
and written as Parquet shards of ``--shard-sessions`` sessions into ``--dir`` (kept for the
next run). Each fit is what a user runs: ``jaxcal clicks fit MODEL --log SHARDS... --max-iter
K`` in a fresh process, with its default spill folder. The table reports the first pass
(read, deduplicate, encode and spill the log; the pair table), the mean time of iterations
2..K, the sessions per second of an iteration, and the peak resident memory of the largest
process (``/usr/bin/time``'s maximum resident set size).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from jaxcal.clicks import example_params, simulate

_ITER = re.compile(r"(\w+) iteration (\d+): .*, ([0-9.]+)s, ")
_READ = re.compile(r"query-document pairs, ([0-9.]+)s")
_SUM = re.compile(r"iteration \d+: .*, ([0-9.]+)s summing across processes")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_shards(folder: Path, sessions: int, shard: int, queries: int) -> list[Path]:
    """Write (or reuse) the Parquet shards of the simulated log."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    n_shards = -(-sessions // shard)
    paths = [folder / f"shard{k:05d}.parquet" for k in range(n_shards)]
    if all(p.exists() for p in paths):
        return paths
    key = jax.random.key(0)
    params = example_params("DBN", n_queries=queries, n_docs=15, n_results=10, key=key)
    start = time.perf_counter()
    for k, path in enumerate(paths):
        if path.exists():
            continue
        size = min(shard, sessions - k * shard)
        s = simulate("DBN", params, size, key=jax.random.key(k + 1))
        offsets = np.arange(0, 10 * size + 1, 10, dtype=np.int32)  # full SERPs of 10
        table = pa.table(
            {
                "query": np.asarray(s.query),
                "doc": pa.ListArray.from_arrays(offsets, np.asarray(s.doc).reshape(-1)),
                "clicks": pa.ListArray.from_arrays(offsets, np.asarray(s.clicks).reshape(-1)),
            }
        )
        pq.write_table(table, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        log(f"shard {k + 1}/{n_shards} written [{time.perf_counter() - start:.0f}s]")
    return paths


def fit(model: str, paths: list[Path], processes: int, args) -> dict:
    """One ``jaxcal clicks fit`` run; its timings and peak memory."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.npz"
        command = [
            "/usr/bin/time", "-f", "MAXRSS %M",
            sys.executable, "-c", "import sys; from jaxcal.cli import main; sys.exit(main())",
            "clicks", "fit", model, "--log", *map(str, paths), "--out", str(out),
            "--max-iter", str(args.iterations), "--tol", "0",
            "--chunk-sessions", str(args.chunk_sessions), "--processes", str(processes),
        ]  # fmt: skip
        env = {**os.environ, "TMPDIR": str(args.spill_root)}
        start = time.perf_counter()
        proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "iteration" in line or "pairs" in line:
                log(f"  {line.rstrip()}")
        code = proc.wait()
        wall = time.perf_counter() - start
    text = "".join(lines)
    if code != 0:
        raise SystemExit(f"jaxcal clicks fit failed:\n{text[-3000:]}")
    iters = [float(m.group(3)) for m in _ITER.finditer(text)]
    sums = [float(m.group(1)) for m in _SUM.finditer(text)]
    rss_kb = max(int(v) for v in re.findall(r"MAXRSS (\d+)", text))
    first = float(_READ.search(text).group(1))
    return {
        "iterations": iters, "sums": sums, "first_pass": first, "rss_gb": rss_kb / 2**20,
        "wall": wall,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=float, default=1e8)
    parser.add_argument("--shard-sessions", type=float, default=1e6)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "jaxcal-shards")
    parser.add_argument("--spill-root", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--models", default="dbn,ubm")
    parser.add_argument("--processes", default="1")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--chunk-sessions", type=int, default=500_000)
    args = parser.parse_args()
    sessions, shard = int(args.sessions), int(args.shard_sessions)
    paths = make_shards(args.dir / f"{sessions}", sessions, shard, args.queries)
    size_gb = sum(p.stat().st_size for p in paths) / 2**30
    rows = []
    for model in args.models.split(","):
        for processes in map(int, args.processes.split(",")):
            log(f"{model}, {processes} process(es), {sessions:.3g} sessions ({size_gb:.2f} GB)")
            r = fit(model, paths, processes, args)
            steady = r["iterations"][1:] or r["iterations"]
            per_iter = sum(steady) / len(steady)
            sums = r["sums"][1:] or r["sums"]
            summing = f"{sum(sums) / len(sums):.2f}" if sums else "-"
            cells = (
                model.upper(), processes, f"{sessions:.0e}", f"{r['first_pass']:.0f}",
                f"{per_iter:.1f}", f"{sessions / per_iter:.3g}", f"{r['rss_gb']:.2f}",
                f"{r['wall']:.0f}", summing,
            )  # fmt: skip
            rows.append("| " + " | ".join(map(str, cells)) + " |")
    print(
        f"\nlog: {sessions:.0e} sessions x 10 results, {len(paths)} Parquet shards, "
        f"{size_gb:.2f} GB; {args.iterations} iterations; chunks of {args.chunk_sessions}\n"
    )
    print(
        "| model | processes | sessions | first pass s | s / iteration | sessions / s | "
        "peak RSS GB (largest process) | wall s | s / iteration summing across processes |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
