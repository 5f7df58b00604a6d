"""The Spark Connect server session a run works in: one per code, settings and hour, shared.

A Spark Connect server keys the Python workers it starts by the session they work for (its
artifact isolation: ``SPARK_JOB_ARTIFACT_UUID``), on its own host (where the ``eventhubs``
source is created and planned) and on every executor (where it reads). A run in a session of its
own therefore starts new Python daemons and workers on each of them, which import pyspark,
pyarrow and this package again: most of a small run's time (docs/benchmarks.md, "The
orchestrated run"), and processes that stay on the server after the session ends.

So runs attach to one server session when they ship the same code (the zip's name: version and
hash, :func:`~dagster_eventhub_ingest.resources.spark.code_shipping.code_identity`), give the same
settings, the same server and user, in the same UTC hour: its id is a hash of those
(``;session_id=`` in the URL). A run leaves it open when it ends; the server closes it once idle
for ``spark.connect.session.manager.defaultSessionTimeout`` (60 minutes by default), and the
hour in the id starts a new one at least that often. A session the server closed already
(its idle timeout is shorter than an hour, or someone released it) is refused by the server:
the run tries the hour's next one (a generation number in the id, up to
:data:`GENERATIONS`), and past those opens one of its own, as with
``spark.ehingest.shareSession=false``, which it releases when it ends.

Whatever uses the run's session shares it with those runs (Dagster: assets of yours that use
the same PySpark resource): state it keeps per session (temporary views, settings changed at
run time) is seen by concurrent runs; ``spark.ehingest.shareSession=false`` keeps every run to
a session of its own. The run's own settings that Spark reads per session are fixed in it
(:data:`SHARED_SESSION_PINS`) instead of being set and restored around a write, which
concurrent runs would interleave.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, cast

from dagster_eventhub_ingest.resources.spark.code_shipping import spark_switch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "GENERATIONS",
    "SESSION_CLOSED",
    "SHARED_SESSION_PINS",
    "SHARE_SESSION_CONF",
    "connect_session",
    "shared_session_url",
]

logger = logging.getLogger(__name__)

#: Spark setting: ``false`` gives every run a server session of its own (released at its end).
SHARE_SESSION_CONF = "spark.ehingest.shareSession"
#: Session settings a shared session holds from its start: the Spark formats' table sinks
#: replace a batch's partitions only (the path sinks say so per write).
SHARED_SESSION_PINS: dict[str, str] = {"spark.sql.sources.partitionOverwriteMode": "dynamic"}
#: Shared sessions a run tries in an hour when the server closed the ones before.
GENERATIONS = 3
#: The server's error condition for a session it closed (its id cannot be used again).
SESSION_CLOSED = "INVALID_HANDLE.SESSION_CLOSED"
#: Connection string parameters that do not change which session a run may share.
_NOT_IN_KEY = ("token", "session_id")


def _share(settings: Mapping[str, str]) -> bool:
    return spark_switch(
        SHARE_SESSION_CONF,
        settings.get(SHARE_SESSION_CONF),
        on="runs of the same code and settings share a Spark Connect session",
        off="each run opens its own",
    )


def _split(remote: str) -> tuple[str, dict[str, str]]:
    """``sc://host:port`` and the parameters after ``/;`` (``token``, ``user_id``, ...)."""
    base, _, tail = remote.partition("/;")
    params: dict[str, str] = {}
    for part in tail.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            params[key] = value
    return base.rstrip("/"), params


def shared_session_url(
    remote: str,
    settings: Mapping[str, str],
    code: str,
    now: datetime | None = None,
    generation: int = 0,
) -> str | None:
    """``remote`` with the shared session's id, or None when this run opens its own session.

    The id is a hash of the server, its parameters but the token, ``settings`` (which the
    session holds), ``code`` (what was shipped into it), the UTC hour of ``now`` and
    ``generation`` (the hour's next session, once the server closed one). None when
    ``spark.ehingest.shareSession`` is ``false``, when ``remote`` names a session already
    (``;session_id=``: the user's), or when ``settings`` give one of
    :data:`SHARED_SESSION_PINS` another value.

    Raises:
        ConfigurationError: ``spark.ehingest.shareSession`` is neither true nor false.
    """
    if not _share(settings):
        return None
    base, params = _split(remote)
    if "session_id" in params:
        return None
    if any(settings.get(k, v) != v for k, v in SHARED_SESSION_PINS.items()):
        return None
    hour = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H")
    key = json.dumps(
        {
            "server": base,
            "params": {k: v for k, v in sorted(params.items()) if k not in _NOT_IN_KEY},
            "settings": dict(sorted(settings.items())),
            "code": code,
            "hour": hour,
            "generation": generation,
        },
        sort_keys=True,
    )
    session = uuid.UUID(bytes=hashlib.sha256(key.encode()).digest()[:16], version=4)
    stem = remote.rstrip("/;")
    return f"{stem}{';' if '/;' in stem else '/;'}session_id={session}"


def connect_session(remote: str, settings: Mapping[str, str]) -> SparkSession:
    """A Spark Connect session on ``remote`` with ``settings`` (``getOrCreate``): the shared one
    (:func:`shared_session_url`), or one of the run's own.

    A session this process has already (a notebook's, a test's) is what ``getOrCreate``
    returns, with the settings applied, as before; it is not shared. The shared one is marked
    so that :meth:`SparkSession.stop` leaves it open on the server.
    """
    from dagster_eventhub_ingest.resources.spark.code_shipping import code_identity

    if _session_in_process():
        return _get_or_create(remote, settings)
    code = code_identity(settings)
    now = datetime.now(timezone.utc)
    for generation in range(GENERATIONS):
        url = shared_session_url(remote, settings, code, now, generation)
        if url is None:
            break
        spark = _attach(url, {**settings, **SHARED_SESSION_PINS})
        if spark is not None:
            return spark
    else:
        logger.info(
            "the shared Spark Connect sessions of this hour were closed on the server; this run "
            "opens its own"
        )
    return _get_or_create(remote, settings)


def _session_in_process() -> bool:
    """Whether this process has a Spark Connect session its ``getOrCreate`` would return (the
    thread's active one, or the process's default)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    try:
        ConnectSession.active()
    except PySparkRuntimeError:
        return False
    return True


def _get_or_create(remote: str, settings: Mapping[str, str]) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(remote)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _attach(url: str, settings: Mapping[str, str]) -> SparkSession | None:
    """The shared session at ``url`` with ``settings``; None when the server closed it."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from dagster_eventhub_ingest.resources.failures import error_condition

    try:
        spark = _get_or_create(url, settings)
    except Exception as exc:
        if error_condition(exc) != SESSION_CLOSED:
            raise
        # getOrCreate made it this process's session before the server refused its settings.
        refused = ConnectSession.getActiveSession()
        if refused is not None:
            refused.release_session_on_close = False
            refused.stop()
        logger.info(
            "the shared Spark Connect session %s was closed on the server", _session_of(url)
        )
        return None
    # stop() closes this client's channel and leaves the session to the server's idle timeout.
    cast("ConnectSession", spark).release_session_on_close = False
    logger.info("this run works in the shared Spark Connect session %s", _session_of(url))
    return spark


def _session_of(url: str) -> str:
    return url.rsplit("session_id=", 1)[-1]
