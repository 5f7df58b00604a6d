"""Partition balancing: strategies (pure decisions), owner liveness and the claim cycle.

Public API (stable; the ingestion run calls it)::

    strategy = get_strategy("balanced")            # ConfigurationError lists valid names
    held = claim_cycle(store, owner_id, strategy, targets=pids,
                       expiry=timedelta(seconds=60), is_owner_dead=check)
    leave(store, owner_id, held)                   # graceful exit

See ``docs/balancing.md`` for the strategies, the batch-run rule and the simulator.
"""

from __future__ import annotations

from dagster_eventhub_ingest.ops.balancing.base import BalanceView, BalancingStrategy, Claim
from dagster_eventhub_ingest.ops.balancing.cycle import (
    CyclePlan,
    build_view,
    claim_cycle,
    execute_claim,
    finish_cycle,
    join,
    leave,
    plan_claims,
)
from dagster_eventhub_ingest.ops.balancing.liveness import (
    DeathCheck,
    Heartbeat,
    delete_heartbeat,
    list_heartbeats,
    write_heartbeat,
)
from dagster_eventhub_ingest.ops.balancing.strategies import (
    STRATEGIES,
    get_strategy,
    jump_consistent_hash,
)

__all__ = [
    "STRATEGIES",
    "BalanceView",
    "BalancingStrategy",
    "Claim",
    "CyclePlan",
    "DeathCheck",
    "Heartbeat",
    "build_view",
    "claim_cycle",
    "delete_heartbeat",
    "execute_claim",
    "finish_cycle",
    "get_strategy",
    "join",
    "jump_consistent_hash",
    "leave",
    "list_heartbeats",
    "plan_claims",
    "write_heartbeat",
]
