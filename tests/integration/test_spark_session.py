"""dagster_eventhub_ingest.resources.spark.session: a classic session's calls into the JVM leave
pandas unimported, and its start leaves the process as it was.

py4j asks pyspark's NumPy converters about every argument of every call; unguarded, their
answer imports ``pyspark.testing.utils`` and with it pandas (0.4 s of CPU on the driver's first
call). The control shows that import; the real session (its gateway launched by
resources/spark/gateway.py) shows it gone, with NumPy arrays and scalars still converted as
pyspark converts them, and py4j's global converters, pyspark's functions and ``os.environ``
untouched. At its end (resources/spark/owned.py), a session whose JVM is ended next sends no
py4j release into the ending JVM and does not wait out PySpark's accumulator server, and one
closed in a hurry leaves no handler of that server to fail as the JVM ends; closed either way,
it leaves nothing of itself in PySpark's process state for the next session to be handed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.support.fixtures.spark import ROOT, script_in_fresh_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_UNGUARDED = """
import sys
import numpy  # loaded, as pyarrow loads it in every run
from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter
answers = [NumpyArrayConverter().can_convert("x"), NumpyScalarConverter().can_convert(1)]
print(answers, "pandas" in sys.modules)
"""


def test_control_pyspark_s_unguarded_numpy_check_imports_pandas() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _UNGUARDED], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[False,", "False]", "True"]


_SESSION = """
import json, sys
import numpy as np
from dagster_eventhub_ingest.resources.spark.session import local_spark_session

spark = local_spark_session("numpy-checks-test", master="local[1]", register_source=False)
count = spark.range(5).where("id > 1").count()
pandas_after_queries = "pandas" in sys.modules
jvm = spark._jvm
array = jvm.java.util.Arrays.toString(np.array([1, 2, 3], dtype=np.int64))  # a long[]
scalar = jvm.java.lang.Math.addExact(np.int64(2), np.int64(40))
spark.stop()
print(json.dumps({"count": count, "pandas": pandas_after_queries, "array": array,
                  "scalar": scalar}))
"""


@pytest.mark.spark
def test_a_session_s_jvm_calls_do_not_import_pandas_and_numpy_still_converts() -> None:
    seen = script_in_fresh_jvm(_SESSION)
    assert seen == {"count": 3, "pandas": False, "array": "[1, 2, 3]", "scalar": 42}


def test_numpy_guard_answers_while_numpy_is_being_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A py4j call on one thread while another thread's first ``import pyarrow`` is importing
    NumPy: the guard sees a module without its types yet and answers no, where it raised
    AttributeError (and failed the run's warm-up of the session's Python workers)."""
    import types

    import numpy

    from dagster_eventhub_ingest.resources.spark.gateway import _NumpyOnly

    asked: list[object] = []

    class Converter:
        def can_convert(self, obj: object) -> bool:
            asked.append(obj)
            return True

    guard = _NumpyOnly(Converter(), "ndarray")
    array = numpy.zeros(2)
    assert guard.can_convert(array) is True and asked == [array]
    assert guard.can_convert([1, 2]) is False and asked == [array]
    monkeypatch.setitem(sys.modules, "numpy", types.ModuleType("numpy"))  # part-way imported
    assert guard.can_convert(array) is False and guard.can_convert(3) is False
    monkeypatch.delitem(sys.modules, "numpy")
    assert guard.can_convert(array) is False and asked == [array]


_GUEST = """
import json, os, subprocess, sys
import pyspark.java_gateway
from py4j.protocol import INPUT_CONVERTER
import pyspark.sql.types  # registers pyspark's converters
from dagster_eventhub_ingest.resources.spark.session import local_spark_session

# pyspark's own SparkContext writes these two into os.environ, for any session (context.py).
PYSPARKS_OWN = ("SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE")

def state():
    return {
        "environ": {k: v for k, v in os.environ.items() if k not in PYSPARKS_OWN},
        "converters": [(type(c).__name__, sorted(vars(c))) for c in INPUT_CONVERTER],
        "popen": pyspark.java_gateway.Popen is subprocess.Popen,
    }

before = state()
spark = local_spark_session("guest-test", master="local[1]", register_source=False)

def worker(batches):  # an executor's Python worker: which interpreter, which environment
    import os, sys
    import pyarrow as pa
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"python": [sys.executable],
                                          "ip": [os.environ.get("SPARK_LOCAL_IP", "")]})

seen = spark.range(1).mapInArrow(worker, "python string, ip string").first()
during = state()
spark.stop()
after = state()
print(json.dumps({"same": before == during == after, "popen": after["popen"],
                  "python": seen.python == sys.executable, "ip": seen.ip,
                  "pinned": "PYSPARK_PYTHON" in os.environ or "SPARK_LOCAL_IP" in os.environ}))
"""


@pytest.mark.spark
def test_a_local_session_leaves_its_process_as_it_found_it() -> None:
    """Starting, using and stopping a local session writes nothing to ``os.environ``, swaps no
    pyspark function and changes none of py4j's global converters; its executors still run this
    interpreter, on loopback, from the environment the JVM was launched with."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "SPARK_CONF_DIR")
    }
    done = subprocess.run(
        [sys.executable, "-c", _GUEST],
        cwd=ROOT,
        env={**env, "EHINGEST_JVM_ARCHIVE": "off"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "same": True,
        "popen": True,
        "python": True,
        "ip": "127.0.0.1",
        "pinned": False,
    }


class _Recorder:
    """A stand-in for py4j's JVM view: records each call by its dotted path."""

    def __init__(self, calls: list[str], path: str = "") -> None:
        self._calls = calls
        self._path = path

    def __getattr__(self, name: str) -> _Recorder:
        return _Recorder(self._calls, f"{self._path}.{name}" if self._path else name)

    def __call__(self, *args: object) -> _Recorder:
        self._calls.append(self._path)
        return _Recorder(self._calls, self._path + "()")


class _FakeGateway:
    def __init__(self, calls: list[str]) -> None:
        self.jvm = _Recorder(calls)


def test_sql_preparation_looks_data_sources_up_only_once_the_context_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beside a local driver's start: the SQL registries as soon as the JVM answers, the data
    source lookup (which needs the context's environment) only once the context runs, then the
    parser's warm-up; nothing at all when the start ended first."""
    import time

    from pyspark import SparkContext

    from dagster_eventhub_ingest.resources.spark import session as spark_session

    def wait_for(condition: object, what: str) -> None:
        deadline = time.monotonic() + 10
        while not condition():  # type: ignore[operator]
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    registries = [
        "org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin",
        "org.apache.spark.sql.internal.SQLConf.get",
    ]
    manager = "org.apache.spark.sql.execution.datasources.DataSourceManager"
    calls: list[str] = []
    monkeypatch.setattr(SparkContext, "_gateway", None)
    prepare = spark_session._SqlPreparation()
    prepare.start()
    time.sleep(0.05)
    assert calls == []  # no JVM yet
    monkeypatch.setattr(SparkContext, "_gateway", _FakeGateway(calls))
    wait_for(lambda: len(calls) == 2, "the registries")
    assert calls == registries
    time.sleep(0.05)
    assert len(calls) == 2  # the lookup waits for the context
    prepare.context_ready.set()
    wait_for(lambda: len(calls) == 6, "the lookup and the parser")
    parser = "org.apache.spark.sql.execution.SparkSqlParser"
    assert calls[2:] == [
        manager,
        f"{manager}().dataSourceExists",
        parser,
        f"{parser}().parseExpression",
    ]

    for gateway_first in (False, True):
        calls.clear()
        monkeypatch.setattr(SparkContext, "_gateway", None)
        ended = spark_session._SqlPreparation()
        ended.start()
        if gateway_first:
            monkeypatch.setattr(SparkContext, "_gateway", _FakeGateway(calls))
            wait_for(lambda: len(calls) == 2, "the registries")
        ended.done.set()  # the start failed (or ended) before the context ran
        ended._thread.join(5)
        assert not ended._thread.is_alive()
        assert calls == (registries if gateway_first else [])


def test_a_local_driver_looks_in_spark_s_most_used_jars_first(spark: SparkSession) -> None:
    """The JVM's class path starts with them (resources/spark/class_path.py), then the rest of
    Spark's jars as the launcher lists them, those again among them."""
    from dagster_eventhub_ingest.resources.spark.class_path import driver_class_path

    first = (driver_class_path({}, {}) or "").split(os.pathsep)
    jvm = spark._jvm
    assert jvm is not None
    class_path = jvm.java.lang.System.getProperty("java.class.path").split(os.pathsep)
    assert len(first) > 20 and class_path[: len(first)] == first
    rest = class_path[len(first) :]
    assert set(first) <= set(rest) and len(rest) > 200


def test_the_parser_warm_up_is_sql_spark_parses_as_a_write_s_expressions(
    spark: SparkSession,
) -> None:
    """The preparation's expression parses (a failure there is only logged at debug, and would
    leave the first write's parse on the run's path) into the shapes a write's SQL has."""
    from dagster_eventhub_ingest.resources.spark.session import _PARSER_WARM_UP

    parser = spark._jsparkSession.sessionState().sqlParser()
    tree = parser.parseExpression(_PARSER_WARM_UP).treeString()
    for shape in ("'max_by", "CASE WHEN", "'length", "'p = x", "'s >= 0", "AS n"):
        assert shape in tree, (shape, tree)


_RETRY_GUEST = """
import json, os, signal
import dagster as dg
import psutil
from dagster_eventhub_ingest.dagster_project.resources import local_pyspark_resource
from dagster_eventhub_ingest.resources.spark import jvm_archive

pids = []

@dg.asset(retry_policy=dg.RetryPolicy(max_retries=1))
def counted(context: dg.AssetExecutionContext, pyspark: dg.ConfigurableResource) -> int:
    spark = pyspark.spark_session
    pids.append(jvm_archive.gateway_process().pid)
    if context.retry_number == 0:  # the JVM dies under the step (the OOM killer, kill -9)
        os.kill(pids[-1], signal.SIGKILL)
        jvm_archive.gateway_process().wait(30)
    return spark.range(5).count()

result = dg.materialize(
    [counted], resources={"pyspark": local_pyspark_resource({"spark.master": "local[1]"})},
    raise_on_error=False,
)
print(json.dumps({
    "success": result.success,
    "events": [e.event_type_value for e in result.all_events if e.is_step_event],
    "value": result.output_for_node("counted") if result.success else None,
    "pids": pids,
    "java_left": [p.pid for p in psutil.Process().children(recursive=True)],
}))
"""


@pytest.mark.spark
def test_a_retry_in_the_run_worker_s_process_gets_a_new_jvm_after_the_old_one_died() -> None:
    """Dagster's in-process execution keeps one resource for the run: when the driver JVM the
    resource started is killed under a step, the step's retry starts a new JVM instead of failing
    again on the dead one, and the run leaves no process behind."""
    done = subprocess.run(
        [sys.executable, "-c", _RETRY_GUEST],
        cwd=ROOT,
        env={**os.environ, "EHINGEST_JVM_ARCHIVE": "off"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["success"], (seen, done.stderr[-3000:])
    assert seen["events"].count("STEP_UP_FOR_RETRY") == 1 and seen["value"] == 5
    first, second = seen["pids"]
    assert first != second
    assert seen["java_left"] == []
    assert "the Spark driver JVM this run started has exited (code -9)" in done.stderr


_RELEASES_GUEST = """
import io, json, logging, threading
from py4j.clientserver import FinalizerWorker
from pyspark import SparkContext
from dagster_eventhub_ingest.resources.spark.owned import OwnedSession
from dagster_eventhub_ingest.resources.spark.session import local_spark_session

log = io.StringIO()
# py4j logs a reset connection at ERROR, a closed one at INFO.
logging.basicConfig(stream=log, level=logging.INFO)
owned = OwnedSession(
    lambda: local_spark_session("releases", master="local[1]", register_source=False)
)
owned.get().range(1).count()
# A run's plans and rows going out of scope as it ends: Python releases JVM objects by the
# thousand, and py4j's finalizer thread tells the JVM of each, one command at a time.
client = SparkContext._gateway._gateway_client
for _ in range(200_000):
    client.garbage_collect_object("o-released", True)
owned.close()
finalizers = [t for t in threading.enumerate() if isinstance(t, FinalizerWorker)]
for thread in finalizers:  # it ends after its last look (it sleeps 1 s between empty ones)
    thread.join(10)
finalizers = [t for t in finalizers if t.is_alive()]
print(json.dumps({"log": log.getvalue(), "finalizers": len(finalizers)}))
"""


@pytest.mark.spark
def test_ending_the_jvm_under_py4j_s_object_releases_logs_no_error() -> None:
    """The JVM this process launched is ended while py4j's finalizer thread still has releases
    to send: none is sent into the ending JVM, and the thread ends with the JVM.

    A release sent as the JVM exits fails: py4j logs a closed connection at INFO and one the
    JVM reset (it died with the command unread) as an ERROR with its traceback, which reached
    the CLI's stderr on a configuration error under load (and would an orchestrator's task log).
    """
    seen = script_in_fresh_jvm(_RELEASES_GUEST)
    assert "Exception while sending command" not in seen["log"], seen["log"][-3000:]
    assert "Traceback" not in seen["log"], seen["log"][-3000:]
    assert seen["finalizers"] == 0


_ACCUMULATED = """
import contextlib, io, json, threading
from pyspark import SparkContext
import dagster_eventhub_ingest.resources.spark.owned as owned
from dagster_eventhub_ingest.resources.spark.session import local_spark_session

session = owned.OwnedSession(
    lambda: local_spark_session("accumulators", master="local[2]", register_source=False)
)
spark = session.get()
counted = spark.sparkContext.accumulator(0)

def count(rows):  # a Python task: its updates reach the driver through the server
    for row in rows:
        counted.add(1)
        yield row

spark.sparkContext.parallelize(range(100), 4).mapPartitions(count).count()
server = spark.sparkContext._accumulatorServer
serving = [t for t in threading.enumerate() if "serve_forever" in t.name]
"""

_ACCUMULATOR_GUEST = (
    _ACCUMULATED
    + """
err = io.StringIO()
with contextlib.redirect_stderr(err):  # where socketserver prints a handler's failure
    woken = owned._stop_before_the_jvm_ends(spark)
    owned.end_local_driver()
print(json.dumps({
    "woken": woken,
    "counted": counted.value,
    "serving": [t.name for t in serving if t.is_alive()],
    "shut_down": server.server_shutdown,
    "context": SparkContext._active_spark_context is not None,
    "stderr": err.getvalue(),
}))
"""
)

_HURRY_GUEST = (
    _ACCUMULATED
    + """
import psutil

err = io.StringIO()
with contextlib.redirect_stderr(err):  # where socketserver prints a handler's failure
    session.close(keep_archive=False)
    for thread in serving:  # a handler that failed prints, then the server goes on serving
        thread.join(2.0)
print(json.dumps({
    "counted": counted.value,
    "serving": [t.name for t in serving if t.is_alive()],
    "shut_down": server.server_shutdown,
    "java_left": [p.pid for p in psutil.Process().children(recursive=True)],
    "stderr": err.getvalue(),
}))
"""
)


@pytest.mark.spark
def test_a_session_stopped_before_its_jvm_ends_wakes_the_accumulator_server() -> None:
    """The stop of a session whose JVM is ended next wakes PySpark's accumulator server with an
    empty update (its handler would otherwise wait out its once-a-second look: 0.8-0.9 s of
    every run's end, bench/ingest_throughput.py). Every update before the stop arrived, the
    server and its thread ended, the context is stopped, and nothing was printed."""
    seen = script_in_fresh_jvm(_ACCUMULATOR_GUEST)
    assert seen["woken"] is True
    assert seen["counted"] == 100
    assert seen["serving"] == [] and seen["shut_down"] is True
    assert seen["context"] is False
    assert seen["stderr"] == ""


@pytest.mark.spark
def test_a_session_closed_in_a_hurry_shuts_the_accumulator_server_before_its_jvm_ends() -> None:
    """A stopped run's session (``close(keep_archive=False)``) ends its JVM without stopping the
    context; PySpark's accumulator server is shut first, its handler woken by an empty update,
    so the JVM's end does not close the connection under the handler (which would fail reading
    it and print an ``EOFError`` traceback on the stopped run's stderr). Every update before the
    close arrived, and nothing of the session is left."""
    seen = script_in_fresh_jvm(_HURRY_GUEST)
    assert seen["stderr"] == "", seen["stderr"]
    assert seen["counted"] == 100
    assert seen["serving"] == [] and seen["shut_down"] is True
    assert seen["java_left"] == []


_REUSE_GUEST = """
import json, sys
import psutil
from pyspark import SparkContext
from pyspark.sql import SparkSession
from dagster_eventhub_ingest.resources.spark import jvm_archive
from dagster_eventhub_ingest.resources.spark.owned import OwnedSession, end_local_driver
from dagster_eventhub_ingest.resources.spark.session import local_spark_session

mode = sys.argv[1]

def start():
    return local_spark_session("reuse", master="local[1]", register_source=False)

def job(spark):  # the JVM and a Python worker of it
    return [spark.range(10).count(), spark.sparkContext.parallelize(range(10), 2).sum()]

users = start() if mode == "users" else None  # a session the user built: never stopped by us
first = OwnedSession(start)
spark = first.get()
seen = {"first": job(spark), "pids": [jvm_archive.gateway_process().pid]}
first.close(keep_archive=mode == "keep")
seen["left"] = {
    "context": SparkContext._active_spark_context is not None,
    "session": SparkSession._instantiatedSession is not None,
    "active": SparkSession._activeSession is not None,
    "gateway": SparkContext._gateway is not None,
}
second = OwnedSession(start)
try:
    again = second.get()
    seen["pids"].append(jvm_archive.gateway_process().pid)
    seen["second"] = job(again)
    seen["fresh"] = again.sparkContext is not spark.sparkContext
    seen["active_is_second"] = SparkSession.getActiveSession() is again
except Exception as exc:
    seen["error"] = f"{type(exc).__name__}: {exc}"[:500]
second.close()
if users is not None:
    users.stop()
    end_local_driver()
seen["after"] = SparkContext._active_spark_context is not None
seen["java_left"] = [p.pid for p in psutil.Process().children(recursive=True)]
print(json.dumps(seen))
"""


@pytest.mark.spark
@pytest.mark.parametrize("close", ["hurry", "keep"])
def test_a_new_session_after_one_closed_starts_its_own_jvm(close: str) -> None:
    """A session closed in a hurry (a stopped run: its JVM ended without its context being
    stopped) or as usual leaves nothing of itself in PySpark's process state: a new session in
    the same process (Dagster's run worker or code server, an Airflow worker's next task)
    launches a JVM of its own and runs a job on it, instead of being handed the context or
    session whose JVM is gone; and its own close leaves nothing running."""
    seen = script_in_fresh_jvm(_REUSE_GUEST, close)
    assert "error" not in seen, seen
    assert seen["first"] == seen["second"] == [10, 45]
    assert seen["left"] == dict.fromkeys(("context", "session", "active", "gateway"), False)
    first, second = seen["pids"]
    assert first != second and seen["fresh"] is True
    assert seen["active_is_second"] is True
    assert seen["after"] is False and seen["java_left"] == []


@pytest.mark.spark
def test_a_session_closed_in_a_hurry_leaves_the_user_s_session_as_it_was() -> None:
    """Closed in a hurry over a session the user built, an owned session neither ends its JVM
    nor forgets it: the next one gets the user's session, on the same JVM, and runs a job."""
    seen = script_in_fresh_jvm(_REUSE_GUEST, "users")
    assert "error" not in seen, seen
    assert seen["first"] == seen["second"] == [10, 45]
    assert seen["left"] == dict.fromkeys(("context", "session", "active", "gateway"), True)
    first, second = seen["pids"]
    assert first == second and seen["fresh"] is False
    assert seen["active_is_second"] is True
    assert seen["after"] is False and seen["java_left"] == []
