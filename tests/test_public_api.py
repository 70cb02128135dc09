"""Every public name the package advertises resolves, and ``__all__`` matches it."""

import importlib

import pytest

import jaxcal

SUBPACKAGES = [
    "calibrators",
    "metrics",
    "data",
    "debias",
    "plot",
    "scoremodels",
    "recsys",
    "clicks",
    "bayes",
]


@pytest.mark.parametrize("name", sorted(jaxcal.__all__))
def test_top_level_names_resolve(name):
    assert getattr(jaxcal, name) is not None


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_subpackage_names_resolve(package):
    module = importlib.import_module(f"jaxcal.{package}")
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"jaxcal.{package} advertises names it cannot import: {missing}"


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute"):
        jaxcal.no_such_thing  # noqa: B018
