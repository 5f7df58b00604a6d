"""Shipping the code to a Spark Connect session: an artifact the session already holds is fine,
told by the server's error condition, never by its message (pure logic; the real server is in
the ``cluster`` tier)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dagster_eventhub_ingest.resources.spark.code_shipping import ship_code


def _connect(kind: str, condition: str | None, message: str) -> BaseException:
    """A Spark Connect client exception as the client builds it from a server's error details."""
    pytest.importorskip("grpc")
    from pyspark.errors.exceptions import connect

    return getattr(connect, kind)(message, errorClass=condition, messageParameters={})


class ConnectSession:
    """Stands in for ``pyspark.sql.connect.session.SparkSession``: ``addArtifacts`` raises
    ``error`` (or records the path)."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.conf = {"spark.ehingest.shipCode": "true"}
        self.added: list[str] = []

    def addArtifacts(self, path: str, *, pyfile: bool) -> None:
        assert pyfile
        if self.error is not None:
            raise self.error
        self.added.append(path)


ConnectSession.__module__ = "pyspark.sql.connect.session"  # how a Connect session is told apart

CASES: list[tuple[str, Callable[[], BaseException | None], bool]] = [
    ("added", lambda: None, True),
    (
        "ARTIFACT_ALREADY_EXISTS: the session holds it",
        lambda: _connect("SparkRuntimeException", "ARTIFACT_ALREADY_EXISTS", "[X] no words"),
        True,
    ),
    (
        "another condition whose message says 'already exists'",
        lambda: _connect("SparkRuntimeException", "SOMETHING_ELSE", "it already exists"),
        False,
    ),
    (
        "a server that cannot be reached",
        lambda: _connect("SparkConnectGrpcException", None, "duplicate; already exists"),
        False,
    ),
    ("an untyped error saying 'already exists'", lambda: RuntimeError("already exists"), False),
]


@pytest.mark.parametrize(("make", "shipped"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_artifact_the_session_holds_is_told_by_its_condition(
    make: Callable[[], BaseException | None], shipped: bool
) -> None:
    error = make()
    session = ConnectSession(error)
    if shipped:
        path = ship_code(session)  # type: ignore[arg-type]
        assert path is not None and path.is_file() and Path(path).suffix == ".zip"
        assert session.added == ([] if error is not None else [str(path)])
    else:
        with pytest.raises(type(error)):
            ship_code(session)  # type: ignore[arg-type]


class FailingOnce(ConnectSession):
    """The server's check that it holds the file and its move into place interleaved with
    another run adding the same zip: the first add fails, the second finds it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(None)
        self.first: BaseException | None = error

    def addArtifacts(self, path: str, *, pyfile: bool) -> None:
        error, self.first = self.first, None
        if error is not None:
            raise error
        super().addArtifacts(path, pyfile=pyfile)


FailingOnce.__module__ = ConnectSession.__module__


def test_an_add_that_fails_once_is_tried_again() -> None:
    session = FailingOnce(_connect("SparkConnectGrpcException", None, "FileAlreadyExists"))
    path = ship_code(session)  # type: ignore[arg-type]
    assert path is not None and session.added == [str(path)]


def test_a_new_session_is_shipped_to_even_when_it_reuses_a_freed_ones_id() -> None:
    reused = 0
    for _ in range(20):  # a long-lived process's runs, one session each
        first = ConnectSession(None)
        assert ship_code(first) is not None  # type: ignore[arg-type]
        assert ship_code(first) is None  # type: ignore[arg-type]  # once per session
        freed = id(first)
        del first
        session = ConnectSession(None)  # CPython hands out the freed address again
        reused += id(session) == freed
        path = ship_code(session)  # type: ignore[arg-type]
        assert path is not None and session.added == [str(path)]
    assert reused  # the case this is about happened
