"""A new local MLflow store built off disk and linked into place (essaflow/tracking/sqlite_store.py): the same
schema MLflow builds in place, in write-ahead-log mode, usable at once, and never replacing a store that exists."""

from __future__ import annotations

import sqlite3

from essaflow.tracking import sqlite_store
from essaflow.tracking.server import client


def _schema(db) -> tuple[list[list[str]], list[tuple]]:
    """Every table's and index's definition (its lines sorted: MLflow's own builds order a table's constraints
    differently from one build to the next), and the migration the store is at."""
    con = sqlite3.connect(db)
    try:
        definitions = sorted(sorted(line.strip(" ,") for line in (row[0] or "").splitlines())
                             for row in con.execute("SELECT sql FROM sqlite_master"))  # fmt: skip
        return definitions, list(con.execute("SELECT version_num FROM alembic_version"))
    finally:
        con.close()


def test_a_store_built_off_disk_has_the_schema_mlflow_builds_in_place_and_takes_runs(tmp_path, monkeypatch):
    built, in_place = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    sqlite_store.create_if_missing(built)
    in_place.parent.mkdir()
    monkeypatch.setattr(sqlite_store, "create_if_missing", lambda path: None)  # MLflow alone, as before
    client(f"sqlite:///{in_place}")

    assert _schema(built) == _schema(in_place)
    mlflow = client(f"sqlite:///{built}")
    run = mlflow.create_run(mlflow.create_experiment("store-check"))
    mlflow.log_metric(run.info.run_id, "m", 1.0)
    assert mlflow.get_run(run.info.run_id).data.metrics == {"m": 1.0}
    assert sorted(p.name for p in built.parent.iterdir() if not p.name.startswith("mlflow.db-")) == ["mlflow.db"]
    assert sqlite3.connect(built).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_an_existing_store_is_never_replaced(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"someone else's store")
    sqlite_store.create_if_missing(db)
    assert db.read_bytes() == b"someone else's store"
