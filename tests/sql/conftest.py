"""Fixtures for the SQL tests, on the shop database of :mod:`shopdb` (in both engines).

- ``shop_duckdb`` / ``shop_sqlite``: a fresh database file in ``tmp_path`` (function scope);
- ``shop_db``: the same, parametrised over both engines (the test runs twice);
- ``shop_files``: one file per engine, built once per session (for hypothesis tests and read-only checks;
  never write to them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shopdb import ENGINES, build_shop


@pytest.fixture()
def shop_duckdb(tmp_path: Path) -> Path:
    """A fresh DuckDB shop database."""
    return build_shop(tmp_path / "duck" / "shop.duckdb", "duckdb")


@pytest.fixture()
def shop_sqlite(tmp_path: Path) -> Path:
    """A fresh SQLite shop database."""
    return build_shop(tmp_path / "lite" / "shop.sqlite", "sqlite")


@pytest.fixture(params=ENGINES)
def shop_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A fresh shop database, once per engine."""
    suffix = "duckdb" if request.param == "duckdb" else "sqlite"
    return build_shop(tmp_path / request.param / f"shop.{suffix}", request.param)


@pytest.fixture(scope="session")
def shop_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One shop database per engine, shared by the session: read them, never write them."""
    root = tmp_path_factory.mktemp("shop")
    return {
        "duckdb": build_shop(root / "shop.duckdb", "duckdb"),
        "sqlite": build_shop(root / "shop.sqlite", "sqlite"),
    }
