"""dagster_eventhub_ingest: land Azure Event Hubs events into Spark tables, exactly once.

One import name holds every part:

- ``dagster_eventhub_ingest.resources``: clients, the partition store, the ``eventhubs`` Spark
  source, settings and errors;
- ``dagster_eventhub_ingest.ops``: the run's steps (claim, plan, read, write, checkpoint);
- ``dagster_eventhub_ingest.dagster_project``: the Dagster resources, asset and Component;
- ``dagster_eventhub_ingest.airflow_provider``: the Airflow provider;
- ``dagster_eventhub_ingest.cli``: the ``ehingest`` command;
- ``dagster_eventhub_ingest.emulator``: the local Event Hubs emulator, for tests.

Importing this package imports none of them: an Airflow install never loads Dagster, and the
CLI's first import stays cheap.
"""
