"""Airflow's configuration, from where this Airflow keeps it (the task SDK's from 3.2 on)."""

from __future__ import annotations

try:
    from airflow.sdk.configuration import conf
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf

__all__ = ["conf"]
