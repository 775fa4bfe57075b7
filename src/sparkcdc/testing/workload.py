"""A seeded multi-table workload for demos, e2e tests and benchmarks.

Inserts, updates (including primary-key changes), deletes and multi-statement transactions over
three tables, then a `finish_mark` row: once the finish mark is replicated, everything before
it is too (TiCDC's integration tests use the same barrier).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

TABLES_DDL = [
    """CREATE TABLE customers (
        id BIGINT PRIMARY KEY,
        name VARCHAR(100) CHARACTER SET utf8mb4 NOT NULL,
        email VARCHAR(200) NOT NULL,
        tier ENUM('basic','gold','platinum') NOT NULL DEFAULT 'basic',
        avatar VARBINARY(16) NULL,
        joined DATETIME(3) NULL,
        UNIQUE KEY uk_email (email)
    )""",
    """CREATE TABLE orders (
        id INT PRIMARY KEY,
        customer_id BIGINT NOT NULL,
        amount DECIMAL(12,2) NOT NULL,
        note TEXT NULL,
        flags SET('gift','express','fragile') NOT NULL DEFAULT '',
        created TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
    )""",
    """CREATE TABLE items (
        order_id INT NOT NULL,
        line SMALLINT UNSIGNED NOT NULL,
        sku CHAR(8) NOT NULL,
        qty TINYINT UNSIGNED NOT NULL,
        day DATE NULL,
        PRIMARY KEY (order_id, line)
    )""",
    "CREATE TABLE finish_mark (id INT PRIMARY KEY, note VARCHAR(32))",
]

_NAMES = ["Ada", "Grace", "Linus", "Ken", "Barbara", "Edsger", "Zoë", "Jürgen", "李雷", "🦊 Fox"]


@dataclass
class Workload:
    """Applies `transactions` random transactions to `database` through `conn`."""

    conn: object
    database: str
    seed: int = 1
    rng: random.Random = field(init=False)
    _next_customer: int = field(init=False, default=1)
    _next_order: int = field(init=False, default=1)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def _exec(self, sql: str, args=None) -> int:
        with self.conn.cursor() as cur:
            return cur.execute(sql, args)

    def _ids(self, table: str) -> list:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT id FROM `{self.database}`.`{table}`")
            return [r[0] for r in cur.fetchall()]

    def create_tables(self) -> None:
        self._exec(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
        for ddl in TABLES_DDL:
            self._exec(f"USE `{self.database}`")
            self._exec(ddl)

    def run(self, transactions: int) -> None:
        self._exec(f"USE `{self.database}`")
        for _ in range(transactions):
            self._exec("BEGIN")
            for _ in range(self.rng.randint(1, 4)):
                self._one_statement()
            self._exec("COMMIT")

    def _one_statement(self) -> None:
        choice = self.rng.random()
        if choice < 0.35 or self._next_customer < 5:
            self._insert_customer_and_order()
        elif choice < 0.55:
            self._update_order()
        elif choice < 0.65:
            self._change_primary_key()
        elif choice < 0.8:
            self._update_items()
        else:
            self._delete_something()

    def _insert_customer_and_order(self) -> None:
        rng = self.rng
        cid = self._next_customer
        self._next_customer += 1
        self._exec(
            "INSERT INTO customers (id, name, email, tier, avatar, joined) VALUES (%s,%s,%s,%s,%s,%s)",
            (
                cid,
                f"{rng.choice(_NAMES)} {cid}",
                f"user{cid}@example.com",
                rng.choice(["basic", "gold", "platinum"]),
                bytes(rng.randrange(256) for _ in range(rng.randint(0, 16))) if rng.random() < 0.8 else None,
                f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 12:34:56.{rng.randint(0, 999):03d}",
            ),
        )
        oid = self._next_order
        self._next_order += 1
        self._exec(
            "INSERT INTO orders (id, customer_id, amount, note, flags) VALUES (%s,%s,%s,%s,%s)",
            (oid, cid, f"{rng.randint(0, 99999)}.{rng.randint(0, 99):02d}",
             rng.choice([None, "", "leave at door", "a 'quoted' \"note\", with comma\nand newline"]),
             rng.choice(["", "gift", "gift,express", "express,fragile"])),
        )
        for line in range(1, rng.randint(1, 4)):
            self._exec(
                "INSERT INTO items (order_id, line, sku, qty, day) VALUES (%s,%s,%s,%s,%s)",
                (oid, line, f"SKU{rng.randint(0, 99999):05d}", rng.randint(0, 255),
                 rng.choice([None, "2024-02-29", "1999-12-31"])),
            )

    def _update_order(self) -> None:
        ids = self._ids("orders")
        if ids:
            self._exec(
                "UPDATE orders SET amount = amount + 1.25, note = %s WHERE id = %s",
                (f"updated {self.rng.randint(0, 1000)}", self.rng.choice(ids)),
            )

    def _change_primary_key(self) -> None:
        ids = self._ids("customers")
        if ids:
            old = self.rng.choice(ids)
            new = self._next_customer
            self._next_customer += 1
            self._exec("UPDATE customers SET id = %s, tier = 'gold' WHERE id = %s", (new, old))

    def _update_items(self) -> None:
        self._exec(
            "UPDATE items SET qty = (qty + 7) %% 256 WHERE order_id %% 3 = %s",
            (self.rng.randint(0, 2),),
        )

    def _delete_something(self) -> None:
        ids = self._ids("orders")
        if ids:
            oid = self.rng.choice(ids)
            self._exec("DELETE FROM items WHERE order_id = %s", (oid,))
            self._exec("DELETE FROM orders WHERE id = %s", (oid,))

    def finish(self, mark: int = 1) -> None:
        self._exec(f"INSERT INTO `{self.database}`.finish_mark VALUES (%s, 'done')", (mark,))
