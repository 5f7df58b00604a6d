"""A backfill launched from the Dagster UI in a real browser, against `dagster dev`.

Playwright drives Debian's Chromium (``/usr/bin/chromium``, installed by
scripts/tiers/browser.sh; Playwright's own browser download is never used) against `dagster dev`
serving the project's ``defs.yaml`` on the local emulators (Azurite, the Event Hubs emulator).
It opens the asset, launches a backfill of 100,000 events over every partition and records its
event log while it runs (the Spark start, per-partition counts, landed counts rising before the
step ends), then checks that every event landed once and what the UI says about it: the lag
check's status through GraphQL as the asset page reads it, each partition's metadata, the
asset-level summary, the resources' descriptions; then a backfill of two partitions while events
keep arriving. Screenshots go to ``$EHINGEST_ARTIFACTS`` (or a temp dir), printed at the start.

Run by ``scripts/tiers/browser.sh`` (marker ``browser``, excluded from the main pytest run).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from tests.support.fixtures.dagster import CHECKS_QUERY, dagster_dev, defs_yaml_env

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
#: 100,000 events, unevenly: more than one claim cycle (20,000 events per partition) each.
SENT = {"0": 30_000, "1": 27_000, "2": 23_000, "3": 20_000}
LANDED = re.compile(r"(\d+)/(\d+) events landed")


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


def _graphql(url: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    """The UI's own GraphQL endpoint of ``dagster dev``."""
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query, "variables": variables}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    assert not body.get("errors"), body["errors"]
    return body["data"]


def _lag_check_shown(url: str) -> dict[str, Any] | None:
    """The lag check's latest execution as the asset page shows it (None: "Not evaluated")."""
    data = _graphql(url, CHECKS_QUERY, {"key": {"path": [ASSET]}})
    checks = data["assetNodeOrError"]["assetChecksOrError"]["checks"]
    (lag,) = [c for c in checks if c["name"] == "lag_within_threshold"]
    return lag["executionForLatestMaterialization"]


def _record_event_log(
    home: Path, backfill_id: str, timeout: float
) -> tuple[str, list[tuple[float, str]], float]:
    """The backfill's run's log lines with their times, and when its step ended, read while it runs.

    Polls the run's event log every half second, as the UI's live log does, until the step ends.
    A line's time is when the event log stored it, from which on the UI shows it: a line stored
    before the step's end was visible while the step ran. (The time a poll first saw it would
    depend on how quickly polls run on a busy machine.)
    """
    deadline = time.monotonic() + timeout
    run_id = ""
    seen: dict[int, tuple[float, str]] = {}
    while time.monotonic() < deadline:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            if not run_id:
                runs = instance.get_runs(
                    dg.RunsFilter(tags={"dagster/backfill": backfill_id}), limit=1
                )
                run_id = runs[0].run_id if runs else ""
            events = instance.all_logs(run_id) if run_id else []
        for n, event in enumerate(events):
            if n not in seen and event.user_message:
                seen[n] = (event.timestamp, event.user_message)
        ended = [
            e.timestamp
            for e in events
            if e.dagster_event is not None
            and e.dagster_event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE")
        ]
        if ended:
            return run_id, sorted(seen.values()), ended[0]
        time.sleep(0.5)
    raise AssertionError(f"the backfill's step did not end within {timeout}s")


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
    total = sum(SENT.values())
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
            _scenario(page, url, home, sink, hub, shot, total)
        except BaseException:
            shot("failure")
            raise
        finally:
            page.close()


def _scenario(
    page: Any,
    url: str,
    home: Path,
    sink: Path,
    hub: Any,
    shot: Callable[[str], None],
    total: int,
) -> None:
    """Two UI backfills (all partitions; then two while events arrive) and what they leave."""
    page.goto(f"{url}/assets/{ASSET}", wait_until="domcontentloaded")
    _materialize_button(page).wait_for(timeout=120_000)
    _dismiss_community_modal(page)
    shot("asset")

    # 1. A backfill of every partition (100,000 events), launched from the UI; its event log
    # recorded while it runs.
    _launch_backfill(page, None, shot)
    deadline = time.monotonic() + 60
    while not _backfill_ids(home) and time.monotonic() < deadline:
        time.sleep(1)
    (first,) = _backfill_ids(home)
    run_id, lines, step_end = _record_event_log(home, first, timeout=900)
    page.goto(f"{url}/runs/{run_id}", wait_until="domcontentloaded")
    page.get_by_text("events landed").first.wait_for(timeout=60_000)
    shot("run-event-log")
    backfill = _wait_backfill(home, first, timeout=600)
    before_end = [text for at, text in lines if at < step_end]
    # The Spark start is said, with how long it took.
    assert any("starting the Spark session" in t for t in before_end), before_end[:20]
    assert any(re.search(r"Spark started in \d+\.\d s", t) for t in before_end), before_end
    # Landed counts of this run's share rise while the step runs, partition by partition.
    landed = [
        (int(m.group(1)), int(m.group(2)))
        for t in before_end
        if (m := LANDED.search(t)) and "this run's share" in t
    ]
    dones = [done for done, _ in landed]
    assert dones == sorted(dones) and dones[-1] == total, landed  # rising, to all of it
    assert any(0 < done < total for done in dones), landed  # a count between two cycles
    assert {of for _, of in landed} == {total}, landed  # the share: all four, 100,000
    assert any(re.search(r"partition 0 (read \d+/\d+, )?landed \d+/30000", t) for _, t in lines)
    page.goto(f"{url}/runs/b/{first}", wait_until="domcontentloaded")
    page.wait_for_timeout(3000)
    shot("backfill-all")
    assert backfill.status.value == "COMPLETED_SUCCESS", backfill
    rows = _sink_rows(sink)
    assert len(rows) == len(set(rows)) == sum(SENT.values())  # each event once
    assert {p: sum(1 for r in rows if r[0] == p) for p in SENT} == SENT

    # The lag check, as the asset page reads it: evaluated by the run, not "Not evaluated".
    shown = _lag_check_shown(url)
    assert shown is not None and shown["status"] == "SUCCEEDED", shown
    page.goto(f"{url}/assets/{ASSET}?view=checks", wait_until="domcontentloaded")
    page.get_by_text("lag_within_threshold").first.wait_for(timeout=60_000)
    page.wait_for_timeout(3000)
    shot("checks-after-backfill")
    assert "Not evaluated" not in page.inner_text("body").split("lag_within_threshold", 1)[1][:300]

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
        assert "dagster/row_count" in body, pid  # the batch's rows
        assert "eventhub/sequence_range" in body and "lag_events" not in body
        assert re.search(rf"dagster/partition_row_count\s*{SENT[pid]:,}", body) or re.search(
            rf"dagster/partition_row_count\s*{SENT[pid]}\b", body
        ), pid
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

    # Definitions read like documentation: the resource's description in plain text.
    page.goto(
        f"{url}/locations/eventhub_ingest/resources/{ASSET}_eventhub", wait_until="domcontentloaded"
    )
    page.get_by_text("consumer group whose checkpoints").first.wait_for(timeout=60_000)
    page.wait_for_timeout(2000)
    shot("resource-eventhub")
    body = page.inner_text("body")
    assert ":class:" not in body and "Example::" not in body and "``" not in body
