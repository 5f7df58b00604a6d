"""The Python processes a local driver's Spark starts import the installed pyspark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts (the executors' workers, the Python data source's planner processes), and Python caches
no bytecode for a zip: each process compiled pyspark from source, ~0.5 s of CPU apiece. For a
session whose JVM this package starts on this host
(:func:`dagster_eventhub_ingest.resources.spark_session. start_local_driver`),
:func:`installed_pyspark_for_workers` puts :data:`WORKER_SITE` on the JVM's ``PYTHONPATH`` (in the
environment the JVM is launched with, never this process's); its ``sitecustomize`` moves the zip
behind the installed package when it is that package's own zip (see the module there). A cluster's
executors keep their own environment.

``EHINGEST_WORKER_SITE=off`` (:data:`WORKER_SITE_ENV`) leaves the JVM's environment as it is.

Measured (bench/ingest_throughput.py's cold ``ehingest run``, 100k events, 4 partitions, 2
cores, alternated runs): 12.5-14.9 -> 10.3-10.4 s, CPU 17.0-20.7 -> 14.2-14.5 s.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["WORKER_SITE", "WORKER_SITE_ENV", "installed_pyspark_for_workers", "worker_pythonpath"]

#: The directory whose ``sitecustomize`` Spark's Python processes run at start-up.
WORKER_SITE = Path(__file__).with_name("worker_site")
#: ``off`` keeps Spark's zip first in the Python processes of local sessions.
WORKER_SITE_ENV = "EHINGEST_WORKER_SITE"


def worker_pythonpath(env: Mapping[str, str]) -> str | None:
    """The ``PYTHONPATH`` a local driver's JVM launched with ``env`` gets: :data:`WORKER_SITE`
    first, then ``env``'s own; None to leave it as it is (``EHINGEST_WORKER_SITE=off``, or an
    install path holding the separator, which cannot be one entry)."""
    if env.get(WORKER_SITE_ENV, "").strip().lower() == "off" or os.pathsep in str(WORKER_SITE):
        return None
    return os.pathsep.join(p for p in (str(WORKER_SITE), env.get("PYTHONPATH")) if p)


@contextlib.contextmanager
def installed_pyspark_for_workers() -> Iterator[None]:
    """While a local driver's JVM starts in this block, it is launched with
    :func:`worker_pythonpath` as its ``PYTHONPATH``.

    This process's own environment is left alone. Other threads iterate ``os.environ`` (the
    HTTP client of the store reads its proxy settings from it on every request) while a run
    starts its session on a thread of its own, and a key deleted in between fails them with
    ``KeyError: 'PYTHONPATH'``: setting the variable here and deleting it afterwards did, on a
    loaded machine. pyspark launches the JVM through ``pyspark.java_gateway.Popen`` with a copy
    of the environment; that one call gets the amended copy. (No JVM launched, as when one is
    already up: nothing happens.)
    """
    from pyspark import java_gateway

    popen = java_gateway.Popen

    def launch(*args: Any, **kwargs: Any) -> Any:
        env = kwargs.get("env")
        path = None if env is None else worker_pythonpath(env)
        if env is not None and path is not None:
            kwargs["env"] = {**env, "PYTHONPATH": path}
        return popen(*args, **kwargs)

    java_gateway.Popen = launch  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        java_gateway.Popen = popen  # type: ignore[misc]
