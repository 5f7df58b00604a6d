"""The Python processes a local driver's Spark starts import the installed pyspark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts (the executors' workers, the Python data source's planner processes), and Python caches
no bytecode for a zip: each process compiled pyspark from source, ~0.5 s of CPU apiece. For a
session whose JVM this package starts on this host (:func:`resources.spark_session.
start_local_driver`), :func:`installed_pyspark_for_workers` puts :data:`WORKER_SITE` on the JVM's
``PYTHONPATH``; its ``sitecustomize`` moves the zip behind the installed package when it is that
package's own zip (see the module there). A cluster's executors keep their own environment.

``EHINGEST_WORKER_SITE=off`` (:data:`WORKER_SITE_ENV`) leaves the JVM's environment as it is.

Measured (bench/ingest_throughput.py's cold ``ehingest run``, 100k events, 4 partitions, 2
cores, alternated runs): 12.5-14.9 -> 10.3-10.4 s, CPU 17.0-20.7 -> 14.2-14.5 s.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path

__all__ = ["WORKER_SITE", "WORKER_SITE_ENV", "installed_pyspark_for_workers"]

#: The directory whose ``sitecustomize`` Spark's Python processes run at start-up.
WORKER_SITE = Path(__file__).with_name("worker_site")
#: ``off`` keeps Spark's zip first in the Python processes of local sessions.
WORKER_SITE_ENV = "EHINGEST_WORKER_SITE"


@contextlib.contextmanager
def installed_pyspark_for_workers(env: MutableMapping[str, str] = os.environ) -> Iterator[None]:
    """While a local driver's JVM starts (it copies ``env``), :data:`WORKER_SITE` leads its
    ``PYTHONPATH``; the variable is as it was afterwards, in this process."""
    if env.get(WORKER_SITE_ENV, "").strip().lower() == "off" or os.pathsep in str(WORKER_SITE):
        # (An install path holding the separator cannot be one PYTHONPATH entry.)
        yield
        return
    previous = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(WORKER_SITE), previous) if p)
    try:
        yield
    finally:
        if previous is None:
            env.pop("PYTHONPATH", None)
        else:
            env["PYTHONPATH"] = previous
