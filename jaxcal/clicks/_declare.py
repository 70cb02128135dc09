"""Declaring a click model: two class decorators that turn a model's pure functions (its
click probabilities, and its E-step or closed-form statistics) into its fitted class
(:class:`~jaxcal.clicks._base.ClickModelFit`, :func:`fitted_model`) and its estimator
(:class:`~jaxcal.clicks._base.ClickModel`, :func:`estimator`).

The decorators only set the class attributes that the bases read (``model_name``,
``_conditional_fn``, ``_marginal_fn``, ``_continuation_fn``; ``fitted_class``, ``uses_em``,
``_stats``) and make the classes frozen dataclasses (the fitted one a pytree); the parameter
shapes stay in the fitted class's body (``param_shapes``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from jaxcal._pytree import pytree_dataclass

__all__ = ["estimator", "fitted_model"]

T = TypeVar("T", bound=type)


def fitted_model(
    name: str,
    conditional: Callable,
    marginal: Callable | None = None,
    *,
    continuation: Callable | None = None,
) -> Callable[[T], T]:
    """Class decorator of a fitted click model (a ``ClickModelFit`` subclass, made a pytree
    dataclass).

    Args:
        name: the model's name (``"DBN"``), as ``jaxcal.clicks.simulate`` takes it.
        conditional: ``(params, qd, clicks, mask) -> [S, n]`` probabilities
            ``P(C_r = 1 | C_<r)`` (``predict_conditional``).
        marginal: the same for ``P(C_r = 1)`` (``predict_marginal``); default
            ``conditional``, for models whose clicks do not depend on the clicks above.
        continuation: for models with a satisfaction parameter, ``(params, qd, clicks,
            mask) -> [S, n]`` probabilities of a click below each rank for a user who goes
            on after it (the evidence of ``prior="empirical"``).
    """

    def declare(cls: T) -> T:
        cls.model_name = name
        cls._conditional_fn = staticmethod(conditional)
        cls._marginal_fn = staticmethod(conditional if marginal is None else marginal)
        if continuation is not None:
            cls._continuation_fn = staticmethod(continuation)
        return pytree_dataclass(cls)

    return declare


def estimator(fitted_class: type, stats: Callable, *, em: bool = False) -> Callable[[T], T]:
    """Class decorator of a click-model estimator (a ``ClickModel`` subclass, made a frozen
    dataclass: its options are those of ``fit``).

    Args:
        fitted_class: the fitted class that ``fit`` returns (declared by
            :func:`fitted_model`).
        stats: with ``em``, the E-step ``(params, batch) -> (stats, loglik)`` that EM
            iterates; otherwise the closed-form sufficient statistics ``(template, batch)
            -> stats``; ``stats`` maps each parameter to ``(numerator, denominator)`` sums.
        em: whether the model is fitted by EM (else in one closed-form step).
    """

    def declare(cls: T) -> T:
        cls.fitted_class = fitted_class
        cls.uses_em = em
        cls._stats = staticmethod(stats)
        return dataclasses.dataclass(frozen=True)(cls)

    return declare
