"""The metric docstrings' examples run as part of the suite: each public metric shows a call with an
exact answer (an invariance or a hand-checked value), and that answer must stay true."""

import doctest
import importlib
import pkgutil

import pytest

import analysis.metrics

MODULES = sorted(m.name for m in pkgutil.iter_modules(analysis.metrics.__path__, "analysis.metrics."))


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_in_a_metric_module_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} example lines failed (run doctest -v)"
    # a module defining a public metric runs its example (not skipped by doctest's discovery)
    defines = [m for m in analysis.metrics.__all__ if getattr(analysis.metrics, m).__module__ == name]
    assert result.attempted > 0 or not defines, f"{name}: no example ran for {defines}"


@pytest.mark.parametrize("name", analysis.metrics.__all__)
def test_every_public_metric_has_an_example(name):
    assert ">>>" in (getattr(analysis.metrics, name).__doc__ or ""), f"analysis.metrics.{name} has no example"
