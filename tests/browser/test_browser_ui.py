"""A backfill launched from the Dagster UI in a real browser, against `dagster dev`.

Playwright drives Debian's Chromium (``/usr/bin/chromium``, installed by
scripts/tiers/browser.sh; Playwright's own browser download is never used) against `dagster dev`
serving the project's ``defs.yaml`` on the local emulators (Azurite, the Event Hubs emulator).
It opens the asset, launches a backfill of every partition, waits for it, then checks that every
event landed once and that the UI shows each partition materialized with its metadata; then a
backfill of two partitions while events keep arriving. Screenshots go to ``$EHINGEST_ARTIFACTS``
(or a temp dir), printed at the start.

Run by ``scripts/tiers/browser.sh`` (marker ``browser``, excluded from the main pytest run).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from tests.support.fixtures.dagster import dagster_dev, defs_yaml_env

pytestmark = [pytest.mark.browser, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("EHINGEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ASSET = "eventhub_events"
SENT = {"0": 120, "1": 80, "2": 60, "3": 40}


@pytest.fixture(scope="module")
def artifacts() -> Path:
    path = Path(os.environ.get("EHINGEST_ARTIFACTS") or tempfile.mkdtemp(prefix="ehingest-ui-"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {path}", flush=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/tiers/browser.sh installs Debian's chromium")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _sink_rows(path: Path) -> list[tuple[str, int]]:
    import pyarrow.dataset as ds

    if not path.exists():
        return []
    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=["partition", "sequenceNumber"]
    )
    return list(
        zip(
            table.column("partition").to_pylist(),
            table.column("sequenceNumber").to_pylist(),
            strict=True,
        )
    )


def _wait_backfill(home: Path, backfill_id: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            backfill = instance.get_backfill(backfill_id)
            assert backfill is not None
            if backfill.status.value not in ("REQUESTED", "CANCELING"):
                return backfill
        time.sleep(2)
    raise AssertionError(f"backfill {backfill_id} not finished after {timeout}s")


def _backfill_ids(home: Path) -> list[str]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [b.backfill_id for b in instance.get_backfills()]


def _materialize_button(page: Any) -> Any:
    return page.locator("button", has_text=re.compile(r"^Materialize")).first


def _dismiss_community_modal(page: Any) -> None:
    """`dagster dev` greets a new browser with a 'Join the Dagster community' modal: Skip it."""
    skip = page.get_by_role("button", name="Skip", exact=True)
    with contextlib.suppress(Exception):
        skip.wait_for(timeout=15_000)
        skip.click()


def _launch_backfill(page: Any, keep: list[str] | None, shot: Callable[[str], None]) -> None:
    """On the asset page: Materialize... -> (keep only some partitions) -> Launch backfill."""
    _materialize_button(page).click()
    dialog = page.get_by_role("dialog").first
    dialog.wait_for(timeout=30_000)
    # The dialog may open before the partitions loaded (then on an empty Custom selection).
    dialog.get_by_role("button", name="All", exact=True).click()
    dialog.get_by_text(f"{len(SENT)} partitions").first.wait_for(timeout=30_000)
    if keep is not None:
        dialog.get_by_role("button", name="Custom", exact=True).click()
        for pid in SENT:
            if pid not in keep:
                tag = dialog.locator(".BaseTag", has=page.locator(f"[title='{pid}']")).first
                tag.get_by_role("img", name="close").click()
        dialog.get_by_text(f"{len(keep)} partitions").first.wait_for(timeout=10_000)
    shot("launch-dialog")
    dialog.get_by_role("button", name="Launch backfill").click()


@pytest.mark.timeout(1500)  # two Spark-backed backfills on a busy 2-core machine
def test_ui_backfill_lands_every_event_once_and_shows_every_partition(
    make_eventhub: Callable[..., Any],
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
    browser: Any,
    artifacts: Path,
) -> None:
    hub = make_eventhub(partitions=4)
    for pid, n in SENT.items():
        hub.send(pid, [f"p{pid}-e{i}" for i in range(n)])
    home = tmp_path / "dagster_home"
    sink = tmp_path / "sink"
    env = defs_yaml_env(home, hub, azurite_connection_string, container_name, sink)
    step = [0]

    with dagster_dev(env, artifacts / "dagster-dev.log") as dev:
        url = dev.url
        page = browser.new_page(viewport={"width": 1400, "height": 1000})

        def shot(name: str) -> None:
            step[0] += 1
            page.screenshot(path=str(artifacts / f"{step[0]:02d}-{name}.png"), full_page=True)

        try:
            _scenario(page, url, home, sink, hub, shot)
        except BaseException:
            shot("failure")
            raise
        finally:
            page.close()


def _scenario(
    page: Any, url: str, home: Path, sink: Path, hub: Any, shot: Callable[[str], None]
) -> None:
    """Two UI backfills (all partitions; then two while events arrive) and what they leave."""
    page.goto(f"{url}/assets/{ASSET}", wait_until="domcontentloaded")
    _materialize_button(page).wait_for(timeout=120_000)
    _dismiss_community_modal(page)
    shot("asset")

    # 1. A backfill of every partition, launched from the UI.
    _launch_backfill(page, None, shot)
    deadline = time.monotonic() + 60
    while not _backfill_ids(home) and time.monotonic() < deadline:
        time.sleep(1)
    (first,) = _backfill_ids(home)
    backfill = _wait_backfill(home, first, timeout=600)
    page.goto(f"{url}/runs/b/{first}", wait_until="domcontentloaded")
    page.wait_for_timeout(3000)
    shot("backfill-all")
    assert backfill.status.value == "COMPLETED_SUCCESS", backfill
    rows = _sink_rows(sink)
    assert len(rows) == len(set(rows)) == sum(SENT.values())  # each event once
    assert {p: sum(1 for r in rows if r[0] == p) for p in SENT} == SENT

    page.goto(f"{url}/assets/{ASSET}?view=partitions", wait_until="domcontentloaded")
    page.get_by_text("Materialized (4)").first.wait_for(timeout=60_000)
    shot("partitions-all-materialized")
    # Each partition's page shows its batch metadata with the standard keys.
    for pid in SENT:
        page.goto(
            f"{url}/assets/{ASSET}?view=partitions&partition={pid}",
            wait_until="domcontentloaded",
        )
        page.get_by_text("dagster/partition_row_count").first.wait_for(timeout=60_000)
        body = page.inner_text("body")
        assert "dagster/uri" in body and "output_location" not in body
        assert re.search(rf"dagster/row_count\s*{SENT[pid]}\b", body), pid  # the batch
        assert "eventhub/sequence_range" in body and "lag_events" not in body
        assert re.search(rf"dagster/partition_row_count\s*{SENT[pid]}\b", body), pid
    shot("partition-metadata")

    # 2. A backfill of two partitions while events keep arriving.
    stop = threading.Event()
    extra: dict[str, int] = {"0": 0, "1": 0, "2": 0, "3": 0}

    def produce() -> None:
        while not stop.is_set():
            for pid in extra:
                hub.send(pid, [f"late-p{pid}-{extra[pid]}"])
                extra[pid] += 1
            time.sleep(0.2)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        page.goto(f"{url}/assets/{ASSET}", wait_until="domcontentloaded")
        _materialize_button(page).wait_for(timeout=60_000)
        _launch_backfill(page, ["0", "1"], shot)
        deadline = time.monotonic() + 60
        while len(_backfill_ids(home)) < 2 and time.monotonic() < deadline:
            time.sleep(1)
        second = next(b for b in _backfill_ids(home) if b != first)
        backfill = _wait_backfill(home, second, timeout=600)
    finally:
        stop.set()
        producer.join(10)
    page.goto(f"{url}/runs/b/{second}", wait_until="domcontentloaded")
    page.wait_for_timeout(3000)
    shot("backfill-two")
    assert backfill.status.value == "COMPLETED_SUCCESS", backfill
    rows = _sink_rows(sink)
    assert len(rows) == len(set(rows))  # still every event once
    per = {p: sum(1 for r in rows if r[0] == p) for p in SENT}
    assert per["0"] > SENT["0"] and per["1"] > SENT["1"]  # late events of 0 and 1 landed
    assert per["2"] == SENT["2"] and per["3"] == SENT["3"]  # 2 and 3 were not asked for
    with dg.DagsterInstance.from_config(str(home)) as instance:
        status = instance.get_materialized_partitions(dg.AssetKey(ASSET))
    assert status == set(SENT)
    page.goto(f"{url}/assets/{ASSET}", wait_until="domcontentloaded")
    page.wait_for_timeout(4000)
    # Columns as declared (the UI lower-cases them when the definition carries a schema too).
    page.get_by_text("sequenceNumber", exact=True).first.wait_for(timeout=60_000)
    assert "sequencenumber" not in page.inner_text("body")
    shot("overview-after")
    page.get_by_text("Metadata", exact=True).first.scroll_into_view_if_needed()
    shot("overview-metadata")

    # The asset-level summary of every partition: the last run's observation (no partition),
    # with the totals and one row per partition naming its last batch.
    page.goto(f"{url}/assets/{ASSET}?view=events", wait_until="domcontentloaded")
    page.get_by_text("all 4 partitions:").first.wait_for(timeout=60_000)
    shot("events-summary")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_observations(dg.AssetKey(ASSET), limit=1).records
    (record,) = records
    observation = record.asset_observation
    assert observation is not None and observation.partition is None
    md = observation.metadata
    # 2 and 3 were left out of the second backfill while events arrived: behind, as ids.
    behind = md["eventhub/partition_ids_behind"].value
    assert behind.startswith("partition ids ") and "2" in behind and "3" in behind, behind
    assert md["eventhub/summary"].value.startswith("all 4 partitions:")
    table = md["eventhub/partitions"].value
    assert all(f"| {pid} |" in table for pid in SENT), table
    page.goto(f"{url}/assets/{ASSET}?view=checks", wait_until="domcontentloaded")
    page.wait_for_timeout(4000)
    shot("checks-summary")
