"""How a click model's fit runs, apart from what it fits: :class:`RunOptions`.

``Model().fit(sessions, *, prior, max_iter, tol, run=RunOptions(...))``: the estimator and
``fit``'s own arguments say what is fitted (the model, the log, the prior, the EM stopping
rule); :class:`RunOptions` says how the work is done (merging identical sessions, streaming
in chunks, spilling the encoded log to disk, sharding over devices, progress lines). The
options never change the fitted numbers beyond float rounding (the sums over sessions are
taken in another order).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from jax.sharding import Mesh

from jaxcal._validation import check_int

__all__ = ["RunOptions"]

#: SERPs per chunk of a streamed log when :attr:`RunOptions.chunk_sessions` is ``None``
DEFAULT_CHUNK_SESSIONS = 100_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a click model's ``fit`` runs: deduplication, streaming, spilling, sharding,
    progress lines (checked when made).

    Args:
        dedup: merge identical sessions first (:meth:`Sessions.deduplicate`; the same fit,
            less work); a streamed log is deduplicated chunk by chunk.
        chunk_sessions: SERPs per chunk of a streamed log (``None``: 100,000). A log given
            as files or a callable of chunks is always streamed; given this, a
            :class:`Sessions` in memory is streamed too.
        spill: a streamed log is read from its source on every EM iteration (``False``), or
            written once, deduplicated and encoded, to a folder (a path, which must be empty
            or new; ``True``: a temporary folder, removed afterwards) and read from there
            (faster when the source is slow to parse). Given, a :class:`Sessions` in memory
            is streamed too.
        mesh: a 1-D ``jax.sharding.Mesh``: sessions are split across its devices and the
            sufficient statistics summed with ``psum`` (the same fit as on one device).
        progress: print one line per EM iteration of a streamed fit (log-likelihood,
            sessions per second) to stderr.

    Raises:
        ValueError: naming the option that is not of its documented type or range.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import PBM, RunOptions, example_params, simulate
        >>> log = simulate("PBM", example_params("PBM", n_queries=2, key=jax.random.key(0)),
        ...                200, key=jax.random.key(1))
        >>> run = RunOptions(chunk_sessions=50, dedup=False)  # stream in chunks of 50 SERPs
        >>> streamed = PBM().fit(log, max_iter=5, run=run)
        >>> in_memory = PBM().fit(log, max_iter=5)
        >>> bool(abs(streamed.params["gamma"] - in_memory.params["gamma"]).max() < 1e-5)
        True
        >>> RunOptions(chunk_sessions=0)
        Traceback (most recent call last):
        ...
        ValueError: chunk_sessions must be an integer >= 1; got 0.
    """

    dedup: bool = True
    chunk_sessions: int | None = None
    spill: bool | str | os.PathLike = False
    mesh: Mesh | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        for name in ("dedup", "progress"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be True or False; got {value!r}.")
        if self.chunk_sessions is not None:
            check_int(self.chunk_sessions, "chunk_sessions", minimum=1)
        if not isinstance(self.spill, bool | str | os.PathLike):
            raise ValueError(
                f"spill must be True, False or a folder path; got {type(self.spill).__name__}."
            )
        if not isinstance(self.spill, bool) and Path(self.spill).exists():
            if not Path(self.spill).is_dir():
                raise ValueError(f"spill must be a folder; {self.spill} is a file.")
        if self.mesh is not None and not isinstance(self.mesh, Mesh):
            raise ValueError(
                f"mesh must be a jax.sharding.Mesh or None; got {type(self.mesh).__name__}."
            )

    @property
    def streams(self) -> bool:
        """Whether a :class:`Sessions` in memory is streamed in chunks (``chunk_sessions``
        or ``spill`` given).

        Example:
            >>> from jaxcal.clicks import RunOptions
            >>> RunOptions().streams, RunOptions(spill=True).streams
            (False, True)
        """
        return self.chunk_sessions is not None or self.spill is not False

    @property
    def chunk_size(self) -> int:
        """SERPs per chunk of a streamed log (``chunk_sessions``, default 100,000).

        Example:
            >>> from jaxcal.clicks import RunOptions
            >>> RunOptions().chunk_size, RunOptions(chunk_sessions=500).chunk_size
            (100000, 500)
        """
        return DEFAULT_CHUNK_SESSIONS if self.chunk_sessions is None else self.chunk_sessions
