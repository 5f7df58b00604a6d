"""``ehingest simulate``: run one balancing strategy through one simulated scenario."""

from __future__ import annotations

import click

from dagster_eventhub_ingest.ops.balancing import STRATEGIES
from dagster_eventhub_ingest.ops.balancing.simulation import SCENARIOS, SimConfig, SimResult
from dagster_eventhub_ingest.ops.balancing.simulation import simulate as run_simulation

__all__ = ["simulate", "simulate_command"]

_METRICS = (
    ("time_to_balanced", "time to balanced (s after last disturbance)"),
    ("time_to_stable", "time to stable (s)"),
    ("moves", "partitions moved"),
    ("cas_conflicts", "CAS conflicts"),
    ("storage_ops", "storage operations (balancing)"),
    ("unowned_partition_seconds", "partition-seconds unowned"),
    ("double_owner_moments", "moments with two owners"),
    ("fenced_writes", "fenced intent/checkpoint writes"),
    ("simulated_seconds", "simulated seconds"),
)


def _render(result: SimResult) -> str:
    lines = [
        f"strategy={result.strategy} scenario={result.scenario} partitions={result.partitions} "
        f"owners={result.owners} seed={result.seed}"
    ]
    for key, label in _METRICS:
        value = getattr(result, key)
        lines.append(f"  {label:<45} {'never' if value is None else value}")
    lines.append(f"  {'final partitions per live owner':<45} {result.final_counts}")
    return "\n".join(lines)


@click.command("simulate")
@click.option(
    "--strategy", type=click.Choice(list(STRATEGIES)), required=True, help="Balancing strategy."
)
@click.option("--partitions", "-p", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--owners", "-k", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--scenario", type=click.Choice(list(SCENARIOS)), required=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same numbers.")
@click.option(
    "--dead-detection",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds after a crash until is_owner_dead() reports it (default: wait for expiry).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def simulate_command(
    strategy: str,
    partitions: int,
    owners: int,
    scenario: str,
    seed: int,
    dead_detection: float | None,
    as_json: bool,
) -> None:
    """Simulate STRATEGY on SCENARIO with P partitions and K owners; print the metrics."""
    config = SimConfig(
        strategy=strategy,
        partitions=partitions,
        owners=owners,
        scenario=scenario,
        seed=seed,
        dead_detection=dead_detection,
    )
    result = run_simulation(config)
    click.echo(result.to_json() if as_json else _render(result))


simulate = simulate_command
