"""The local driver JVM's class path: Spark's most used jars first.

Spark's launcher gives the driver ``$SPARK_HOME/jars/*``, which the JVM expands in the order the
file system lists the ~280 jars, and the JVM looks a class up in one jar after another: a class
of ``spark-core`` (at place 259 of 280 on this project's machine) costs 258 misses first. A run
loads ~14,000 classes from jars when it has no class-data archive; putting the jars that hold
most of them first (:data:`FIRST_JARS`, by how many classes a run loads from each) saves ~0.5 s
of the JVM's CPU there, most of it on the thread that starts Spark (docs/benchmarks.md, "A fresh
host"). With an archive the JVM maps most classes without a lookup; those it still loads from
jars (the code generator's, for one) are found sooner too.

It changes no class a run gets: the listed jars are Spark's own, named again before the same
``jars/*`` (a jar named twice is opened once), and the order in which ``jars/*`` lists them is
the file system's anyway, another on every host. Only for the JVM this package launches for a
local master whose class path the user leaves alone: a ``spark.driver.extraClassPath`` of theirs
replaces it (:func:`driver_class_path`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dagster_eventhub_ingest.resources.spark.kind import SPARK_CONF_DIR

__all__ = [
    "CLASS_PATH_ENV",
    "CLASS_PATH_SETTING",
    "FIRST_JARS",
    "class_path_is_users",
    "driver_class_path",
]

#: The setting Spark's launcher puts before ``jars/*`` on a client driver's class path.
CLASS_PATH_SETTING = "spark.driver.extraClassPath"
#: Environment variables that add to the driver's class path: with one set, the class path is
#: the user's to order.
CLASS_PATH_ENV = ("SPARK_CLASSPATH", "SPARK_DIST_CLASSPATH")
#: The jars of Spark's distribution a local run loads most classes from, most first (a cold
#: ``ehingest run`` of 100k events without an archive, ``-Xlog:class+load``: 2,558 classes from
#: ``spark-catalyst`` down to ~70 from ``parquet-common``; these 30 hold 13,100 of the 14,100),
#: each a file name's start up to its version.
FIRST_JARS = (
    "spark-catalyst_",
    "scala-library-",
    "spark-core_",
    "scala-reflect-",
    "spark-sql-api_",
    "spark-sql_",
    "log4j-core-",
    "jackson-databind-",
    "hadoop-client-api-",
    "parquet-column-",
    "parquet-jackson-",
    "janino-",
    "arrow-vector-",
    "spark-config_",
    "parquet-encoding-",
    "hadoop-client-runtime-",
    "parquet-format-structures-",
    "spark-network-common_",
    "netty-common-",
    "ivy-",
    "antlr4-runtime-",
    "netty-transport-",
    "jackson-module-scala_",
    "parquet-hadoop-",
    "jackson-core-",
    "spark-common-utils_",
    "netty-buffer-",
    "log4j-api-",
    "icu4j-",
    "parquet-common-",
)


def driver_class_path(
    settings: Mapping[str, str], env: Mapping[str, str] = os.environ
) -> str | None:
    """The class path to put before Spark's ``jars/*`` for a local driver started with
    ``settings``: the :data:`FIRST_JARS` found in Spark's ``jars`` directory, in that order; None
    when the user's settings, environment or Spark conf directory add to the class path
    (:func:`class_path_is_users`), or none is found."""
    if class_path_is_users(settings, env):
        return None
    from pyspark.find_spark_home import _find_spark_home

    jars = Path(_find_spark_home()) / "jars"
    try:
        names = sorted(p.name for p in jars.iterdir() if p.suffix == ".jar")
    except OSError:
        return None
    first = []
    for start in FIRST_JARS:
        # The name's start is followed by its version: "spark-sql_" is not "spark-sql-api_".
        found = [
            n for n in names if n.startswith(start) and n[len(start) : len(start) + 1].isdigit()
        ]
        if len(found) == 1:
            first.append(str(jars / found[0]))
    return os.pathsep.join(first) or None


def class_path_is_users(settings: Mapping[str, str], env: Mapping[str, str] = os.environ) -> bool:
    """Whether the user may add to a local driver's class path: a ``spark.driver.extraClassPath``
    in ``settings``, one of :data:`CLASS_PATH_ENV`, or a ``SPARK_CONF_DIR`` of theirs (its
    ``spark-defaults.conf`` may set it, and the package's ``--conf`` would replace it)."""
    conf_dir = env.get("SPARK_CONF_DIR")
    return bool(
        settings.get(CLASS_PATH_SETTING)
        or any(env.get(name) for name in CLASS_PATH_ENV)
        or (conf_dir and Path(conf_dir) != SPARK_CONF_DIR)
    )
