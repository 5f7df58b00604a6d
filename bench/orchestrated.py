"""A Dagster run of the project's asset, launch to materialization, against ``ehingest run``.

What a user clicks: ``dagster asset materialize`` of the project's ``eventhub_events`` asset
(``dagster_project/defs/eventhub_events/defs.yaml``, all 4 partitions), from the command's
launch to the run's last ``ASSET_MATERIALIZATION`` event and to the process's exit, against
``ehingest run`` (the same settings: strategy ``balanced``, 4 partitions) on the same events,
cold, end to end. For each size (default 1,000 and 100,000 events of 1 KB) a fresh emulator hub
is filled once; every run reads all of it into its own checkpoint container and sink. One
untimed run of each kind comes first (its JVM archive written if it had none), then
``--repeat`` alternated pairs.

The Dagster run's phases come from its own event log (``DAGSTER_HOME``): launch to
``RUN_START`` (the command's start, loading the definitions, creating the run), to
``STEP_START`` (the step's own process: Dagster's default executor runs each step in a
subprocess), to the last ``ASSET_MATERIALIZATION`` (the ingestion), to ``RUN_SUCCESS``, to the
process's exit. ``ehingest run``'s are its report's (``RunReport.phases``). The target: the
Dagster run at most 3 s more than ``ehingest run`` on the same events.

    source scripts/_bootstrap.sh
    uv run --frozen python bench/orchestrated.py --json
    uv run --frozen python bench/orchestrated.py --events 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _report import add_json_flag, report  # noqa: E402
from fresh_host import writer_done  # noqa: E402
from ingest_throughput import HUB, emulator_process, run_cli, send  # noqa: E402

ASSET = "eventhub_events"
#: The Dagster events whose times split a run into phases, in order.
MARKS = ("RUN_START", "STEP_START", "ASSET_MATERIALIZATION", "RUN_SUCCESS")


def dagster_run(
    conn: str, store: str, container: str, workdir: Path, home: Path, env: dict[str, str]
) -> dict[str, Any]:
    """``dagster asset materialize`` of every partition, launch to exit, and its phases."""
    import dagster as dg

    sink = workdir / f"sink-{container}"
    full = {
        **env,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "EVENTHUB_NAME": HUB,
        "EVENTHUB_CONNECTION_STRING": conn,
        "AZURE_STORAGE_CONNECTION_STRING": store,
        "EHINGEST_CONTAINER": container,
        "EHINGEST_SINK_PATH": str(sink),
    }
    full.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [
        str(Path(sys.executable).with_name("dagster")),
        *("asset", "materialize", "-m", "dagster_eventhub_ingest.dagster_project.definitions"),
        *("--select", ASSET, "--partition-range", "0...3"),
    ]
    launched = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=workdir, env=full, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or "RUN_SUCCESS" not in done.stdout + done.stderr:
        raise RuntimeError(
            f"dagster asset materialize failed: {(done.stdout + done.stderr)[-3000:]}"
        )
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_runs(limit=1)[0]
        logs = instance.all_logs(run.run_id)
        records = instance.fetch_materializations(dg.AssetKey(ASSET), limit=100).records
    times: dict[str, float] = {}
    for entry in logs:
        # By name: some values are Dagster's older ones (RUN_START is "PIPELINE_START").
        kind = entry.dagster_event_type.name if entry.dagster_event_type else None
        if kind in MARKS:
            times[kind] = entry.timestamp - launched  # the last of each kind
    events = sum(
        r.event_log_entry.asset_materialization.metadata["events"].value  # type: ignore[union-attr,misc]
        for r in records
        if r.event_log_entry.run_id == run.run_id
        and "events" in r.event_log_entry.asset_materialization.metadata  # type: ignore[union-attr]
    )
    phases: dict[str, float] = {}
    before = 0.0
    for mark in MARKS:
        if mark in times:
            phases[f"to {mark}"] = round(times[mark] - before, 3)
            before = times[mark]
    phases["to exit"] = round(seconds - before, 3)
    return {
        "seconds": round(seconds, 2),
        "to_materialization_s": round(times.get("ASSET_MATERIALIZATION", seconds), 2),
        "events": events,
        "phases": phases,
    }


def _show(label: str, r: dict[str, Any]) -> None:
    phases = " ".join(f"{k.replace(' ', '_')}={v:.2f}" for k, v in r["phases"].items())
    print(f"  {label:<22} {r['seconds']:6.2f} s, {r['events']:,} events; {phases}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--size", type=int, default=1024, help="event body bytes")
    parser.add_argument("--repeat", type=int, default=2, help="alternated pairs per size")
    add_json_flag(parser)
    args = parser.parse_args()
    with report("orchestrated.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Any) -> None:
    import dagster as dg

    from dagster_eventhub_ingest.emulator.azurite import azurite
    from dagster_eventhub_ingest.resources.spark.jvm_cache import cache_dir

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env.pop("EHINGEST_JVM_ARCHIVE", None)  # what a user's host does
    options = {"strategy": "balanced", "lease_expiry_seconds": 60}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-orch-")))
        store = stack.enter_context(azurite())
        home = tmp / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        with dg.DagsterInstance.from_config(str(home)) as instance:  # as a deployment has it
            instance.get_runs(limit=1)
        for n in args.events:
            with emulator_process(4) as conn:
                send(conn, 4, n, args.size)
                print(f"\n{n:,} events of {args.size} B over 4 partitions:", flush=True)

                def cli(container: str, n: int = n, conn: str = conn) -> dict[str, Any]:
                    r = run_cli(conn, store, str(tmp), 2, 1, container, extra_options=options)
                    assert r["events"] == n and r["complete"], r
                    return {
                        "seconds": round(r["seconds"], 2),
                        "events": r["events"],
                        "phases": {k: round(v, 3) for k, v in r["phases"].items()},
                    }

                def dag(container: str, n: int = n, conn: str = conn) -> dict[str, Any]:
                    r = dagster_run(conn, store, container, tmp, home, env)
                    assert r["events"] == n, r
                    return r

                _show("dagster (untimed)", dag(f"w-d-{n}"))
                _show("ehingest (untimed)", cli(f"w-e-{n}"))
                writer_done(cache_dir(), 600)  # a JVM archive either of them had written
                runs: dict[str, list[dict[str, Any]]] = {"ehingest": [], "dagster": []}
                for i in range(args.repeat):
                    order = ("ehingest", "dagster") if i % 2 == 0 else ("dagster", "ehingest")
                    for kind in order:
                        load = [round(x, 2) for x in os.getloadavg()]
                        r = (cli if kind == "ehingest" else dag)(f"r{i}-{kind[0]}-{n}")
                        r["load"] = load
                        runs[kind].append(r)
                        _show(f"{kind} #{i + 1}", r)
            e = statistics.median(r["seconds"] for r in runs["ehingest"])
            d = statistics.median(r["seconds"] for r in runs["dagster"])
            m = statistics.median(r["to_materialization_s"] for r in runs["dagster"])
            extra = d - e
            print(
                f"  medians: ehingest run {e:.2f} s; dagster to materialization {m:.2f} s, "
                f"to exit {d:.2f} s: {extra:+.2f} s (target <= +3 s: "
                f"{'met' if extra <= 3 else 'NOT met'})"
            )
            rep.add(
                f"{n} events",
                {
                    "runs": runs,
                    "ehingest_median_s": round(e, 2),
                    "dagster_to_materialization_median_s": round(m, 2),
                    "dagster_to_exit_median_s": round(d, 2),
                    "dagster - ehingest, s": round(extra, 2),
                    "target <= 3 s met": extra <= 3,
                },
            )


if __name__ == "__main__":
    main()
