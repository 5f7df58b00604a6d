"""Spark's Python processes on a local driver's host import the installed pyspark, not its zip.

Spark starts every Python process it needs (the executors' worker daemon and its workers, and a
daemon and a worker for each step of a Python data source: looking installed sources up,
creating one, planning its read) with ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip
first on ``PYTHONPATH``. Python caches no bytecode for modules imported from a zip, so each of
them compiled pyspark from source: ~0.5 s of CPU per process, a dozen processes in a run's
first read, most of them one after another (measured: ``python -c "import pyspark.worker"``
0.22 s from the installed package, 0.70-0.76 s from the zip).

A local session started by this package
(:func:`dagster_eventhub_ingest.resources.spark.session.start_classic_driver`) puts this
directory on its JVM's ``PYTHONPATH``, so Python runs this module at start-up in each of those
processes. When the zip is the one inside the installed pyspark package (a pip install: the same
files), it moves behind the installed package, whose bytecode is cached; the py4j zip likewise
when the installed py4j is the zip's version. A zip from anywhere else (a Spark distribution's
``SPARK_HOME``) stays where Spark put it. Then the ``sitecustomize`` this module hides, if any
(later on the path), runs as it would have.

Standard library only: this runs before anything else in the process.
"""

from __future__ import annotations

import contextlib
import os
import sys
from importlib.machinery import PathFinder
from importlib.util import module_from_spec

_HERE = os.path.dirname(os.path.abspath(__file__))


def _package_dir(name: str, path: list[str]) -> str | None:
    """Where ``path`` (zips left out) would import the package ``name`` from."""
    spec = PathFinder.find_spec(name, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


def _py4j_version(package: str) -> str | None:
    try:
        with open(os.path.join(package, "version.py"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("'\"")
    return None


def _installed_copy(entry: str, path: list[str]) -> bool:
    """Whether the zip ``entry`` holds what the installed package of the same name holds."""
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        # <site-packages>/pyspark/python/lib/pyspark.zip: the installed package's own zip.
        home = os.path.realpath(os.path.dirname(os.path.dirname(os.path.dirname(entry))))
        return _package_dir("pyspark", path) == home
    if name.startswith("py4j-") and name.endswith("-src.zip"):
        package = _package_dir("py4j", path)
        version = name[len("py4j-") : -len("-src.zip")]
        return package is not None and _py4j_version(package) == version
    return False


def prefer_installed_pyspark() -> list[str]:
    """Move the zips that duplicate installed packages to the end of ``sys.path``; the moved."""
    zips = [p for p in sys.path if p.endswith(".zip")]
    rest = [p for p in sys.path if not p.endswith(".zip")]
    moved = [z for z in zips if _installed_copy(z, rest)]
    if moved:
        sys.path[:] = [p for p in sys.path if p not in moved] + moved
    return moved


def _run_hidden_sitecustomize() -> None:
    """Run the ``sitecustomize`` later on the path (a venv's, the distribution's), if any."""
    later = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


# Never keep a Spark process from starting: on any surprise it imports from the zip, as before.
with contextlib.suppress(Exception):
    prefer_installed_pyspark()
_run_hidden_sitecustomize()
