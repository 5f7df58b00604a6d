"""The Spark runtime: the sessions this package starts, their driver JVM and Python workers.

:mod:`.kind` tells what a session runs on (local, cluster, Spark Connect),
:mod:`.session` builds a local or remote SparkSession (and owns the one it started),
:mod:`.gateway` launches a classic driver's JVM with an environment of its own,
:mod:`.worker_python` and ``worker_site/`` make a local driver's Python workers import the
installed pyspark, ``spark_conf/`` holds the quiet log configuration. Each module is imported
where it is needed (pyspark is heavy to import); this package's face holds no names.
"""
