"""URLs of empty schedule stores of each kind, for the store tests."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from pathlib import Path

import pymongo
import pytest

from executors.stores import ScheduleRecord, open_store, sqlite_path

__all__ = ("corrupt", "empty_store_url", "rewrite", "stored_record")


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
        conn.execute("DROP TABLE IF EXISTS executors_schedules, executors_meta, "
                     "executors_owners")
    return dsn


def stored_record(url: str, name: str) -> ScheduleRecord | None:
    """The record of `name` in the store at `url`, read through a store opened for it."""
    store = open_store(url)
    try:
        return store.get(name)
    finally:
        store.close()


def corrupt(url: str, name: str, definition: dict[str, object], *,
            format_version: int | str | None = None) -> None:
    """Write `definition` raw into record `name` of the SQLite, MongoDB or PostgreSQL store
    at `url` (due at once: next fire time 0), or set the store's format to
    `format_version`."""
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn, conn:
            if format_version is not None:
                conn.execute("UPDATE executors_meta SET value = ? WHERE key = 'format'",
                             (str(format_version),))
            else:
                conn.execute("UPDATE executors_schedules SET definition = ?, next_fire = 0 "
                             "WHERE name = ?", (json.dumps(definition), name))
        return
    if url.startswith("mongodb"):
        with pymongo.MongoClient(url) as client:
            db = client.get_default_database()
            if format_version is not None:
                db["executors_meta"].update_one({"_id": "format"},
                                                {"$set": {"value": format_version}})
            else:
                db["executors_schedules"].update_one(
                    {"_id": name}, {"$set": {"definition": definition, "next_fire": 0.0}})
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if format_version is not None:
            conn.execute("UPDATE executors_meta SET value = %s WHERE key = 'format'",
                         (str(format_version),))
        else:
            conn.execute("UPDATE executors_schedules SET definition = %s::jsonb, "
                         "next_fire = 0 WHERE name = %s", (json.dumps(definition), name))


def rewrite(store: object, url: str, name: str, **changes: object) -> None:
    """Rewrite parts of the stored definition of `name` (``args=[...]``, ``target=...``) as
    another writer of the store could: the definition alone, its digest field left as it was.
    `store` is the store object of `url` (the memory store has no other way in)."""
    if url.startswith("memory"):
        import dataclasses

        records = store._records  # type: ignore[attr-defined]
        record = records[name]
        definition = dataclasses.replace(record.definition, **changes)
        records[name] = dataclasses.replace(record, definition=definition)
        return
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn, conn:
            (text,) = conn.execute("SELECT definition FROM executors_schedules WHERE name = ?",
                                   (name,)).fetchone()
            conn.execute("UPDATE executors_schedules SET definition = ? WHERE name = ?",
                         (json.dumps({**json.loads(text), **changes}), name))
        return
    if url.startswith("mongodb"):
        with pymongo.MongoClient(url) as client:
            client.get_default_database()["executors_schedules"].update_one(
                {"_id": name}, {"$set": {f"definition.{k}": v for k, v in changes.items()}})
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE executors_schedules SET definition = definition || %s::jsonb "
                     "WHERE name = %s", (json.dumps(changes), name))
