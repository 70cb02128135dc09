"""Eager checks of click logs and of ``[S, n]`` click predictions, shared by the estimators,
the fitted models, the metrics and the per-rank calibration."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxcal.clicks.sessions import Sessions

__all__ = ["check_click_arrays", "check_sessions"]


def check_sessions(sessions: Any, *, name: str = "sessions") -> Sessions:
    """Reject anything but a non-empty :class:`Sessions` with positive total weight."""
    if not isinstance(sessions, Sessions):
        raise ValueError(
            f"{name} must be a jaxcal.clicks.Sessions (use Sessions.from_arrays or a reader); "
            f"got {type(sessions).__name__}."
        )
    if sessions.n_sessions == 0:
        raise ValueError(f"{name} is empty; need at least one session.")
    if not np.sum(np.asarray(sessions.weight)) > 0:
        raise ValueError(f"{name} has zero total weight.")
    return sessions


def check_click_arrays(
    probs: Any, clicks: Any, mask: Any = None, sample_weight: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``[S, n]`` predicted click probabilities and observed clicks eagerly (the
    click metrics and the per-rank calibration); masked entries may hold anything.

    Args:
        probs: ``[S, n]`` predicted click probabilities.
        clicks: ``[S, n]`` observed clicks.
        mask: ``[S, n]`` real results (default all).
        sample_weight: ``[S]`` session multiplicities (default 1).

    Returns:
        ``(probs, clicks, mask, weight)``: float64 ``[S, n]`` probabilities and clicks, the
        boolean ``[S, n]`` mask and float64 ``[S]`` weights.

    Raises:
        ValueError: on shape mismatches, an empty mask, probabilities outside [0, 1], clicks
            not 0/1, or weights that are negative, not finite or give the unmasked results
            zero total weight.
    """
    p = np.asarray(probs, np.float64)
    if p.ndim != 2 or p.size == 0:
        raise ValueError(f"probs must be a non-empty [S, n] array; got shape {p.shape}.")
    c = np.asarray(clicks)
    if c.shape != p.shape:
        raise ValueError(f"shape mismatch: probs {p.shape} but clicks {c.shape}.")
    m = np.ones(p.shape, bool) if mask is None else np.asarray(mask).astype(bool)
    if m.shape != p.shape:
        raise ValueError(f"shape mismatch: probs {p.shape} but mask {m.shape}.")
    if not m.any():
        raise ValueError("mask selects no results.")
    pm = p[m]
    if not np.isfinite(pm).all() or (pm < 0).any() or (pm > 1).any():
        raise ValueError("probs must be finite probabilities in [0, 1] on unmasked entries.")
    if not np.isin(c[m], (0, 1)).all():
        raise ValueError(f"clicks must be 0/1; got values {np.unique(c[m])[:5].tolist()}.")
    w = np.ones(p.shape[0]) if sample_weight is None else np.asarray(sample_weight, np.float64)
    if w.shape != (p.shape[0],) or not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"sample_weight must be [{p.shape[0]}] finite and non-negative.")
    if not (w[:, None] * m).sum() > 0:
        raise ValueError("sample_weight gives the unmasked results zero total weight.")
    return p, c.astype(np.float64), m, w
