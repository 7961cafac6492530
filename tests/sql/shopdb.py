"""A small shop database for the SQL tests (3 tables, foreign keys, NULLs, dates, text, floats), built in
DuckDB and in SQLite from the same rows, and helpers to make tasks on it.

- :func:`build_shop` builds one anywhere; :data:`SHOP_QUESTIONS` are gold queries that run on both engines;
- :func:`shop_task` makes a SkyRL-style task for a gold query; :func:`sha256_of` is a file checksum.

The fixtures in ``conftest.py`` build these in temporary folders. Import helpers from here (``from shopdb
import ...``), not from ``conftest``, which pytest may have imported under another name.
"""

from __future__ import annotations

import datetime
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

ENGINES = ("duckdb", "sqlite")

CUSTOMERS = [
    # id, name, country, signup_date (NULL country for two customers)
    (1, "Ann Lee", "France", datetime.date(2023, 1, 14)),
    (2, "Bob Stone", "Germany", datetime.date(2023, 2, 3)),
    (3, "Chloé Martin", "France", datetime.date(2023, 3, 22)),
    (4, "Dev Patel", None, datetime.date(2023, 5, 9)),
    (5, "Eve Adams", "Spain", datetime.date(2023, 7, 30)),
    (6, "Finn O'Neil", "Ireland", datetime.date(2024, 1, 2)),
    (7, "Gus Berg", "Germany", datetime.date(2024, 2, 18)),
    (8, "Hana Sato", None, datetime.date(2024, 4, 1)),
]
PRODUCTS = [
    # id, name, category, price
    (1, "Espresso beans", "coffee", 12.5),
    (2, "Green tea", "tea", 7.25),
    (3, "French press", "equipment", 34.0),
    (4, "Oat milk", "dairy-free", 2.99),
    (5, "Grinder", "equipment", 89.9),
    (6, "Earl grey", "tea", 6.5),
]
ORDERS = [
    # id, customer_id, product_id, quantity, order_date, note (mostly NULL)
    (1, 1, 1, 2, datetime.date(2024, 1, 5), None),
    (2, 1, 4, 6, datetime.date(2024, 1, 5), "gift"),
    (3, 2, 3, 1, datetime.date(2024, 1, 19), None),
    (4, 3, 2, 3, datetime.date(2024, 2, 2), None),
    (5, 3, 6, 2, datetime.date(2024, 2, 14), "urgent"),
    (6, 4, 5, 1, datetime.date(2024, 2, 20), None),
    (7, 5, 1, 4, datetime.date(2024, 3, 1), None),
    (8, 5, 2, 1, datetime.date(2024, 3, 3), None),
    (9, 6, 1, 1, datetime.date(2024, 3, 15), None),
    (10, 7, 3, 2, datetime.date(2024, 4, 2), None),
    (11, 7, 4, 12, datetime.date(2024, 4, 2), "bulk"),
    (12, 2, 5, 1, datetime.date(2024, 4, 20), None),
    (13, 1, 6, 3, datetime.date(2024, 5, 6), None),
    (14, 8, 2, 2, datetime.date(2024, 5, 9), None),
    (15, 3, 1, 1, datetime.date(2024, 6, 11), None),
]

_DDL = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, country VARCHAR, signup_date DATE)",
    "CREATE TABLE products (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, category VARCHAR, price DOUBLE)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), "
    "product_id INTEGER REFERENCES products(id), quantity INTEGER NOT NULL, order_date DATE, note VARCHAR)",
]
_TABLES = {"customers": CUSTOMERS, "products": PRODUCTS, "orders": ORDERS}

SHOP_QUESTIONS: list[tuple[str, str]] = [
    ("How many customers are there?", "SELECT COUNT(*) FROM customers"),
    ("Which customers live in France?", "SELECT name FROM customers WHERE country = 'France'"),
    ("Which customers have no country?", "SELECT name FROM customers WHERE country IS NULL"),
    (
        "What is the average price per category?",
        "SELECT category, AVG(price) AS avg_price FROM products GROUP BY category",
    ),
    (
        "List the three most expensive products, most expensive first.",
        "SELECT name, price FROM products ORDER BY price DESC LIMIT 3",
    ),
    (
        "How many units did each customer order?",
        "SELECT c.name, SUM(o.quantity) AS units FROM customers c JOIN orders o ON o.customer_id = c.id "
        "GROUP BY c.name",
    ),
    (
        "What did orders in February 2024 cost?",
        "SELECT o.id, o.quantity * p.price AS cost FROM orders o JOIN products p ON p.id = o.product_id "
        "WHERE o.order_date >= '2024-02-01' AND o.order_date < '2024-03-01'",
    ),
    (
        "Which customers never ordered tea?",
        "SELECT name FROM customers WHERE id NOT IN (SELECT o.customer_id FROM orders o JOIN products p "
        "ON p.id = o.product_id WHERE p.category = 'tea')",
    ),
    (
        "Which countries have customers or are Spain?",
        "SELECT country FROM customers WHERE country IS NOT NULL UNION SELECT 'Spain'",
    ),
]
"""(question, gold SQL) pairs that run unchanged on both engines."""


def build_shop(path: Path, engine: str) -> Path:
    """Write the shop database to ``path`` with ``engine`` (``"duckdb"`` or ``"sqlite"``); return ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if engine == "duckdb":
        import duckdb

        connection = duckdb.connect(str(path))
        try:
            for statement in _DDL:
                connection.execute(statement)
            for table, rows in _TABLES.items():
                marks = ", ".join("?" for _ in rows[0])
                connection.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        finally:
            connection.close()
    elif engine == "sqlite":
        connection = sqlite3.connect(str(path))
        try:
            for statement in _DDL:
                connection.execute(statement.replace("DOUBLE", "REAL").replace("VARCHAR", "TEXT"))
            for table, rows in _TABLES.items():
                marks = ", ".join("?" for _ in rows[0])
                connection.executemany(
                    f"INSERT INTO {table} VALUES ({marks})",
                    [
                        tuple(v.isoformat() if isinstance(v, datetime.date) else v for v in row)
                        for row in rows
                    ],
                )
            connection.commit()
        finally:
            connection.close()
    else:
        raise ValueError(f"unknown engine {engine!r}")
    return path


def shop_task(
    db_path: Path, gold_sql: str, question: str = "Answer with SQL.", **extras: Any
) -> dict[str, Any]:
    """A task (``{"prompt", "extras"}``) asking ``question`` about the database at ``db_path``."""
    prompt = [
        {"role": "system", "content": "Answer with <think>, <sql> and <solution> tags."},
        {"role": "user", "content": question},
    ]
    row_extras = {
        "reward_spec": {"method": "rule", "ground_truth": gold_sql},
        "db_path": str(db_path),
        "db_id": "shop",
        "data": "shop",
        **extras,
    }
    return {"prompt": prompt, "extras": row_extras}


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
