"""The examples in the docstrings of the functions a contributor reaches for first run as written:
a target URL, the scheme registry, the histogram, the results reader, the miss-ratio curve."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

MODULES = ["cachemark.target", "cachemark.schemes", "cachemark.measure.histogram", "cachemark.results.store",
           "cachemark.analysis.mrc"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_run(name: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # an example reads a checked-in sample by its path in the repository
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0
