from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.pipeline.update_split import split_key_updates

TABLE = TableInfo("db", "t", 1, (
    ColumnInfo("id", "int", is_primary_key=True),
    ColumnInfo("email", "varchar", is_unique_key=True),
    ColumnInfo("v", "int"),
), 1, ("id",))


def row(ts, seq, op, before=None, after=None):
    return RowChange(ts, "db", "t", op, before, after, seq)


def test_pk_or_uk_change_splits_and_the_txn_is_reordered_deletes_first():
    rows = [
        row(10, 0, "insert", after=("3", "c", "0")),
        row(10, 1, "update", ("1", "a", "0"), ("2", "a", "0")),  # PK change
        row(10, 2, "update", ("5", "e", "0"), ("5", "e", "1")),  # plain update
        row(20, 0, "update", ("6", "x", "0"), ("6", "y", "0")),  # UK change, next txn
    ]
    out = split_key_updates(TABLE, rows)
    assert [(r.commit_ts, r.op, r.before, r.after) for r in out] == [
        (10, "delete", ("1", "a", "0"), None),
        (10, "update", ("5", "e", "0"), ("5", "e", "1")),
        (10, "insert", None, ("3", "c", "0")),
        (10, "insert", None, ("2", "a", "0")),
        (20, "delete", ("6", "x", "0"), None),
        (20, "insert", None, ("6", "y", "0")),
    ]


def test_txn_without_key_change_keeps_its_order():
    rows = [row(10, 0, "insert", after=("3", "c", "0")), row(10, 1, "delete", ("3", "c", "0"))]
    assert split_key_updates(TABLE, rows) == rows
