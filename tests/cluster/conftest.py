"""Fixtures of the ``cluster`` tier: one standalone cluster and one Spark Connect server.

Started once for the whole tier (scripts/tiers/cluster.sh) and always stopped. The Connect
server boots in the background while the first standalone tests run.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dagster_eventhub_ingest.emulator.spark_cluster import (
    ConnectServer,
    executor_venv,
    standalone_cluster,
)


@dataclass
class Cluster:
    """The running cluster: its master URL, the Connect server on it, the executors' python."""

    master_url: str
    connect: ConnectServer
    executor_python: Path
    workdir: Path


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A master + one 2-core worker whose Python lacks this project, and a Connect server.

    Their logs and work folders (``workdir``) are removed once everything is stopped, unless a
    test of the session failed: then they stay for reading, and the path is printed."""
    python = executor_venv()
    workdir = Path(tempfile.mkdtemp(prefix="ehingest-cluster-"))
    with standalone_cluster(python, workdir) as master_url:
        server = ConnectServer(master_url, python, workdir)
        try:
            yield Cluster(master_url, server, python, workdir)
        finally:
            server.stop()
    if request.session.testsfailed:
        print(f"\nthe cluster's logs: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
