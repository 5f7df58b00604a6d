"""The JVM of a classic driver, launched by this package with an environment of its own.

pyspark launches its driver JVM (``spark-submit ... pyspark-shell``) with a copy of this
process's ``os.environ``: what the JVM and the Python processes it starts should see (a loopback
address, the interpreter executors run, the quiet log4j config, the worker site on
``PYTHONPATH``) could only be set by writing ``os.environ`` or by patching pyspark. This module
does what ``pyspark.java_gateway.launch_gateway`` does with an environment passed in instead:
the same command, the same connection-info handshake, the same py4j client; this process's
environment and pyspark's module globals are left as they are.

py4j asks every registered input converter about every argument of every call into the JVM, and
pyspark's NumPy array and scalar converters answer by importing ``pyspark.testing.utils``, which
imports pandas: 0.4 s of CPU and ~44 MB on the driver's first JVM call (``SparkConf()``), in a
process that never uses pandas. The gateway launched here asks them (:class:`_Converters`) only
about NumPy objects, importing nothing before: the same answers, since theirs is true only for
such an object. py4j's global list of converters is read, never changed; other gateways ask it as
before.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["GATEWAY_IMPORTS", "launch_gateway"]

#: The JVM classes pyspark's own launch imports into the gateway's view (every pyspark module
#: reaches them by short name through it).
GATEWAY_IMPORTS = (
    "org.apache.spark.SparkConf",
    "org.apache.spark.api.java.*",
    "org.apache.spark.api.python.*",
    "org.apache.spark.ml.python.*",
    "org.apache.spark.mllib.api.python.*",
    "org.apache.spark.resource.*",
    "org.apache.spark.sql.Encoders",
    "org.apache.spark.sql.OnSuccessCall",
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.classic.*",
    "org.apache.spark.sql.api.python.*",
    "org.apache.spark.sql.hive.*",
    "scala.Tuple2",
)
#: Seconds the JVM has to write its connection info before the launch gives up.
_START_TIMEOUT_SECONDS = 300.0


def launch_gateway(settings: Mapping[str, str], env: Mapping[str, str]) -> Any:
    """Start a driver JVM with Spark ``settings`` (as ``--conf``) and the environment ``env``
    (the whole of it: the caller builds it from ``os.environ``), and connect to it.

    Returns a py4j gateway as pyspark's own launch does (``.proc`` is the ``spark-submit``
    process, whose stdin ends the JVM when it closes), to hand to ``SparkContext(gateway=...)``.
    """
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.serializers import UTF8Deserializer, read_int

    command = [os.path.join(_find_spark_home(), "bin", "spark-submit")]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    submit_args = env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    if env.get("SPARK_TESTING"):
        submit_args = f"--conf spark.ui.enabled=false {submit_args}"
    command += shlex.split(submit_args)
    info_dir = tempfile.mkdtemp(prefix="ehingest-gateway-")
    try:
        info = os.path.join(info_dir, "connection-info")
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            env={**env, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": info},
            # The JVM ignores SIGINT (as pyspark's launch has it): Ctrl-C stops the driver's
            # Python, which then ends the JVM through its stdin.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while proc.poll() is None and not os.path.isfile(info):
            if time.monotonic() > deadline:
                proc.kill()
                break
            time.sleep(0.05)
        if not os.path.isfile(info):
            from pyspark.errors import PySparkRuntimeError

            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        with open(info, "rb") as f:
            port = read_int(f)
            secret = UTF8Deserializer().loads(f)
    finally:
        shutil.rmtree(info_dir, ignore_errors=True)
    gateway = _connect(port, secret, pinned=env.get("PYSPARK_PIN_THREAD", "true"))
    gateway.proc = proc
    return gateway


def _connect(port: int, secret: str, *, pinned: str) -> Any:
    from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
    from py4j.java_gateway import GatewayParameters, JavaGateway, java_import

    if pinned.lower() == "true":
        gateway: Any = ClientServer(
            java_parameters=JavaParameters(port=port, auth_token=secret, auto_convert=True),
            python_parameters=PythonParameters(port=0, eager_load=False),
        )
    else:
        gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auth_token=secret, auto_convert=True)
        )
    # Before any call: py4j's members read their client's converters when they are made.
    client = gateway._gateway_client
    client.converters = _Converters(client.converters)
    for name in GATEWAY_IMPORTS:
        java_import(gateway.jvm, name)
    return gateway


class _Converters(Sequence[Any]):
    """py4j's registered input converters, read live, as this gateway asks them: pyspark's NumPy
    converters only about NumPy objects (see the module docstring)."""

    def __init__(self, registered: list[Any]) -> None:
        self._registered = registered
        self._guarded: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._registered)

    def __getitem__(self, index: Any) -> Any:
        item = self._registered[index]
        return [self._guard(c) for c in item] if isinstance(index, slice) else self._guard(item)

    def __iter__(self) -> Iterator[Any]:
        for converter in self._registered:
            yield self._guard(converter)

    def _guard(self, converter: Any) -> Any:
        kind = _numpy_kind(converter)
        if kind is None:
            return converter
        guarded = self._guarded.get(id(converter))
        if guarded is None or guarded.converter is not converter:
            guarded = self._guarded[id(converter)] = _NumpyOnly(converter, kind)
        return guarded


def _numpy_kind(converter: Any) -> str | None:
    try:
        from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter
    except ImportError:  # a pyspark without them
        return None
    if type(converter) is NumpyArrayConverter:
        return "ndarray"
    if type(converter) is NumpyScalarConverter:
        return "generic"
    return None


class _NumpyOnly:
    """A NumPy converter that asks pyspark's only about an instance of ``numpy.<kind>``."""

    def __init__(self, converter: Any, kind: str) -> None:
        self.converter = converter
        self.kind = kind

    def can_convert(self, obj: Any) -> bool:
        # Not loaded, or still being imported on another thread (pyarrow's first import imports
        # NumPy, and the type is defined part-way through): nothing can be one of its objects.
        cls = getattr(sys.modules.get("numpy"), self.kind, None)
        return cls is not None and isinstance(obj, cls) and bool(self.converter.can_convert(obj))

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        return self.converter.convert(obj, gateway_client)
