"""The local driver's class path: Spark's most used jars first (resources/spark/class_path.py)."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home

from dagster_eventhub_ingest.resources.spark.class_path import FIRST_JARS, driver_class_path


def test_spark_s_most_used_jars_come_first_in_their_order_each_once() -> None:
    found = driver_class_path({}, {})
    assert found is not None
    paths = [Path(p) for p in found.split(os.pathsep)]
    jars = Path(_find_spark_home()) / "jars"
    assert all(p.parent == jars and p.is_file() for p in paths)
    names = [p.name for p in paths]
    # The installed pyspark has every one of them: a name that no longer matches is a jar that
    # went back to the file system's order.
    assert len(names) == len(FIRST_JARS) == len(set(names))
    assert all(n.startswith(start) for n, start in zip(names, FIRST_JARS, strict=True))
    # A start is followed by the version: spark-sql_ is not spark-sql-api_.
    sql = [n for n in names if n.startswith("spark-sql")]
    assert [n.split("_")[0] for n in sql] == ["spark-sql-api", "spark-sql"]


def test_a_class_path_of_the_user_s_is_left_as_spark_builds_it() -> None:
    assert driver_class_path({"spark.driver.extraClassPath": "/opt/lib/x.jar"}, {}) is None
    assert driver_class_path({}, {"SPARK_CLASSPATH": "/opt/lib/*"}) is None
    assert driver_class_path({}, {"SPARK_DIST_CLASSPATH": "/opt/hadoop/*"}) is None
    assert driver_class_path({"spark.driver.extraClassPath": ""}, {"SPARK_CLASSPATH": ""})
    # A Spark conf directory of the user's: its spark-defaults.conf may set the class path.
    assert driver_class_path({}, {"SPARK_CONF_DIR": "/etc/spark/conf"}) is None
