"""Package faces whose public names load on first use (PEP 562).

A face names its package's public parts without importing them: Spark executors import single
modules from the shipped code (the sink's writers, the store's records) and need neither the
driver-only libraries (pydantic, the storage SDK) nor the time to import them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_face"]


def lazy_face(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: ``homes`` maps each public name to the
    module that defines it, relative to ``package`` (``".records"``) or absolute."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home, package), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
