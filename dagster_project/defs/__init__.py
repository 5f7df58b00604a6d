"""Component definitions (``defs.yaml`` folders) loaded by ``dagster_project.definitions``."""
