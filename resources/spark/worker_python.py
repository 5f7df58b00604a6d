"""The Python processes a local driver's Spark starts import the installed pyspark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts (the executors' workers, the Python data source's planner processes), and Python caches
no bytecode for a zip: each process compiled pyspark from source, ~0.5 s of CPU apiece. For a
session whose JVM this package starts on this host
(:func:`dagster_eventhub_ingest.resources.spark.session.start_classic_driver`), the environment
the JVM is launched with
(:func:`dagster_eventhub_ingest.resources.spark.session.driver_environment`, never this
process's) has :data:`WORKER_SITE` first on its ``PYTHONPATH`` (:func:`worker_pythonpath`); its
``sitecustomize`` moves the zip behind the installed package when it is that package's own zip
(see the module there). A cluster's executors keep their own environment.

``EHINGEST_WORKER_SITE=off`` (:data:`WORKER_SITE_ENV`) leaves the JVM's environment as it is.

Measured (bench/ingest_throughput.py's cold ``ehingest run``, 100k events, 4 partitions, 2
cores, alternated runs): 12.5-14.9 -> 10.3-10.4 s, CPU 17.0-20.7 -> 14.2-14.5 s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["WORKER_SITE", "WORKER_SITE_ENV", "worker_pythonpath"]

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
