"""dagster_project."""
