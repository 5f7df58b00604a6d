"""Code shipped to executors, missing-module errors, and sinks that verify what they commit.

The cluster and Spark Connect paths run for real in the ``cluster`` tier
(scripts/tiers/cluster.sh, tests/cluster/); these tests pin the pieces on one machine.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dagster_eventhub_ingest.ops.sinks.batch import batch_key
from dagster_eventhub_ingest.ops.sinks.delta_writer import (
    DeltaBatchWriter,
    DeltaPart,
    DeltaTaskMessage,
)
from dagster_eventhub_ingest.ops.sinks.verify import verify_written
from dagster_eventhub_ingest.ops.sinks.write import write_batch
from dagster_eventhub_ingest.resources.errors import ConfigurationError, SinkError
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.spark.code_shipping import (
    build_code_zip,
    missing_module_error,
    ship_code,
)
from dagster_eventhub_ingest.resources.spark.kind import is_local_master, session_is_local
from tests.support.sink_rows import events

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_code_zip_holds_the_packages_and_is_built_once(tmp_path: Path) -> None:
    first = build_code_zip(tmp_path)
    assert build_code_zip(tmp_path) == first  # same sources: the cached zip
    assert first.name.startswith("dagster_eventhub_ingest-0.1.0-") and first.suffix == ".zip"
    names = set(zipfile.ZipFile(first).namelist())
    assert {
        "dagster_eventhub_ingest/__init__.py",
        "dagster_eventhub_ingest/resources/__init__.py",
        "dagster_eventhub_ingest/resources/eventhubs_source/__init__.py",
        "dagster_eventhub_ingest/resources/eventhubs_source/read.py",
        "dagster_eventhub_ingest/ops/sinks/write.py",
    } <= names
    # Everything under the one import name: nothing generic at the zip's root.
    assert {n.split("/")[0] for n in names} == {"dagster_eventhub_ingest"}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    parts = {n.split("/")[1] for n in names if n.count("/") >= 2}
    assert parts == {"resources", "ops"}
    # Importable from the zip (what a Python worker does), ahead of the checkout on the path.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import dagster_eventhub_ingest.resources.eventhubs_source as s, "
        "dagster_eventhub_ingest.ops.sinks.write; print(s.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(first)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert out.strip().startswith(str(first))


def test_a_platform_wheel_s_compiled_step_is_not_shipped_its_source_is(tmp_path: Path) -> None:
    """An install from the platform wheel holds the reader's native step compiled; the zip for
    executors holds its C source instead (Python cannot load a compiled module from a zip, and
    the executors' host may be another platform: they compile it there)."""
    import importlib.machinery
    import json
    import shutil

    root = Path(__file__).resolve().parents[2]
    site = tmp_path / "site"
    shutil.copytree(
        root / "dagster_eventhub_ingest",
        site / "dagster_eventhub_ingest",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    native = (
        site
        / "dagster_eventhub_ingest/resources/eventhubs_source/fastpath"
        / f"_amqp_columns{suffix}"
    )
    native.write_bytes(b"\x7fELF not loaded here")
    code = (
        "import json, sys, zipfile; sys.path.insert(0, sys.argv[1])\n"
        "from dagster_eventhub_ingest.resources.spark.code_shipping import build_code_zip\n"
        "names = zipfile.ZipFile(build_code_zip(sys.argv[2])).namelist()\n"
        "import dagster_eventhub_ingest\n"
        "print(json.dumps([dagster_eventhub_ingest.__file__, names]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(site), str(tmp_path / "zips")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    package, names = json.loads(out.stdout.strip().splitlines()[-1])
    assert package.startswith(str(site))  # the install, not the checkout
    fastpath = "dagster_eventhub_ingest/resources/eventhubs_source/fastpath/"
    assert f"{fastpath}_amqp_columns.c" in names
    assert not [n for n in names if n.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))]


def test_missing_module_error_names_the_module_and_the_fix() -> None:
    worker = (
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/opt/spark/python/pyspark/serializers.py", line 193, in _read_with_length\n'
        "ModuleNotFoundError: No module named 'dagster_eventhub_ingest'\n"
    )
    err = missing_module_error(RuntimeError(worker))
    assert isinstance(err, ConfigurationError)
    text = str(err)
    assert "'dagster_eventhub_ingest' (ModuleNotFoundError)" in text
    assert "spark.ehingest.shipCode" in text
    assert "check that the location" not in text
    # Someone else's module: install it where the workers run; shipping this project won't help.
    other = missing_module_error(RuntimeError(worker.replace("dagster_eventhub_ingest", "pyarrow")))
    assert other is not None and "spark.ehingest.shipCode" not in str(other)
    assert "install 'pyarrow' in the executors' Python environment" in str(other)
    assert missing_module_error(RuntimeError("AnalysisException: table not found")) is None


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://10.0.0.5:7077", False),
        ("yarn", False),
        ("k8s://https://api:6443", False),
        ("localhost:7077", False),
    ],
)
def test_local_masters(master: str, local: bool) -> None:
    assert is_local_master(master) is local


@pytest.mark.spark
def test_local_session_ships_nothing(spark: SparkSession) -> None:
    assert session_is_local(spark)
    assert ship_code(spark) is None


@pytest.mark.spark
def test_delta_commit_refuses_files_it_cannot_read(spark: SparkSession, tmp_path: Path) -> None:
    """A task's file missing on the committing host (a cluster writing to local disks) or with
    other rows than reported is never committed: no Delta version appears."""
    sink = SinkSettings(format="deltalake", path=str(tmp_path / "t"))
    write_batch(events(spark, {"0": (0, 9)}), sink, {"0": (0, 9)})
    from deltalake import DeltaTable

    table = DeltaTable(str(tmp_path / "t"))
    version = table.version()
    good = table.file_uris()[0]
    rel = good[len(str(tmp_path / "t")) + 1 :]
    writer = DeltaBatchWriter(
        str(tmp_path / "t"), ["eh_batch"], events(spark, {"0": (0, 0)}).schema.json(), ["0-10-19"]
    )

    def message(path: str, rows: int) -> DeltaTaskMessage:
        part = DeltaPart(path, 100, {"eh_batch": "0-10-19"}, rows, "{}", 0)
        return DeltaTaskMessage(parts=(part,), outside=0)

    with pytest.raises(SinkError, match=r"'eh_batch=0-10-19/part-x.parquet' written by a task"):
        writer.commit([message("eh_batch=0-10-19/part-x.parquet", 10)])
    with pytest.raises(SinkError, match=r"holds \d+ rows, its task wrote 999"):
        writer.commit([message(rel, 999)])
    assert DeltaTable(str(tmp_path / "t")).version() == version


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["parquet", "deltalake"])
def test_write_is_verified_by_reading_back_the_row_count(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    sink = SinkSettings(format=kind, path=str(tmp_path / kind))
    ranges = {"0": (0, 9), "1": (0, 4)}
    write_batch(events(spark, ranges), sink, ranges)
    keys = [batch_key(p, *r) for p, r in ranges.items()]
    verify_written(spark, sink, keys, 15, sink.path or "")  # what was written: fine
    with pytest.raises(SinkError) as err:
        verify_written(spark, sink, keys, 16, sink.path or "")
    text = str(err.value)
    assert "16 event(s) were written but 15 are readable" in text
    assert "no checkpoint moved" in text and batch_key("1", 0, 4) in text


def test_dagster_spark_resource_for_a_cluster_or_spark_connect() -> None:
    from dagster_eventhub_ingest.dagster_project.resources import local_pyspark_resource

    local = local_pyspark_resource().spark_config
    assert local["spark.driver.host"] == "127.0.0.1" and local["spark.master"] == "local[*]"
    cluster = local_pyspark_resource({"spark.master": "spark://10.0.0.5:7077"}).spark_config
    assert "spark.driver.host" not in cluster and "spark.driver.bindAddress" not in cluster
    remote = local_pyspark_resource(remote="sc://spark.example:15002").spark_config
    assert remote["spark.remote"] == "sc://spark.example:15002"
    assert not [k for k in remote if k != "spark.remote" and not k.startswith("spark.sql.")]
    same = local_pyspark_resource({"spark.remote": "sc://spark.example:15002"}).spark_config
    assert same == remote
    with pytest.raises(ConfigurationError, match=r"spark: give master .* or remote .*not both"):
        local_pyspark_resource({"spark.master": "local[2]"}, remote="sc://h:15002")
    with pytest.raises(ConfigurationError, match=r"'http://h:15002' is not a Spark Connect URL"):
        local_pyspark_resource(remote="http://h:15002")


def test_the_dagster_resource_refuses_an_unshared_local_sink_on_a_cluster_without_a_session(
    tmp_path: Path,
) -> None:
    """The project's PySpark resource starts its session only when there is something to read;
    the check that needs to know where executors run is made from its config before anything
    is claimed, and no session starts for it."""
    from dagster_eventhub_ingest.dagster_project.resources import (
        local_pyspark_resource,
        session_or_factory,
    )

    sink = SinkSettings(format="parquet", path=str(tmp_path / "out"))
    cluster = local_pyspark_resource({"spark.master": "spark://10.0.0.5:7077"})
    with pytest.raises(ConfigurationError) as err:
        session_or_factory(cluster, sink)
    assert "is a local path, but Spark runs on master 'spark://10.0.0.5:7077'" in str(err.value)
    assert "shared: true" in str(err.value)
    connect = local_pyspark_resource(remote="sc://spark.example:15002")
    with pytest.raises(ConfigurationError, match="Spark runs on Spark Connect"):
        session_or_factory(connect, sink)
    shared = SinkSettings(format="parquet", path=str(tmp_path / "out"), shared=True)
    session, factory = session_or_factory(cluster, shared)
    assert session is None and callable(factory)
    session, factory = session_or_factory(local_pyspark_resource(), sink)
    assert session is None and callable(factory)
    assert cluster._spark_session is None  # nothing above started a session


def test_azure_sink_filesystem_from_options() -> None:
    from pyarrow import fs as pafs

    from dagster_eventhub_ingest.ops.sinks.storage import arrow_filesystem

    fs, root = arrow_filesystem(
        "abfss://bronze@acct.dfs.core.windows.net/telemetry/",
        {"account_key": "a2V5", "endpoint": "http://127.0.0.1:10000/acct"},
    )
    assert isinstance(fs, pafs.AzureFileSystem) and root == "bronze/telemetry"
    fs, root = arrow_filesystem("az://bronze/t", {"azure_storage_account_name": "acct"})
    assert root == "bronze/t"
    with pytest.raises(ConfigurationError, match=r"no storage account; give storage_options"):
        arrow_filesystem("az://bronze/t", {})
    local, path = arrow_filesystem("/tmp/x")
    assert isinstance(local, pafs.LocalFileSystem) and path == "/tmp/x"
