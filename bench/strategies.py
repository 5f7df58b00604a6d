"""Every balancing strategy on every scenario in the simulator: one table, plus a size sweep.

Run: ``uv run --frozen python bench/strategies.py [--partitions 32] [--owners 4] [--seed 0]
[--sweep]``. Deterministic (seeded simulated clock): the figures are the same on any machine.
What it compares: time to balanced after the last disturbance, partitions moved, CAS conflicts,
storage calls made by balancing, partition-seconds unowned, and moments with two owners of one
partition (must be 0). ``--sweep`` runs ``scale_out`` for P in {1, 4, 32, 256, 1024} x K in
{1, 2, 4, 16, 64} per strategy and prints time to balanced and storage calls.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from dagster_eventhub_ingest.ops.balancing import STRATEGIES
from dagster_eventhub_ingest.ops.balancing.simulation import SCENARIOS, SimConfig, simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import add_json_flag, report


def _fmt(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def table(partitions: int, owners: int, seed: int) -> dict[str, dict[str, Any]]:
    """Print strategy x scenario metrics for one size."""
    print(f"# P={partitions} K={owners} seed={seed} (interval 10 s, expiry 30 s, reads 2 s)")
    header = (
        f"{'strategy':<11}{'scenario':<21}{'balanced_s':>11}{'stable_s':>10}{'moves':>7}"
        f"{'cas_conf':>9}{'ops':>7}{'unowned_ps':>11}{'two_owners':>11}{'fenced':>8}"
    )
    print(header)
    print("-" * len(header))
    out: dict[str, dict[str, Any]] = {}
    for strategy in STRATEGIES:
        for scenario in SCENARIOS:
            r = simulate(SimConfig(strategy, partitions, owners, scenario, seed=seed))
            out[f"{strategy} {scenario}"] = {
                "balanced_s": r.time_to_balanced,
                "stable_s": r.time_to_stable,
                "moves": r.moves,
                "cas_conflicts": r.cas_conflicts,
                "storage_ops": r.storage_ops,
                "unowned_partition_seconds": round(r.unowned_partition_seconds, 1),
                "two_owner_moments": r.double_owner_moments,
                "fenced_writes": r.fenced_writes,
            }
            print(
                f"{strategy:<11}{scenario:<21}{_fmt(r.time_to_balanced):>11}"
                f"{_fmt(r.time_to_stable):>10}{r.moves:>7}{r.cas_conflicts:>9}{r.storage_ops:>7}"
                f"{r.unowned_partition_seconds:>11.0f}{r.double_owner_moments:>11}"
                f"{r.fenced_writes:>8}"
            )
    return out


def sweep(seed: int, max_cells: int) -> dict[str, list[Any]]:
    """Print scale_out time to balanced / storage calls over the size grid."""
    sizes = [(p, k) for p in (1, 4, 32, 256, 1024) for k in (1, 2, 4, 16, 64)][:max_cells]
    print(f"\n# scale_out sweep: time_to_balanced_s/storage_ops (seed={seed})")
    print(f"{'strategy':<11}" + "".join(f"{f'P{p}/K{k}':>16}" for p, k in sizes))
    out: dict[str, list[Any]] = {}
    for strategy in STRATEGIES:
        cells = []
        for p, k in sizes:
            r = simulate(SimConfig(strategy, p, k, "scale_out", seed=seed))
            cells.append(f"{_fmt(r.time_to_balanced)}/{r.storage_ops}")
            out.setdefault(strategy, []).append(
                {"P": p, "K": k, "balanced_s": r.time_to_balanced, "storage_ops": r.storage_ops}
            )
        print(f"{strategy:<11}" + "".join(f"{c:>16}" for c in cells), flush=True)
    return out


def main() -> None:
    """Parse arguments and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--owners", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweep", action="store_true", help="also run the P x K size grid")
    parser.add_argument("--max-cells", type=int, default=25)
    add_json_flag(parser)
    args = parser.parse_args()
    with report("strategies.py", args.json) as rep:
        start = time.perf_counter()
        rep.add("scenarios", table(args.partitions, args.owners, args.seed))
        if args.sweep:
            rep.add("scale_out sweep", sweep(args.seed, args.max_cells))
        print(f"\n(bench wall time {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
