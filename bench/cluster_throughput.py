"""The same ingestion on local[K], on a standalone cluster's K-core worker and through Spark
Connect on that worker: events/s, the ratios, and what Connect costs per run.

One emulator hub of P partitions (default 4) is filled once with N events (default 200k of
1 KB); each engine then runs ``ehingest run`` cold, end to end (process start to exit, as a
scheduler starts it), into its own checkpoint container and sink, so all three read the very
same events:

(L) ``spark: {master: local[K]}``: the driver's JVM runs the tasks;
(S) ``spark: {master: spark://...}`` with the worker's K cores (a separate executor JVM whose
    Python has the dependencies but not this project: the code is shipped, as on any cluster);
(C) ``spark: {remote: sc://...}``: a Spark Connect server holding the same worker's K cores
    (the client starts no JVM; the server's executors are already up).

Then ``--small-runs`` times: M more events (default 1,000) are sent and each engine reads just
those. That run is almost all fixed cost, so Connect's overhead per run is the difference
``C - S`` of those small runs (and of the big ones); the run's own phases (``RunReport.phases``)
say where it goes. Every figure carries the CPU seconds of the CLI's process tree (the remote
executors are not in it) and the load average. No timed tests: the figures live here.

    source scripts/_bootstrap.sh
    uv run --frozen python bench/cluster_throughput.py            # 200k, 3 small runs of 1,000
    uv run --frozen python bench/cluster_throughput.py --events 1000000 --json
    uv run --frozen python bench/cluster_throughput.py --cores 1 --engines LS --small-runs 0

K is ``--cores`` (default 2); each big run also prints its read and write alone per executor
core (events / ``read_write`` seconds / K): what bench/capacity.py is calibrated from.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import sigterm_unwinds  # noqa: E402
from ingest_throughput import emulator_process, load_average, run_cli, send  # noqa: E402

from dagster_eventhub_ingest.emulator.azurite import azurite  # noqa: E402
from dagster_eventhub_ingest.emulator.spark_cluster import (  # noqa: E402
    APP_CONF,
    connect_server,
    executor_venv,
    spark_env,
    standalone_cluster,
)

ENGINES = {
    "L": "(L) local[K]",
    "S": "(S) standalone, K-core worker",
    "C": "(C) Spark Connect on that worker",
}


def _say(text: str) -> None:
    print(text, file=_OUT, flush=True)


_OUT = sys.stdout
#: Executor cores of every engine (``--cores``).
_CORES = 2


def _run(
    engine: str, spark: dict, env: dict, conn: str, store: str, tmp: str, cap: int = 10**9
) -> dict:
    """One cold ``ehingest run`` on ``engine``, reading at most ``cap`` events per partition."""
    local = engine == "L"
    r = run_cli(
        conn,
        store,
        tmp,
        parallelism=_CORES,
        max_readers=1,
        container=f"cluster-bench-{engine.lower()}",
        spark=spark,
        sink=None if local else {"shared": True},  # one machine: every executor sees the path
        env=env,
        max_events_per_partition=cap,
    )
    r["load"] = load_average()
    r["events_per_second"] = round(r["events"] / r["seconds"]) if r["seconds"] else 0
    # The read and write alone (the run's fixed cost left out), per executor core: what the
    # capacity model (bench/capacity.py) is calibrated from.
    rw = r["phases"].get("read_write")
    r["read_write_events_per_core_second"] = round(r["events"] / rw / _CORES) if rw else None
    return r


def _show(label: str, r: dict) -> None:
    _say(
        f"  {label:<34} {r['events']:>9,} events in {r['seconds']:7.1f} s "
        f"= {r['events_per_second']:>8,} events/s; CLI tree CPU {r['cpu_seconds']:6.1f} s; "
        f"load {r['load']}"
    )
    _say("      phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()))


def _ratio(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None or not y else round(x / y, 2)


def main() -> None:
    global _OUT, _CORES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="N: the big run's events")
    parser.add_argument("--size", type=int, default=1024, help="event body bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--small", type=int, default=1000, help="M: events of each small run")
    parser.add_argument("--small-runs", type=int, default=3, help="small runs per engine")
    parser.add_argument("--cores", type=int, default=2, help="N: executor cores of each engine")
    parser.add_argument(
        "--engines", default="LSC", help="which of L, S, C to run (default all three)"
    )
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    args = parser.parse_args()
    if args.json:
        _OUT = sys.stderr
    _CORES = args.cores
    engines = set(args.engines.upper())
    for key in ENGINES:
        ENGINES[key] = (
            ENGINES[key].replace("[K]", f"[{_CORES}]").replace("K-core", f"{_CORES}-core")
        )

    started = load_average()
    _say(
        f"cluster throughput: {args.events:,} events of {args.size} bytes over "
        f"{args.partitions} partitions; cores {os.cpu_count()}, load {started}"
    )
    n = str(_CORES)
    cores = {"spark.cores.max": n, "spark.executor.cores": n, "spark.executor.memory": "1g"}
    big: dict[str, dict] = {}
    small: dict[str, list[dict]] = {e: [] for e in ENGINES}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-cluster-"))
        store = stack.enter_context(azurite())
        conn = stack.enter_context(emulator_process(args.partitions))
        t0 = time.perf_counter()
        python = executor_venv()
        took = time.perf_counter() - t0
        _say(f"executors' venv (the lock without the project) ready in {took:.0f} s")
        master = stack.enter_context(standalone_cluster(python, Path(tmp), cores=_CORES))
        cluster_env = spark_env(python)
        local_env = dict(os.environ)
        classic = {"master": master, "conf": {**APP_CONF, **cores}}

        sent = send(conn, args.partitions, args.events, args.size)
        _say(f"sent {args.events:,} events in {sent:.1f} s\n\nbig run (cold, end to end):")
        local = {"master": f"local[{_CORES}]"}
        if "L" in engines:
            big["L"] = _run("L", local, local_env, conn, store, tmp)
            _show(ENGINES["L"], big["L"])
        if "S" in engines:
            big["S"] = _run("S", classic, cluster_env, conn, store, tmp)
            _show(ENGINES["S"], big["S"])
        per = args.small // args.partitions
        sent_small = False
        # The Connect server is a long-running application: it holds the worker's cores from
        # its start, so it starts after the classic runs and the small classic runs go after it.
        if "C" in engines:
            with connect_server(master, python, Path(tmp), conf=cores) as url:
                remote = {"remote": url}
                big["C"] = _run("C", remote, cluster_env, conn, store, tmp)
                _show(ENGINES["C"], big["C"])
                _say(f"\nsmall runs ({args.small:,} new events each, {args.small_runs} times):")
                for i in range(args.small_runs):
                    send(conn, args.partitions, args.small, args.size)
                    r = _run("C", remote, cluster_env, conn, store, tmp, cap=per)
                    small["C"].append(r)
                    _show(f"{ENGINES['C']} #{i + 1}", r)
                sent_small = True
        if not sent_small and args.small_runs:
            _say(f"\nsmall runs ({args.small:,} new events each, {args.small_runs} times):")
            for _ in range(args.small_runs):
                send(conn, args.partitions, args.small, args.size)
        # The classic engines read the same small batches, one per run: each run is capped at
        # one batch per partition (their checkpoints sit at N, before the first batch).
        for engine, spark, env in (
            ("L", local, local_env),
            ("S", classic, cluster_env),
        ):
            if engine not in engines:
                continue
            for i in range(args.small_runs):
                r = _run(engine, spark, env, conn, store, tmp, cap=per)
                small[engine].append(r)
                _show(f"{ENGINES[engine]} #{i + 1}", r)

    def median(engine: str, key: str = "seconds") -> float | None:
        values = [r[key] for r in small[engine]]
        return round(statistics.median(values), 2) if values else None

    s_small, c_small, l_small = median("S"), median("C"), median("L")

    def rate(engine: str) -> float | None:
        return big[engine]["events_per_second"] if engine in big else None

    c_big, s_big = big.get("C", {}).get("seconds"), big.get("S", {}).get("seconds")

    figures = {
        "S/L events/s, big run": _ratio(rate("S"), rate("L")),
        "C/S events/s, big run": _ratio(rate("C"), rate("S")),
        "C/L events/s, big run": _ratio(rate("C"), rate("L")),
        "small run median s: L": l_small,
        "small run median s: S": s_small,
        "small run median s: C": c_small,
        "Connect overhead per run, s (C - S, small runs)": None
        if c_small is None or s_small is None
        else round(c_small - s_small, 2),
        "Connect overhead per run, s (C - S, big run)": None
        if c_big is None or s_big is None
        else round(c_big - s_big, 2),
        **{
            f"{e}: read_write events per core-second, big run": big[e][
                "read_write_events_per_core_second"
            ]
            for e in big
        },
    }
    _say("\nratios (side by side in this run):")
    for name, value in figures.items():
        _say(f"  {name:<50} {value}")
    finished = load_average()
    _say(f"load average at the start {started}, at the end {finished}")
    if args.json:
        doc = {
            "command": " ".join(["python", "bench/cluster_throughput.py", *sys.argv[1:]]),
            "cores": os.cpu_count(),
            "executor_cores": _CORES,
            "events": args.events,
            "event_bytes": args.size,
            "partitions": args.partitions,
            "small_events": args.small,
            "labels": ENGINES,
            "big": big,
            "small": small,
            "figures": figures,
            "load_average_start": started,
            "load_average_end": finished,
        }
        print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    with sigterm_unwinds():
        main()
