"""What a SparkSession runs on: a local master, a cluster, or a Spark Connect server.

Plain predicates over a session or a master URL (no project imports): the session builder
(:mod:`dagster_eventhub_ingest.resources.spark.session`), code shipping
(:mod:`dagster_eventhub_ingest.resources.spark.code_shipping`) and the sink checks ask them.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_SPARK_MASTER",
    "SPARK_CONF_DIR",
    "SessionMarks",
    "describe_engine",
    "is_connect_session",
    "is_local_master",
    "session_is_local",
]

#: Shipped with the package: the Spark conf directory of the drivers it starts (a
#: log4j2.properties printing warnings and errors only). A ``SPARK_CONF_DIR`` elsewhere is the
#: user's.
SPARK_CONF_DIR = Path(__file__).with_name("spark_conf")
#: The master a run starts when it is given neither a master nor a Spark Connect URL: every
#: core of this machine (the CLI and Dagster alike).
DEFAULT_SPARK_MASTER = "local[*]"


def is_local_master(master: str | None) -> bool:
    """True for masters whose executors run on this machine (``local``, ``local[n]``, ...)."""
    return (
        master is None
        or master == ""
        or master.startswith(("local[", "local-cluster["))
        or (master == "local")
    )


def is_connect_session(spark: object) -> bool:
    """True for a Spark Connect session (``pyspark.sql.connect``), which has no JVM handle."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_is_local(spark: SparkSession) -> bool:
    """True when executors share this machine and interpreter (a classic ``local`` master).

    A Spark Connect session is never local: its workers are the server's, even on loopback.
    """
    if is_connect_session(spark):
        return False
    return is_local_master(spark.conf.get("spark.master", None))


def describe_engine(spark: SparkSession) -> str:
    """``master 'spark://h:7077'`` or ``a Spark Connect session``, for error messages."""
    if is_connect_session(spark):
        return "a Spark Connect session"
    return f"master {spark.conf.get('spark.master', None)!r}"


class SessionMarks:
    """Sessions something was done for once (shipped to, registered on, warmed), by the live
    session object: a session that was stopped and freed takes its mark along, so a new one
    that Python gives the same ``id()`` (a long-lived process's next run) is done again."""

    def __init__(self) -> None:
        self._marked: weakref.WeakSet[object] = weakref.WeakSet()

    def __contains__(self, spark: object) -> bool:
        return spark in self._marked

    def add(self, spark: object) -> None:
        """Mark ``spark`` done."""
        self._marked.add(spark)
