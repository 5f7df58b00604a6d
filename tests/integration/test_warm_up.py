"""dagster_eventhub_ingest.ops.run.warm_up.warm_python on a real local session in a fresh process:
the session's next read runs in the Python workers it started, with the reader's modules already
imported."""

from __future__ import annotations

import pytest

from tests.support.fixtures.spark import script_in_fresh_jvm

_SCRIPT = """
import json, sys
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from dagster_eventhub_ingest.resources.spark.session import local_spark_session
from dagster_eventhub_ingest.ops.run.warm_up import warm_python
spark = local_spark_session("warm-test", master="local[2]", register_source=False)
warm = warm_python(spark) if sys.argv[1] == "warm" else set()
pandas_on_driver = "pandas" in sys.modules

class Reader(DataSourceReader):  # the next job is a read, as the run's is
    def partitions(self):
        return [InputPartition(0), InputPartition(1)]
    def read(self, partition):
        import os, sys
        yield (os.getpid(),
               "dagster_eventhub_ingest.resources.eventhubs_source.read" in sys.modules,
               "azure.eventhub" in sys.modules)

class Source(DataSource):
    @classmethod
    def name(cls):
        return "report_workers"
    def schema(self):
        return "pid long, loaded boolean, sdk boolean"
    def reader(self, schema):
        return Reader()

spark.dataSource.register(Source)
rows = spark.read.format("report_workers").load().collect()
print(json.dumps({"warm": sorted(warm), "read": [r.pid for r in rows],
                  "loaded": [r.loaded for r in rows], "sdk": [r.sdk for r in rows],
                  "pandas_on_driver": pandas_on_driver}))
"""


@pytest.mark.spark
@pytest.mark.parametrize("warm", ["warm", "cold"])
def test_warmed_workers_run_the_next_read_with_the_reader_imported(warm: str) -> None:
    """The read's tasks run in the warmed workers, the reader imported and the Azure SDK not (the
    reader talks AMQP itself: ~0.3 s of CPU per worker); the warm-up leaves pandas unimported
    on the driver (``mapInArrow`` would import it, 0.3-0.4 s of CPU)."""
    result = script_in_fresh_jvm(_SCRIPT, warm)
    assert not result["pandas_on_driver"]
    if warm == "cold":  # the control: fresh workers have not imported the reader
        assert not any(result["loaded"])
        return
    assert len(result["warm"]) == 2
    assert set(result["read"]) <= set(result["warm"]) and all(result["loaded"])
    assert not any(result["sdk"])


_PLANNERS = """
import json, sys
import psutil
from dagster_eventhub_ingest.resources.spark.session import local_spark_session
from dagster_eventhub_ingest.ops.run.warm_up import warm_python
spark = local_spark_session("warm-test", master="local[1]", register_source=False)
warm_python(spark, with_planners=sys.argv[1] == "planners")
jvm = psutil.Process(spark.sparkContext._gateway.proc.pid)
names = set()
for child in jvm.children():
    try:
        names.add(" ".join(child.cmdline()).rsplit(" ", 1)[-1])
    except psutil.Error:  # a short-lived child (a zombie until reaped)
        pass
print(json.dumps(sorted(names)))
"""


@pytest.mark.spark
@pytest.mark.parametrize("planners", ["planners", "workers"])
def test_planner_daemons_are_started_only_when_asked(planners: str) -> None:
    """with_planners: the Python daemons that create and plan a data source run afterwards (the
    run's read then forks from them); without, only the executors' worker daemon does."""
    daemons = set(script_in_fresh_jvm(_PLANNERS, planners))
    assert "pyspark.worker" in daemons
    planner_daemons = {
        "pyspark.sql.worker.create_data_source",
        "pyspark.sql.worker.plan_data_source_read",
    }
    if planners == "planners":
        assert planner_daemons <= daemons, daemons
    else:
        assert not planner_daemons & daemons, daemons
