"""docs/dagster.yaml, the instance settings docs/dagster.md recommends for the schedule (and
bench/orchestrated.py's tick runs on), is loaded by a real Dagster instance as a user's
``$DAGSTER_HOME/dagster.yaml`` would be."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTANCE_YAML = ROOT / "docs" / "dagster.yaml"


def _dequeue_interval(home: Path) -> int:
    """The dequeue interval of the instance at ``home``, whose run coordinator is queued."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, dg.QueuedRunCoordinator), coordinator
        return coordinator.dequeue_interval_seconds


def test_the_recommended_instance_dequeues_every_second(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(INSTANCE_YAML, home / "dagster.yaml")
    assert _dequeue_interval(home) == 1
    # What the file changes: an instance without it waits Dagster's default between dequeues.
    bare = tmp_path / "bare"
    bare.mkdir()
    assert _dequeue_interval(bare) == 5


def test_the_docs_link_the_file_and_hold_no_copy_of_it() -> None:
    text = (ROOT / "docs" / "dagster.md").read_text(encoding="utf-8")
    assert "](dagster.yaml)" in text
    assert "run_coordinator:" not in text
