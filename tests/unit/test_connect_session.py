"""Which Spark Connect server session a run attaches to (pure logic; the real server, where
runs share a session and one the server closed is replaced, is in the ``cluster`` tier)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.spark.code_shipping import (
    SHIP_CODE_CONF,
    build_code_zip,
    code_identity,
)
from dagster_eventhub_ingest.resources.spark.connect_session import (
    GENERATIONS,
    SHARE_SESSION_CONF,
    SHARED_SESSION_PINS,
    shared_session_url,
)

NOW = datetime(2026, 11, 28, 8, 30, tzinfo=timezone.utc)
SETTINGS = {"spark.sql.shuffle.partitions": "8", "spark.app.name": "ehingest"}
CODE = "dagster_eventhub_ingest-0.1.0-0123456789ab.zip"


def _id(url: str | None) -> str:
    assert url is not None
    return url.rsplit(";session_id=", 1)[1]


def test_runs_of_the_same_code_and_settings_in_one_hour_get_one_session() -> None:
    url = shared_session_url("sc://spark.example:15002", SETTINGS, CODE, NOW)
    assert url is not None and url.startswith("sc://spark.example:15002/;session_id=")
    uuid.UUID(_id(url), version=4)  # what the client and the server accept
    later = NOW + timedelta(minutes=29)
    reordered = dict(reversed(list(SETTINGS.items())))
    assert shared_session_url("sc://spark.example:15002", reordered, CODE, later) == url
    # A trailing slash names the same server.
    assert _id(shared_session_url("sc://spark.example:15002/", SETTINGS, CODE, NOW)) == _id(url)


@pytest.mark.parametrize(
    ("remote", "settings", "code", "now"),
    [
        ("sc://other.example:15002", SETTINGS, CODE, NOW),
        ("sc://spark.example:15002/;user_id=someone", SETTINGS, CODE, NOW),
        ("sc://spark.example:15002", {**SETTINGS, "spark.sql.shuffle.partitions": "4"}, CODE, NOW),
        ("sc://spark.example:15002", {**SETTINGS, "spark.x": "1"}, CODE, NOW),
        ("sc://spark.example:15002", SETTINGS, CODE.replace("0123", "9999"), NOW),
        ("sc://spark.example:15002", SETTINGS, CODE, NOW + timedelta(minutes=30)),
    ],
    ids=["server", "user", "a setting's value", "one more setting", "code", "the next hour"],
)
def test_anything_that_differs_gives_another_session(
    remote: str, settings: dict[str, str], code: str, now: datetime
) -> None:
    base = shared_session_url("sc://spark.example:15002", SETTINGS, CODE, NOW)
    assert _id(shared_session_url(remote, settings, code, now)) != _id(base)


def test_each_generation_of_an_hour_is_another_session() -> None:
    ids = {
        _id(shared_session_url("sc://h:1", SETTINGS, CODE, NOW, generation))
        for generation in range(GENERATIONS)
    }
    assert len(ids) == GENERATIONS
    assert _id(shared_session_url("sc://h:1", SETTINGS, CODE, NOW)) in ids  # generation 0


def test_the_token_does_not_name_the_session_and_parameters_are_kept() -> None:
    a = shared_session_url("sc://h:15002/;token=first;user_id=u", SETTINGS, CODE, NOW)
    b = shared_session_url("sc://h:15002/;token=second;user_id=u", SETTINGS, CODE, NOW)
    assert a is not None and a.startswith("sc://h:15002/;token=first;user_id=u;session_id=")
    assert _id(a) == _id(b)
    trailing = shared_session_url("sc://h:15002/;token=first;user_id=u;", SETTINGS, CODE, NOW)
    assert trailing == a  # no empty parameter before the id
    assert shared_session_url("sc://h:15002/;", SETTINGS, CODE, NOW) == shared_session_url(
        "sc://h:15002", SETTINGS, CODE, NOW
    )


def test_the_hour_is_utc_whatever_the_clock_zone() -> None:
    elsewhere = NOW.astimezone(timezone(timedelta(hours=-5)))
    assert shared_session_url("sc://h:1", SETTINGS, CODE, elsewhere) == shared_session_url(
        "sc://h:1", SETTINGS, CODE, NOW
    )


@pytest.mark.parametrize(
    ("remote", "settings"),
    [
        ("sc://h:1", {**SETTINGS, SHARE_SESSION_CONF: "false"}),
        ("sc://h:1", {**SETTINGS, SHARE_SESSION_CONF: " FALSE "}),
        ("sc://h:1/;session_id=" + str(uuid.uuid4()), SETTINGS),
        *[("sc://h:1", {**SETTINGS, key: "static"}) for key in SHARED_SESSION_PINS],
    ],
    ids=["switched off", "switched off, spelled loosely", "the user's own session", "a pin"],
)
def test_no_shared_session(remote: str, settings: dict[str, str]) -> None:
    assert shared_session_url(remote, settings, CODE, NOW) is None


def test_a_pin_given_its_own_value_still_shares() -> None:
    assert shared_session_url("sc://h:1", {**SETTINGS, **SHARED_SESSION_PINS}, CODE, NOW)
    assert shared_session_url("sc://h:1", {**SETTINGS, SHARE_SESSION_CONF: "true"}, CODE, NOW)


def test_a_bad_switch_is_named_with_its_valid_values() -> None:
    expected = r"spark\.ehingest\.shareSession: 'yes'.*true.*false"
    with pytest.raises(ConfigurationError, match=expected):
        shared_session_url("sc://h:1", {SHARE_SESSION_CONF: "yes"}, CODE, NOW)


def test_the_code_is_the_shipped_zip_or_the_installed_version() -> None:
    assert code_identity({}) == build_code_zip().name
    assert code_identity({SHIP_CODE_CONF: "true"}) == build_code_zip().name
    installed = code_identity({SHIP_CODE_CONF: "false"})
    assert installed.startswith("installed dagster-eventhub-ingest ")
    with pytest.raises(ConfigurationError, match=r"spark\.ehingest\.shipCode: 'maybe'"):
        code_identity({SHIP_CODE_CONF: "maybe"})
