"""URLs of empty schedule stores of each kind, for the store tests."""

from __future__ import annotations

import uuid
from pathlib import Path

import pymongo
import pytest

__all__ = ("empty_store_url",)


def empty_store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty schedule store of `kind` (memory, sqlite, mongodb, postgresql)."""
    if kind == "memory":
        return "memory:"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    if kind == "mongodb":
        server = request.getfixturevalue("mongo_server")
        database = f"sched_{uuid.uuid4().hex[:12]}"
        parsed = pymongo.uri_parser.parse_uri(server.uri)
        host, port = parsed["nodelist"][0]
        return f"mongodb://{host}:{port}/{database}"
    import psycopg

    dsn: str = request.getfixturevalue("pg_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS executors_schedules, executors_meta")
    return dsn
