"""Component definitions (``defs.yaml`` folders) loaded by
``dagster_eventhub_ingest.dagster_project.definitions``."""
