"""The inference methods of :mod:`jaxcal.bayes`: option objects passed as ``method=``.

``method=NUTS(...)`` samples the posterior with the No-U-Turn sampler (Hoffman and Gelman
2014; NumPyro's implementation with windowed step-size and mass-matrix adaptation);
``method=SVI(...)`` fits a Gaussian approximation by stochastic variational inference
(maximising the ELBO with Adam) and draws from it. Both are frozen dataclasses: hashable,
comparable, and checked when they are made (a ``ValueError`` naming the bad field), so a
bad setting fails before anything is compiled.

Example:
    >>> from jaxcal.bayes import NUTS, SVI
    >>> nuts = NUTS(n_samples=200, n_chains=2)
    >>> nuts.n_warmup, nuts.target_accept_prob  # the other fields keep their defaults
    (500, 0.8)
    >>> nuts == NUTS(n_chains=2, n_samples=200)
    True
    >>> SVI(n_steps=500).guide
    'mvn'
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxcal._validation import check_int, check_real

__all__ = ["NUTS", "SVI"]

GUIDES = ("mvn", "normal")


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # normalise a field of a frozen dataclass


@dataclasses.dataclass(frozen=True)
class NUTS:
    """Settings of the No-U-Turn sampler (``method=NUTS(...)``).

    Args:
        n_samples: draws kept per chain.
        n_warmup: adaptation steps per chain (step size, mass matrix; discarded).
        n_chains: independent chains (run in one compiled computation).
        target_accept_prob: the mean acceptance probability that step-size adaptation
            aims at, in (0, 1); higher means smaller steps (fewer divergences, slower).
        max_tree_depth: the largest tree is ``2**max_tree_depth`` leapfrog steps.
        dense_mass: adapt a dense (instead of diagonal) mass matrix.

    Raises:
        ValueError: a field of the wrong type or out of range (the message names it).

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import NUTS
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
        >>> post = jaxcal.PlattScaling().fit_bayes(
        ...     s, y, key=jax.random.key(0), method=NUTS(n_samples=200, n_warmup=200))
        >>> post.draws["a"].shape  # [chains, samples]
        (4, 200)
        >>> NUTS(n_samples=0)
        Traceback (most recent call last):
        ...
        ValueError: n_samples must be an integer >= 1; got 0.
    """

    n_samples: int = 1000
    n_warmup: int = 500
    n_chains: int = 4
    target_accept_prob: float = 0.8
    max_tree_depth: int = 10
    dense_mass: bool = False

    def __post_init__(self) -> None:
        _set(self, "n_samples", check_int(self.n_samples, "n_samples"))
        _set(self, "n_warmup", check_int(self.n_warmup, "n_warmup", minimum=0))
        _set(self, "n_chains", check_int(self.n_chains, "n_chains"))
        p = self.target_accept_prob
        ok = isinstance(p, int | float | np.integer | np.floating) and not isinstance(p, bool)
        if not (ok and 0.0 < float(p) < 1.0):
            raise ValueError(f"target_accept_prob must be a number in (0, 1); got {p!r}.")
        _set(self, "target_accept_prob", float(p))
        _set(self, "max_tree_depth", check_int(self.max_tree_depth, "max_tree_depth"))
        if not isinstance(self.dense_mass, bool | np.bool_):
            raise ValueError(f"dense_mass must be True or False; got {self.dense_mass!r}.")
        _set(self, "dense_mass", bool(self.dense_mass))


@dataclasses.dataclass(frozen=True)
class SVI:
    """Settings of stochastic variational inference (``method=SVI(...)``).

    A Gaussian guide in the model's unconstrained space is fitted by ``n_steps`` Adam steps
    on the negative ELBO (``Trace_ELBO``) with a learning rate decaying from
    ``learning_rate`` to 1% of it (cosine schedule); the posterior draws are ``n_samples``
    independent draws of the fitted guide.

    Args:
        n_steps: optimisation steps (a fixed number: there is no stopping rule).
        learning_rate: peak Adam learning rate, > 0.
        n_samples: guide draws returned.
        subsample_size: minibatch size (``None``: full batch); the minibatch
            log-likelihood is scaled by ``n / subsample_size``, so minibatch and full-batch
            SVI target the same posterior. Must not exceed the data size.
        guide: ``"mvn"`` (full-rank Gaussian, ``AutoMultivariateNormal``) or ``"normal"``
            (mean-field, ``AutoNormal``).

    Raises:
        ValueError: a field of the wrong type or out of range (the message names it).

    Example (``fit_bayes(..., method=svi)`` then returns one "chain" of ``n_samples`` guide
    draws):
        >>> from jaxcal.bayes import SVI
        >>> svi = SVI(n_steps=1000, subsample_size=256)  # minibatches of 256
        >>> svi.learning_rate, svi.guide
        (0.05, 'mvn')
        >>> SVI(guide="laplace")
        Traceback (most recent call last):
        ...
        ValueError: guide must be one of ('mvn', 'normal'); got 'laplace'.
    """

    n_steps: int = 3000
    learning_rate: float = 0.05
    n_samples: int = 1000
    subsample_size: int | None = None
    guide: str = "mvn"

    def __post_init__(self) -> None:
        _set(self, "n_steps", check_int(self.n_steps, "n_steps"))
        lr = check_real(self.learning_rate, "learning_rate", minimum=0.0, strict=True)
        _set(self, "learning_rate", lr)
        _set(self, "n_samples", check_int(self.n_samples, "n_samples"))
        if self.subsample_size is not None:
            _set(self, "subsample_size", check_int(self.subsample_size, "subsample_size"))
        if not isinstance(self.guide, str) or self.guide not in GUIDES:
            raise ValueError(f"guide must be one of {GUIDES}; got {self.guide!r}.")
