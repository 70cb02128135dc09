"""Streamed EM (chunks, files, callables, spill folders, processes) equals in-memory EM."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal.cli import main
from jaxcal.clicks import MODELS, RunOptions, Sessions, example_params, read_tiangong, simulate
from jaxcal.clicks.sources import chunk_source, log_format
from tests._multiprocess import run_processes

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _log(name="DBN", n=1500, seed=0) -> Sessions:
    params = example_params(name, n_queries=40, n_docs=8, n_results=6, key=jax.random.key(seed))
    return simulate(name, params, n, key=jax.random.key(seed + 1))


def _write_parquet(log: Sessions, path) -> None:
    m = np.asarray(log.mask)
    lengths = m.sum(1)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    doc = pa.ListArray.from_arrays(offsets, np.asarray(log.doc)[m].astype(np.int64))
    clicks = pa.ListArray.from_arrays(offsets, np.asarray(log.clicks)[m].astype(np.int8))
    table = pa.table({"query": np.asarray(log.query), "doc": doc, "clicks": clicks})
    pq.write_table(table, path)


def _assert_same_fit(got, ref, rtol=1e-10):
    np.testing.assert_array_equal(got.pair_query, ref.pair_query)
    np.testing.assert_array_equal(got.pair_doc, ref.pair_doc)
    assert int(got.n_iter) == int(ref.n_iter)
    assert got.n_results == ref.n_results
    for k in ref.params:
        np.testing.assert_allclose(got.params[k], ref.params[k], rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(got.history, ref.history, rtol=rtol, equal_nan=True)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_streamed_in_chunks_equals_in_memory(name):
    log = _log(name)
    model = MODELS[name]()
    ref = model.fit(log, max_iter=15)
    # 4 chunks, the last one short: padding rows must add nothing
    _assert_same_fit(model.fit(log, max_iter=15, run=RunOptions(chunk_sessions=450)), ref)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """One log written as two Parquet shards, an npz file and a TianGong-style text file."""
    root = tmp_path_factory.mktemp("shards")
    log = _log("DBN", n=2500, seed=3)
    _write_parquet(log[:1200], root / "a.parquet")
    _write_parquet(log[1200:], root / "b.parquet")
    log.to_npz(root / "c.npz")
    with open(root / "d.txt", "w") as fh:
        for s in range(log.n_sessions):
            m = np.asarray(log.mask[s])
            docs = np.asarray(log.doc[s])[m].tolist()
            clicks = np.asarray(log.clicks[s])[m].tolist()
            fh.write(f"{s}\t{int(log.query[s])}\t{docs}\t{[0] * len(docs)}\t{clicks}\n")
    return root, log


def test_file_and_callable_sources_equal_in_memory(shards, tmp_path):
    root, log = shards
    ref = MODELS["DBN"]().fit(log, max_iter=20)
    sources = [
        ([root / "a.parquet", str(root / "b.parquet")], {"chunk_sessions": 500}),
        (root / "c.npz", {"chunk_sessions": 999}),
        (root / "d.txt", {"chunk_sessions": 700}),
        (lambda: iter([log[:100], log[100:1700], log[1700:]]), {"chunk_sessions": 800}),
        ([root / "a.parquet", root / "b.parquet"], {"spill": True}),
        (root / "c.npz", {"spill": tmp_path / "spill", "chunk_sessions": 600}),
    ]
    for source, options in sources:
        _assert_same_fit(MODELS["DBN"]().fit(source, max_iter=20, run=RunOptions(**options)), ref)
    assert sorted(p.name for p in (tmp_path / "spill").iterdir())[:2] == [
        "0000000_clicks.npy",
        "0000000_inv.npy",
    ]  # a user's spill folder is kept; a temporary one is removed


def test_a_real_log_streamed_from_its_text_file(data_dir):
    path = data_dir / "tiangong-st-demo" / "train_per_query_quid.txt"
    assert log_format(path) == "tiangong"
    ref = MODELS["UBM"]().fit(read_tiangong(path), max_iter=10)
    _assert_same_fit(
        MODELS["UBM"]().fit(path, max_iter=10, run=RunOptions(chunk_sessions=400)), ref
    )


def test_yandex_text_is_recognised(tmp_path):
    path = tmp_path / "log.tsv"
    path.write_text("7\t0\tQ\t3\t0\t11\t12\t13\n7\t5\tC\t12\n8\t0\tQ\t3\t0\t12\t11\n")
    assert log_format(path) == "yandex"
    fit = MODELS["PBM"]().fit(path, max_iter=3)
    assert fit.n_results == 3 and len(fit.pair_query) == 3


def test_one_chunk_program_for_every_chunk(compiles):
    log = _log("PBM", n=2000, seed=5)
    model = MODELS["PBM"]()
    run = RunOptions(chunk_sessions=300)
    model.fit(log, max_iter=3, run=run)  # compiles its programs
    with compiles() as c:
        model.fit(log[:1900], max_iter=3, run=run)  # same chunk size: no compile
    assert c.count == 0


def test_bad_sources_are_named(tmp_path):
    model = MODELS["PBM"]()
    with pytest.raises(ValueError, match="no such file"):
        model.fit(tmp_path / "missing.parquet")
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="unknown log suffix"):
        model.fit(tmp_path / "x.csv")
    (tmp_path / "x.txt").write_text("a\tb\tc\n")
    with pytest.raises(ValueError, match="neither a TianGong-ST"):
        model.fit(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="empty"):
        model.fit([])
    with pytest.raises(ValueError, match="chunk 1 of the source"):
        model.fit(lambda: iter([_log("PBM", n=10), np.zeros(3)]))
    with pytest.raises(ValueError, match="iterator of Sessions"):
        model.fit(lambda: 5)
    with pytest.raises(ValueError, match="zero-argument callable"):
        model.fit(np.zeros((3, 3)))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        model.fit(_log("PBM", n=10), run=RunOptions(spill=tmp_path / "full"))


def test_a_source_that_changes_between_passes_is_refused():
    logs = iter([_log("PBM", n=50, seed=1), _log("PBM", n=50, seed=9)])
    with pytest.raises(ValueError, match="same log on every call"):
        MODELS["PBM"]().fit(lambda: iter([next(logs)]), max_iter=3)


def test_chunks_cover_the_log_once():
    log = _log("PBM", n=1001)
    parts = list(chunk_source(log, chunk_sessions=250)())
    assert [p.n_sessions for p in parts] == [250, 250, 250, 250, 1]
    np.testing.assert_array_equal(Sessions.concatenate(parts).doc, log.doc)


_PROCESS_FIT = """
import json
import numpy as np
import jax
from jaxcal.clicks import MODELS, RunOptions
paths = {paths!r}
mine = paths[PID::N] or (lambda: iter([]))  # with 4 processes, the last one has no shard
run = RunOptions(chunk_sessions=300)
fit = MODELS["{model}"]().fit(mine, max_iter=12, prior={prior!r}, run=run)
print(json.dumps({{k: np.asarray(v).tolist() for k, v in fit.params.items()}}
                 | {{"n_iter": int(fit.n_iter), "pairs": len(fit.pair_query)}}
                 | {{"learned_" + k: np.asarray(v).tolist()
                    for k, v in fit.learned_prior.items()}}))
"""


@pytest.mark.parametrize(
    ("model", "n", "prior"), [("DBN", 2, (1, 2)), ("UBM", 4, (1, 2)), ("DBN", 2, "empirical")]
)
def test_processes_with_their_own_shards_equal_one_process(tmp_path, model, n, prior):
    """Every process holds the same model, equal to the one-process fit (with
    ``prior="empirical"``: the learned priors too, from evidence summed across processes)."""
    log = _log(model, n=2400, seed=7)
    paths = []
    for k in range(3):  # shard k holds different queries' sessions (different pair sets)
        part = log[np.asarray(log.query) % 3 == k]
        paths.append(str(tmp_path / f"shard{k}.parquet"))
        _write_parquet(part, paths[-1])
    ref = MODELS[model]().fit(log, max_iter=12, prior=prior)
    code = _PROCESS_FIT.format(paths=paths, model=model, prior=prior)
    outs = [json.loads(o) for o in run_processes(code, n)]
    for out in outs:
        assert out == outs[0]  # every process holds the same model, bit for bit
    assert outs[0]["n_iter"] == int(ref.n_iter)
    assert outs[0]["pairs"] == len(ref.pair_query)
    for k in ref.params:
        np.testing.assert_allclose(outs[0][k], ref.params[k], rtol=1e-10, atol=1e-12)
    assert {k for k in outs[0] if k.startswith("learned_")} == {
        "learned_" + k for k in ref.learned_prior
    }
    for k, v in ref.learned_prior.items():
        # the prior fit's Newton stops at 1e-9 in log pseudo-counts
        np.testing.assert_allclose(outs[0]["learned_" + k], v, rtol=1e-7)


def test_command_line_fits_shards_on_two_processes(shards, tmp_path, capsys):
    root, log = shards
    files = [str(root / "a.parquet"), str(root / "b.parquet")]
    ref = MODELS["DBN"]().fit(log, max_iter=8)
    for extra in ([], ["--processes", "2"], ["--no-spill"]):
        out = tmp_path / f"dbn{len(extra)}.npz"
        code = main(
            ["clicks", "fit", "dbn", "--log", *files, "--out", str(out), "--float64",
             "--max-iter", "8", "--chunk-sessions", "500", *extra]
        )  # fmt: skip
        assert code == 0
        _assert_same_fit(jaxcal.load(out), ref)
    err = capsys.readouterr().err
    assert "DBN iteration 8: log-likelihood" in err and "sessions/s" in err


def test_command_line_rejects_bad_arguments(tmp_path, capsys):
    base = ["clicks", "fit", "pbm", "--out", str(tmp_path / "m.npz")]
    assert main([*base, "--log", str(tmp_path / "none.parquet")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main([*base, "--log", "a.parquet", "--processes", "2"]) == 2
    assert "at least 2 log files" in capsys.readouterr().err
    assert main([*base, "--log", "a.parquet", "--coordinator", "localhost:1"]) == 2
    assert "go together" in capsys.readouterr().err


def test_command_line_stops_the_other_processes_when_one_fails(capsys):
    from jaxcal.cli.clicks import _supervise

    def start(code):
        return subprocess.Popen([sys.executable, "-c", code])

    waiting = start("import time; time.sleep(600)")  # a worker blocked in a collective
    start_time = time.perf_counter()
    assert _supervise([waiting, start("import sys; sys.exit(3)")]) == 3
    assert time.perf_counter() - start_time < 60
    assert waiting.poll() is not None  # killed, not left behind
    assert "process 1 failed (exit status 3)" in capsys.readouterr().err
    assert _supervise([start("pass"), start("pass")]) == 0
