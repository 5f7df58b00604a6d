"""The operator's run options are checked when the DAG file is parsed, with the CLI's message.

``options`` is a templated field: a value holding a Jinja template is checked once rendered, in
``execute``; its key is checked at parse time all the same.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.errors import ConfigurationError
from tests.airflow.conftest import connection_env

pytestmark = [pytest.mark.airflow]

VALID_KEYS = (
    "valid keys: strategy, strategy_options, max_events_per_partition, max_events_per_cycle, "
    "lease_expiry_seconds, on_data_loss, on_checkpoint_ahead, receive_timeout_seconds, "
    "prefetch, max_readers_per_partition, run_timeout_seconds, join_grace_seconds, "
    "report_lag_seconds, read_progress_seconds"
)
UNKNOWN_KEY = f"options.max_events: unknown key; did you mean 'max_events_per_cycle'? {VALID_KEYS}"

BAD_OPTIONS = [
    ({"max_events": 7}, UNKNOWN_KEY),
    (
        {"max_events_per_partition": 0},
        "options.max_events_per_partition: 0 must be an integer >= 1",
    ),
    (
        {"strategy": "fastest"},
        "options.strategy: 'fastest' is not valid; valid: greedy, balanced, eph, equal, "
        "jump_hash, delay_race",
    ),
    ({"prefetch": "300"}, "options.prefetch: '300' must be an integer"),
    # A templated value is rendered later, but an unknown key is wrong whatever it renders to.
    ({"max_events": "{{ params.n }}"}, UNKNOWN_KEY),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_options_fail_at_construction(options: dict[str, Any], message: str) -> None:
    from dagster_eventhub_ingest.airflow_provider.operators import EventHubIngestOperator

    with pytest.raises(ConfigurationError) as err:
        EventHubIngestOperator(task_id="ingest", options=options)
    assert str(err.value) == message


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_options_fail_in_partial(options: dict[str, Any], message: str) -> None:
    """K mapped copies (``partial().expand()``) are built only when they run: checked here."""
    from dagster_eventhub_ingest.airflow_provider.operators import EventHubIngestOperator

    with pytest.raises(ConfigurationError) as err:
        EventHubIngestOperator.partial(task_id="ingest", options=options)
    assert str(err.value) == message


def test_the_message_is_the_one_execute_gives() -> None:
    from dagster_eventhub_ingest.airflow_provider._connections import ingest_settings

    with pytest.raises(ConfigurationError) as err:
        ingest_settings(None, None, None, {"max_events": 7})  # type: ignore[arg-type]
    assert str(err.value) == UNKNOWN_KEY


def test_a_dag_file_with_a_bad_option_fails_to_parse(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "bad_options.py").write_text(
        textwrap.dedent(
            """
            from datetime import datetime
            from airflow.sdk import DAG
            from dagster_eventhub_ingest.airflow_provider.operators import EventHubIngestOperator

            with DAG("bad_options", schedule=None, start_date=datetime(2026, 1, 1)):
                EventHubIngestOperator.partial(
                    task_id="ingest", options={"max_events": 7}
                ).expand(copy_index=[0, 1])
            """
        )
    )
    bag = DagBag(dag_folder=str(tmp_path))
    assert not bag.dags
    (error,) = bag.import_errors.values()
    assert (
        error.rstrip().splitlines()[-1]
        == f"dagster_eventhub_ingest.resources.errors.ConfigurationError: {UNKNOWN_KEY}"
    )


def test_templated_values_are_checked_once_rendered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from dagster_eventhub_ingest.airflow_provider.operators import EventHubIngestOperator

    options = {
        "strategy": "{{ params.strategy }}",
        "strategy_options": {"note": "{{ params.note }}"},
        "prefetch": 10,
    }
    op = EventHubIngestOperator(task_id="ingest", options=options)  # nothing to check yet
    assert op.options == options

    eh = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=S3CRET"
    monkeypatch.setenv(*connection_env("eventhub_default", password=eh, schema="telemetry"))
    monkeypatch.setenv(
        *connection_env(
            "eventhub_store_default",
            password="UseDevelopmentStorage=true",
            extra={"container": "leases"},
        )
    )
    monkeypatch.setenv(*connection_env("eventhub_sink_default", extra={"path": str(tmp_path)}))
    op.options = op.render_template(op.options, {"params": {"strategy": "fastest", "note": "n"}})
    with pytest.raises(AirflowFailException) as err:
        op.execute({"ti": None})
    assert str(err.value) == (
        "ConfigurationError: options.strategy: 'fastest' is not valid; valid: greedy, "
        "balanced, eph, equal, jump_hash, delay_race"
    )
