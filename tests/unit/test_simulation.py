"""The simulator: deterministic, metrics that can fail, scenarios, the CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_eventhub_ingest.cli.main import main
from dagster_eventhub_ingest.ops.balancing import STRATEGIES, plan_claims
from dagster_eventhub_ingest.ops.balancing.simulation import SCENARIOS, SimConfig, simulate
from dagster_eventhub_ingest.resources.errors import ConfigurationError

FAIR = ("greedy", "balanced", "eph", "equal")


def test_same_seed_same_numbers_other_seed_other_numbers() -> None:
    config = SimConfig("greedy", 16, 3, "crash", seed=5)
    assert simulate(config).to_json() == simulate(config).to_json()
    others = {simulate(dataclasses.replace(config, seed=s)).to_json() for s in range(6, 10)}
    assert len(others) > 1


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_never_two_owners_at_once(strategy: str, scenario: str) -> None:
    result = simulate(SimConfig(strategy, 12, 3, scenario, seed=1))
    assert result.double_owner_moments == 0


def _rule_breaking_planner(store, owner_id, strategy, **kw):
    """plan_claims, then claims proposed on a view that pretends nobody started reading."""
    plan = plan_claims(store, owner_id, strategy, **kw)
    blind = dataclasses.replace(plan.view, started=frozenset())
    plan.claims = strategy.choose(blind, kw["rng"])
    return plan


def test_double_owner_metric_catches_a_broken_batch_rule() -> None:
    config = SimConfig("greedy", 32, 4, "scale_out_staggered", seed=2, read_time=6.0)
    assert simulate(config).double_owner_moments == 0
    assert simulate(config, planner=_rule_breaking_planner).double_owner_moments > 0


def test_four_owners_started_together_balance_in_one_claim_phase() -> None:
    result = simulate(SimConfig("greedy", 32, 4, "scale_out", seed=0))
    assert result.time_to_balanced is not None and result.time_to_balanced < 10.0
    assert result.cas_conflicts == 0 and result.moves == 0
    assert sorted(result.final_counts.values()) == [8, 8, 8, 8]


def test_dead_detection_beats_waiting_for_expiry() -> None:
    slow = simulate(SimConfig("greedy", 32, 4, "crash", seed=3))
    fast = simulate(SimConfig("greedy", 32, 4, "crash", seed=3, dead_detection=1.0))
    assert fast.time_to_balanced is not None and slow.time_to_balanced is not None
    assert fast.time_to_balanced < slow.time_to_balanced
    assert fast.unowned_partition_seconds < slow.unowned_partition_seconds


def test_slow_owner_costs_the_delay_race_leases_and_not_the_expiry_strategies() -> None:
    race = simulate(SimConfig("delay_race", 32, 4, "slow_owner", seed=1))
    for name in FAIR:
        steady = simulate(SimConfig(name, 32, 4, "slow_owner", seed=1))
        assert steady.moves == 0, name
    assert race.moves > 0


def test_bad_config_is_named() -> None:
    with pytest.raises(ConfigurationError, match=r"scenario='meltdown'.*valid: scale_out"):
        SimConfig("greedy", 4, 2, "meltdown")
    with pytest.raises(ConfigurationError, match="partitions=0"):
        SimConfig("greedy", 0, 2, "crash")
    with pytest.raises(ConfigurationError, match="valid: greedy"):
        SimConfig("random", 4, 2, "crash")


@settings(max_examples=25, deadline=None)
@given(
    strategy=st.sampled_from(sorted(STRATEGIES)),
    scenario=st.sampled_from(SCENARIOS),
    partitions=st.sampled_from([1, 4, 32]),
    owners=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 10_000),
)
def test_property_never_two_owners(
    strategy: str, scenario: str, partitions: int, owners: int, seed: int
) -> None:
    result = simulate(SimConfig(strategy, partitions, owners, scenario, seed=seed))
    assert result.double_owner_moments == 0


@settings(max_examples=25, deadline=None)
@given(
    strategy=st.sampled_from(FAIR),
    scenario=st.sampled_from(["scale_out", "scale_out_staggered", "scale_in", "crash"]),
    partitions=st.sampled_from([1, 4, 32]),
    owners=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 10_000),
)
def test_property_fair_share_strategies_converge(
    strategy: str, scenario: str, partitions: int, owners: int, seed: int
) -> None:
    result = simulate(SimConfig(strategy, partitions, owners, scenario, seed=seed))
    assert result.time_to_balanced is not None, result
    assert result.time_to_stable is not None, result


@settings(max_examples=20, deadline=None)
@given(
    strategy=st.sampled_from([s for s in STRATEGIES if s != "delay_race"]),
    owners=st.sampled_from([1, 2, 4, 16]),
    seed=st.integers(0, 10_000),
)
def test_property_single_partition_does_not_hop(strategy: str, owners: int, seed: int) -> None:
    result = simulate(SimConfig(strategy, 1, owners, "single_partition", seed=seed))
    assert result.moves == 0
    assert sum(result.final_counts.values()) == 1


def test_cli_prints_the_metrics_as_json() -> None:
    run = CliRunner().invoke(
        main,
        [
            "simulate",
            "--strategy",
            "eph",
            "--partitions",
            "8",
            "--owners",
            "2",
            "--scenario",
            "crash",
            "--seed",
            "4",
            "--json",
        ],
    )
    assert run.exit_code == 0, run.output
    printed = json.loads(run.output)
    assert printed == json.loads(simulate(SimConfig("eph", 8, 2, "crash", seed=4)).to_json())


def test_cli_text_and_bad_scenario() -> None:
    ok = CliRunner().invoke(
        main, ["simulate", "--strategy", "greedy", "--scenario", "single_partition"]
    )
    assert ok.exit_code == 0 and "moments with two owners" in ok.output
    bad = CliRunner().invoke(main, ["simulate", "--strategy", "greedy", "--scenario", "boom"])
    assert bad.exit_code != 0 and "boom" in bad.output


@pytest.mark.xfail(
    strict=True,
    reason="known, not fixed: the steal rule (never take a partition a live peer has started "
    "reading) phase-locks when a joiner's cycles keep landing in the 2 s after the heavy "
    "owner's cycle, while it reads everything it holds; owner-02 stays at 2 of 32. The heavy "
    "owner would have to give partitions back over its quota. A random draw of "
    "test_property_fair_share_strategies_converge finds such a case in ~7 % of runs "
    "(greedy, eph and equal; staggered scale-out of 32 partitions over 2 or 4 owners).",
)
def test_staggered_scale_out_can_phase_lock_a_steal() -> None:
    result = simulate(SimConfig("greedy", 32, 4, "scale_out_staggered", seed=1341))
    assert result.time_to_balanced is not None, result.final_counts
