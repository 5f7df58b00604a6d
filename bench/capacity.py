"""Capacity model: how many executor cores keep up with an Event Hub, and when the hub is the limit.

For an event size, a partition count and an Event Hubs tier with its units, it prints, for a
range of executor cores, what Spark reads and writes per second (calibrated on this project's
own runs), what the hub lets one consumer read (its egress), which of the two is the limit,
and how many cores keep up with the producers (the hub's ingress, or ``--rate``) when a run
starts every ``--interval`` seconds. docs/benchmarks.md ("Capacity") explains the model and
its calibration; the hub's limits are Microsoft's:

* Basic and Standard, per throughput unit (TU): ingress 1 MB/s or 1,000 events/s, egress 2 MB/s
  or 4,096 events/s, whichever comes first; "a single partition has a maximum scale of one
  throughput unit"; at most 40 TUs and 32 partitions per event hub
  (learn.microsoft.com/azure/event-hubs/event-hubs-scalability, .../event-hubs-features,
  .../compare-tiers).
* Premium, per processing unit (PU), and Dedicated, per capacity unit (CU): "no limits per PU /
  CU", throughput "depends on various factors such as resource allocation, number of
  partitions, storage" (.../compare-tiers); 100 partitions per event hub and 200 per PU on
  Premium, 1,024 per event hub on Dedicated. So the model needs a figure per unit:
  ``--egress-mb-per-unit`` (Premium's default, 10 MB/s egress and 5 MB/s ingress per PU, is the
  low end of the rule of thumb commonly quoted, 5-10 MB/s in and 10-20 MB/s out per PU; not a
  Microsoft figure: measure your namespace). Dedicated has no default.

Spark's side: events per second per executor core for the read and the write alone
(``read_write`` phase), measured at 1 and at 2 executor cores on ``local[K]`` and on a
standalone worker (bench/cluster_throughput.py ``--cores K``; ``--calibration FILE`` takes
such JSON documents instead of the figures recorded here), scaled to the event size by a CPU
cost per event that is part fixed and part per byte; plus each run's fixed cost (start,
claims, verify, checkpoints). A core reads one partition's range at a time, and a partition
has at most ``--readers`` readers (``max_readers_per_partition``), so more cores than
partitions x readers sit idle.

    uv run --frozen python bench/capacity.py --examples
    uv run --frozen python bench/capacity.py --partitions 32 --tier standard --units 20 --json
    uv run --frozen python bench/capacity.py --partitions 100 --tier premium --units 4 \\
        --event-bytes 2048 --rate 40000
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import add_json_flag, report

MB = 1_000_000
#: Per-unit limits by tier: (ingress MB/s, ingress events/s, egress MB/s, egress events/s),
#: None where the tier sets no such limit. Premium's MB/s are an assumption (module docstring).
TIERS: dict[str, tuple[float | None, float | None, float | None, float | None]] = {
    "basic": (1.0, 1000.0, 2.0, 4096.0),
    "standard": (1.0, 1000.0, 2.0, 4096.0),
    "premium": (5.0, None, 10.0, None),
    "dedicated": (None, None, None, None),
}
MAX_UNITS = {"basic": 40, "standard": 40, "premium": 16, "dedicated": 20}
MAX_PARTITIONS = {"basic": 32, "standard": 32, "premium": 100, "dedicated": 1024}

#: Spark's read and write alone, events per executor-core second, 1 KB events, by engine, then by
#: executor cores; and a cold run's cost besides them (process start, snapshot, claims, the
#: session's start, executors included on a cluster, verification, checkpoints), seconds.
#: Measured here with bench/cluster_throughput.py --cores 1 and 2 --engines LS, 200k events,
#: 2026-11-28, load 4.4-5.4 on 2 cores (docs/benchmarks.md, "Capacity"). The standalone worker
#: shares those 2 cores with the driver's JVM and starts its executor cold for every run; a
#: cluster's executors on hosts of their own are nearer the local figures. ``--calibration``
#: replaces them.
CALIBRATION: dict[str, dict[int, float]] = {
    "local": {1: 20_553.0, 2: 14_263.0},
    "standalone": {1: 8_570.0, 2: 7_547.0},
}
RUN_FIXED_SECONDS: dict[str, float] = {"local": 7.0, "standalone": 19.0}
#: The event size the calibration was measured at, and the share of a 1 KB event's CPU that
#: does not grow with its bytes (the reader's per-event work, Spark's per-row work; the rest,
#: copying and Parquet's encoding of the body, grows with them). From bench/read_range_cpu.py
#: and bench/write_partitions.py (docs/benchmarks.md).
CALIBRATED_BYTES = 1024
#: What each limit is called in the table.
LIMITS = {
    "spark": "Spark",
    "partition": "the hub: one TU's egress per partition read at once",
    "hub": "the hub: the namespace's egress",
}
FIXED_SHARE = 0.5


@dataclass(frozen=True)
class Hub:
    """An Event Hub's capacity for one consumer, per second."""

    tier: str
    units: int
    partitions: int
    event_bytes: int
    egress_mb_per_unit: float | None

    def _limits(self) -> tuple[float | None, float | None, float | None, float | None]:
        ingress_mb, ingress_ev, egress_mb, egress_ev = TIERS[self.tier]
        if self.egress_mb_per_unit is not None:
            egress_mb = self.egress_mb_per_unit
            ingress_mb = self.egress_mb_per_unit / 2
        return ingress_mb, ingress_ev, egress_mb, egress_ev

    def _rate(self, mb: float | None, events: float | None, units: float) -> float:
        rates = [x * units for x in (events,) if x is not None]
        if mb is not None:
            rates.append(mb * units * MB / self.event_bytes)
        return min(rates) if rates else math.inf

    def ingress(self) -> float:
        """Events/s the producers can send at most."""
        ingress_mb, ingress_ev, _, _ = self._limits()
        total = self._rate(ingress_mb, ingress_ev, self.units)
        if self.tier in ("basic", "standard"):  # a partition scales to one TU at most
            total = min(total, self._rate(ingress_mb, ingress_ev, self.partitions))
        return total

    def egress(self) -> float:
        """Events/s one consumer can read at most (shared with every other reader of the
        namespace: other consumer groups, Capture)."""
        _, _, egress_mb, egress_ev = self._limits()
        total = self._rate(egress_mb, egress_ev, self.units)
        if self.tier in ("basic", "standard"):
            total = min(total, self._rate(egress_mb, egress_ev, self.partitions))
        return total

    def partition_egress(self) -> float:
        """Events/s one partition can be read at (Basic, Standard: one TU's egress; no such
        limit is published for Premium and Dedicated)."""
        if self.tier not in ("basic", "standard"):
            return math.inf
        _, _, egress_mb, egress_ev = self._limits()
        return self._rate(egress_mb, egress_ev, 1)


@dataclass(frozen=True)
class Spark:
    """Spark's read and write, calibrated per executor core."""

    per_core: dict[int, float]  # executor cores -> events/s per core, at CALIBRATED_BYTES
    event_bytes: int
    readers: int  # max_readers_per_partition
    partitions: int

    def per_core_rate(self, cores_per_executor: int) -> float:
        known = sorted(self.per_core)
        at = max((k for k in known if k <= cores_per_executor), default=known[0])
        rate = self.per_core[at]
        # CPU per event: a fixed part and a part per byte, scaled from the calibrated size.
        scale = FIXED_SHARE + (1 - FIXED_SHARE) * self.event_bytes / CALIBRATED_BYTES
        return rate / scale

    def rate(self, cores: int, cores_per_executor: int) -> float:
        busy = min(cores, self.partitions * self.readers)
        return busy * self.per_core_rate(cores_per_executor)


def throughput(cores: int, hub: Hub, spark: Spark, cores_per_executor: int) -> tuple[float, str]:
    """Events/s ``cores`` executor cores read and write, and what limits it: ``spark``, the
    hub's per-partition egress (``partition``: cores read that many partitions at once, each at
    most one TU's egress) or the namespace's egress (``hub``)."""
    limits = {
        "spark": spark.rate(cores, cores_per_executor),
        "partition": min(cores, spark.partitions) * hub.partition_egress(),
        "hub": hub.egress(),
    }
    limit = min(limits, key=lambda k: limits[k])
    return limits[limit], limit


def cores_to_keep_up(
    rate: float, interval: float, fixed: float, hub: Hub, spark: Spark, cores_per_executor: int
) -> int:
    """The fewest executor cores whose runs, one every ``interval`` seconds, each read
    ``interval`` x ``rate`` events in time (``fixed`` seconds of each run's cost besides);
    0 if none can."""
    usable = interval - fixed
    if usable <= 0:
        return 0
    for cores in range(1, spark.partitions * spark.readers + 1):
        if throughput(cores, hub, spark, cores_per_executor)[0] * usable >= rate * interval:
            return cores
    return 0


def model(args: argparse.Namespace, per_core: dict[int, float]) -> dict[str, Any]:
    """The figures of one scenario, printed as a table."""
    hub = Hub(args.tier, args.units, args.partitions, args.event_bytes, args.egress_mb_per_unit)
    spark = Spark(per_core, args.event_bytes, args.readers, args.partitions)
    rate = args.rate if args.rate is not None else hub.ingress()
    per_exec = args.cores_per_executor
    egress = hub.egress()
    print(
        f"\n{args.partitions} partitions, {args.tier} x {args.units}, events of "
        f"{args.event_bytes} B, {per_exec} cores per executor, {args.readers} reader(s) per "
        f"partition; a run every {args.interval:.0f} s"
    )
    print(
        f"hub: producers at most {hub.ingress():,.0f} events/s "
        f"({hub.ingress() * args.event_bytes / MB:.1f} MB/s); one consumer reads at most "
        f"{egress:,.0f} events/s ({egress * args.event_bytes / MB:.1f} MB/s)"
    )
    fixed = RUN_FIXED_SECONDS[args.engine]
    print(
        f"spark: {spark.per_core_rate(per_exec):,.0f} events/s per executor core (read and "
        f"write alone, {args.engine} calibration), {fixed:.0f} s of fixed cost per run"
    )
    rows = []
    print(f"{'cores':>6} {'executors':>9} {'events/s':>12}  limit")
    cores = 1
    while cores <= max(args.partitions * args.readers, per_exec) * 2:
        got, limit = throughput(cores, hub, spark, per_exec)
        print(f"{cores:>6} {math.ceil(cores / per_exec):>9} {got:>12,.0f}  {LIMITS[limit]}")
        rows.append({"cores": cores, "events_per_second": round(got), "limit": limit})
        cores *= 2
    keep = cores_to_keep_up(rate, args.interval, fixed, hub, spark, per_exec)
    crossover = next(
        (
            c
            for c in range(1, args.partitions * args.readers + 1)
            if throughput(c, hub, spark, per_exec)[1] != "spark"
        ),
        None,
    )
    if keep:
        print(
            f"to keep up with {rate:,.0f} events/s: {keep} executor cores "
            f"({math.ceil(keep / per_exec)} executor(s) of {per_exec})"
        )
    else:
        print(
            f"no number of cores keeps up with {rate:,.0f} events/s at a run every "
            f"{args.interval:.0f} s: more partitions, readers per partition or units"
        )
    if crossover is not None:
        what = LIMITS[throughput(crossover, hub, spark, per_exec)[1]]
        print(f"from {crossover} executor core(s) on the limit is {what}")
    else:
        print("Spark is the limit at every core count the partitions can use")
    return {
        "scenario": {
            k: getattr(args, k)
            for k in (
                "partitions",
                "tier",
                "units",
                "event_bytes",
                "cores_per_executor",
                "readers",
                "interval",
                "engine",
            )
        },
        "hub_ingress_events_per_second": round(hub.ingress()),
        "hub_egress_events_per_second": None if egress == math.inf else round(egress),
        "partition_egress_events_per_second": None
        if hub.partition_egress() == math.inf
        else round(hub.partition_egress()),
        "spark_events_per_core_second": round(spark.per_core_rate(per_exec)),
        "producer_rate": round(rate),
        "cores_to_keep_up": keep or None,
        "hub_limits_from_cores": crossover,
        "table": rows,
    }


def calibration(files: list[str], engine: str) -> dict[int, float]:
    """Events per core-second by executor cores, from bench/cluster_throughput.py --json
    documents (their ``engine`` runs: ``L`` local, ``S`` standalone), or the recorded figures."""
    if not files:
        return dict(CALIBRATION[engine])
    out: dict[int, float] = {}
    for name in files:
        doc = json.loads(Path(name).read_text())
        run = doc["big"]["S" if engine == "standalone" else "L"]
        out[int(doc["executor_cores"])] = float(run["read_write_events_per_core_second"])
    return out


EXAMPLES = [
    # The two the project is asked about: a 32-partition hub read by 8 executors, and 100
    # partitions on Premium; then a Standard hub whose units, not Spark, are the limit.
    dict(partitions=32, tier="standard", units=20, cores_per_executor=4),
    dict(partitions=32, tier="standard", units=40, cores_per_executor=4),
    dict(partitions=100, tier="premium", units=4, cores_per_executor=4),
    dict(partitions=100, tier="premium", units=16, cores_per_executor=8),
    dict(partitions=4, tier="standard", units=1, cores_per_executor=2),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--event-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--tier", choices=sorted(TIERS), default="standard")
    parser.add_argument("--units", type=int, default=20, help="TUs, PUs or CUs")
    parser.add_argument(
        "--egress-mb-per-unit",
        type=float,
        help="MB/s one PU or CU lets consumers read (Premium: 10 by default; Dedicated: required)",
    )
    parser.add_argument("--rate", type=float, help="events/s the producers send (default: max)")
    parser.add_argument("--interval", type=float, default=300.0, help="seconds between runs")
    parser.add_argument("--cores-per-executor", type=int, default=4)
    parser.add_argument("--readers", type=int, default=1, help="max_readers_per_partition")
    parser.add_argument(
        "--engine",
        choices=sorted(CALIBRATION),
        default="standalone",
        help="whose calibration: a local master's or a standalone worker's (default)",
    )
    parser.add_argument("--calibration", nargs="*", default=[], help="cluster_throughput JSON")
    parser.add_argument("--examples", action="store_true", help="the scenarios of the docs")
    add_json_flag(parser)
    args = parser.parse_args()
    if args.tier == "dedicated" and args.egress_mb_per_unit is None:
        parser.error("--tier dedicated needs --egress-mb-per-unit (no published figure per CU)")
    if args.units > MAX_UNITS[args.tier] or args.partitions > MAX_PARTITIONS[args.tier]:
        parser.error(
            f"--tier {args.tier} allows at most {MAX_UNITS[args.tier]} units and "
            f"{MAX_PARTITIONS[args.tier]} partitions per event hub"
        )
    per_core = calibration(args.calibration, args.engine)
    with report("capacity.py", args.json) as rep:
        rep.add("calibration: events per core-second by executor cores", per_core)
        scenarios = EXAMPLES if args.examples else [{}]
        for i, scenario in enumerate(scenarios):
            one = argparse.Namespace(**{**vars(args), **scenario})
            rep.add(f"scenario {i + 1}", model(one, per_core))


if __name__ == "__main__":
    main()
