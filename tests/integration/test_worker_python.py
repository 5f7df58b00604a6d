"""dagster_eventhub_ingest.resources.spark.worker_python: the Python processes a local driver's
Spark starts import the installed pyspark (bytecode cached), not Spark's zip (compiled from source
in every process).

The path rules run in fresh interpreters given Spark's ``PYTHONPATH`` (the zips first); the real
Spark test starts a local session in a fresh process and asks each kind of Python process Spark
starts (an executor's worker, the data source's creation and its planning) where its pyspark
came from, with the control of ``EHINGEST_WORKER_SITE=off``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import py4j
import pyspark
import pytest

from dagster_eventhub_ingest.resources.spark.worker_python import WORKER_SITE, worker_pythonpath
from tests.support.fixtures.spark import script_in_fresh_jvm

LIB = Path(pyspark.__file__).parent / "python" / "lib"
PYSPARK_ZIP = LIB / "pyspark.zip"
PY4J_ZIP = next(LIB.glob("py4j-*-src.zip"))
_WHERE = "import json, py4j, pyspark; print(json.dumps([pyspark.__file__, py4j.__file__]))"


def _imported_from(*path: Path | str, code: str = _WHERE, **env: str) -> list[str]:
    """What a fresh interpreter with ``PYTHONPATH=path`` (Spark's order) prints for ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_spark_s_path_imports_pyspark_from_its_zip_without_the_site() -> None:
    """The control: the path Spark gives its Python processes compiles pyspark from the zip."""
    pyspark_file, py4j_file = _imported_from(PYSPARK_ZIP, PY4J_ZIP)
    assert pyspark_file.startswith(str(PYSPARK_ZIP))
    assert py4j_file.startswith(str(PY4J_ZIP))


def test_the_installed_package_s_own_zips_move_behind_it() -> None:
    pyspark_file, py4j_file = _imported_from(PYSPARK_ZIP, PY4J_ZIP, WORKER_SITE)
    assert pyspark_file == pyspark.__file__
    assert py4j_file == py4j.__file__


def test_zips_that_are_not_the_installed_packages_stay_first(tmp_path: Path) -> None:
    """A Spark distribution's zip (another SPARK_HOME) or a py4j of another version may hold
    other code than the installed package: Spark's order is kept for them."""
    other_lib = tmp_path / "spark" / "python" / "lib"
    other_lib.mkdir(parents=True)
    other_zip = shutil.copy(PYSPARK_ZIP, other_lib / "pyspark.zip")
    other_py4j = shutil.copy(PY4J_ZIP, other_lib / "py4j-0.0.1-src.zip")
    pyspark_file, py4j_file = _imported_from(other_zip, other_py4j, WORKER_SITE)
    assert pyspark_file.startswith(str(other_zip))
    assert py4j_file.startswith(str(other_py4j))


def test_a_sitecustomize_later_on_the_path_still_runs(tmp_path: Path) -> None:
    """The site directory hides any other ``sitecustomize`` (a venv's, the distribution's):
    it runs that one after its own work, as Python would have."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS_RAN = True\n")
    code = "import builtins, json, pyspark; print(json.dumps([pyspark.__file__, THEIRS_RAN]))"
    pyspark_file, ran = _imported_from(PYSPARK_ZIP, WORKER_SITE, theirs, code=code)
    assert pyspark_file == pyspark.__file__
    assert ran is True


@pytest.mark.parametrize("setting", ["", "off", "OFF "])
def test_the_jvm_s_pythonpath_leads_with_the_site(setting: str) -> None:
    env = {"PYTHONPATH": "/user/path", "EHINGEST_WORKER_SITE": setting}
    if setting.strip().lower() == "off":
        assert worker_pythonpath(env) is None
    else:
        assert worker_pythonpath(env) == os.pathsep.join([str(WORKER_SITE), "/user/path"])
        assert worker_pythonpath({}) == str(WORKER_SITE)


def test_only_the_jvm_launch_gets_the_site_never_this_process() -> None:
    """The site goes into the environment the driver's JVM is launched with, built from this
    process's and never written back to it."""
    from dagster_eventhub_ingest.resources.spark.session import driver_environment

    before = dict(os.environ)
    base = {"PYTHONPATH": "/user/path", "SPARK_LOCAL_IP": "10.1.2.3"}
    env = driver_environment(local=True, base=base)
    assert env["PYTHONPATH"] == os.pathsep.join([str(WORKER_SITE), "/user/path"])
    assert env["SPARK_LOCAL_IP"] == "10.1.2.3"  # the user's setting stays
    assert (env["PYSPARK_PYTHON"], env["PYSPARK_DRIVER_PYTHON"]) == (sys.executable,) * 2
    # A cluster's driver: its executors' Python and address are the user's.
    cluster = driver_environment(local=False, base=base)
    assert cluster["PYTHONPATH"] == "/user/path" and "PYSPARK_PYTHON" not in cluster
    assert base == {"PYTHONPATH": "/user/path", "SPARK_LOCAL_IP": "10.1.2.3"}
    assert dict(os.environ) == before


_ENV_WATCH = """
import json, os, threading
from dagster_eventhub_ingest.resources.spark.session import local_spark_session

site_seen, errors, stop = [], [], threading.Event()

def watch():  # what the store's HTTP client does on every request
    while not stop.is_set():
        try:
            for key, value in os.environ.items():
                if key == "PYTHONPATH" and "worker_site" in value:
                    site_seen.append(value)
        except Exception as exc:
            errors.append(repr(exc))

watcher = threading.Thread(target=watch)
watcher.start()
spark = local_spark_session("env-watch-test", master="local[1]", register_source=False)
rows = spark.range(3).count()
stop.set()
watcher.join()
spark.stop()
print(json.dumps({"errors": errors[:3], "site_seen": bool(site_seen), "rows": rows}))
"""


@pytest.mark.spark
def test_a_session_start_leaves_this_process_s_environment_alone() -> None:
    """A thread iterates ``os.environ`` for the whole start of a local session (a run starts
    its session on a thread while its main thread calls the store)."""
    seen = script_in_fresh_jvm(_ENV_WATCH)
    assert seen == {"errors": [], "site_seen": False, "rows": 3}


_SPARK = """
import json
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from dagster_eventhub_ingest.resources.spark.session import local_spark_session

def where():
    import pyspark
    return "zip" if ".zip" in pyspark.__file__ else "installed"

class Reader(DataSourceReader):
    def partitions(self):  # Spark's planning process
        return [InputPartition(where())]
    def read(self, partition):
        yield (partition.value,)

class Source(DataSource):
    @classmethod
    def name(cls):
        return "where_pyspark"
    def schema(self):  # Spark's creating process: the column's name says
        return f"created_{where()} string"
    def reader(self, schema):
        return Reader()

def worker(batches):  # an executor's Python worker
    import pyarrow as pa
    for batch in batches:
        yield pa.RecordBatch.from_pydict({"id": [where()]})

spark = local_spark_session("worker-site-test", master="local[1]", register_source=False)
spark.dataSource.register(Source)
df = spark.read.format("where_pyspark").load()
planned = [row[0] for row in df.collect()]
worked = [row.id for row in spark.range(1).mapInArrow(worker, "id string").collect()]
print(json.dumps({"created": df.columns[0], "planned": planned, "worker": worked}))
"""


@pytest.mark.spark
@pytest.mark.parametrize("setting", ["on", "off"])
def test_spark_s_python_processes_import_the_installed_pyspark(setting: str) -> None:
    """Every kind of Python process a local session starts, with the control (``off``: Spark's
    zip, as before)."""
    seen = script_in_fresh_jvm(_SPARK, env={"EHINGEST_WORKER_SITE": setting})
    expected = "zip" if setting == "off" else "installed"
    assert seen == {"created": f"created_{expected}", "planned": [expected], "worker": [expected]}
