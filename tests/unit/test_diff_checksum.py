"""The SQL `sparkcdc diff` runs, pinned as text: NULL-safe row expression, chunk ranges."""

from sparkcdc.diff.checksum import (
    Chunk,
    Column,
    TableShape,
    canonical_expression,
    checksum_sql,
    next_boundary_sql,
    row_expression,
    rows_sql,
    same_columns,
)

SHAPE = TableShape("db", "t", (Column("a", "int", "int(11)"), Column("b", "int", "int(11)"),
                               Column("v", "varchar", "varchar(10)")), ("a", "b"))


def test_canonical_expressions_by_type():
    assert canonical_expression(Column("x", "varbinary", "varbinary(16)")) == "HEX(`x`)"
    assert canonical_expression(Column("x", "char", "char(8) binary")) == "HEX(`x`)"
    assert canonical_expression(Column("x", "bit", "bit(3)")) == "CAST(`x`+0 AS CHAR)"
    assert canonical_expression(Column("x", "text", "text")) == "CONVERT(`x` USING utf8mb4)"
    assert canonical_expression(Column("x", "double", "double")) == "CAST(`x` AS CHAR)"
    assert canonical_expression(Column("x`y", "timestamp", "timestamp")) == "CAST(`x``y` AS CHAR)"


def test_row_expression_tells_null_from_empty():
    assert row_expression(SHAPE) == (
        "CONCAT_WS(',', CAST(`a` AS CHAR), CAST(`b` AS CHAR), CONVERT(`v` USING utf8mb4), "
        "CONCAT(ISNULL(`a`), ISNULL(`b`), ISNULL(`v`)))")


def test_checksum_of_a_bounded_chunk_uses_row_value_comparison():
    sql, args = checksum_sql(SHAPE, Chunk(3, (1, 2), (5, 6)))
    assert sql == ("SELECT COUNT(*), BIT_XOR(CAST(CONV(SUBSTRING(MD5(" + row_expression(SHAPE)
                   + "), 1, 16), 16, 10) AS UNSIGNED)) FROM `db`.`t` "
                   "WHERE (`a`, `b`) > (%s, %s) AND (`a`, `b`) <= (%s, %s)")
    assert args == [1, 2, 5, 6]


def test_open_chunks_and_single_column_keys():
    shape = TableShape("db", "t", SHAPE.columns, ("a",))
    assert checksum_sql(shape, Chunk(0, None, None))[0].endswith("FROM `db`.`t` WHERE TRUE")
    sql, args = next_boundary_sql(shape, (7,), 1000)
    assert sql == "SELECT `a` FROM `db`.`t` WHERE `a` > %s ORDER BY `a` LIMIT 1 OFFSET 999" and args == [7]
    sql, args = rows_sql(shape, Chunk(0, None, (9,)))
    assert sql == ("SELECT CAST(`a` AS CHAR), CAST(`b` AS CHAR), CONVERT(`v` USING utf8mb4) FROM `db`.`t` "
                   "WHERE `a` <= %s ORDER BY `a`") and args == [9]


def test_keyless_table_is_one_chunk_in_any_order():
    shape = TableShape("db", "t", SHAPE.columns, ())
    assert rows_sql(shape, Chunk(0, None, None))[0].endswith("WHERE TRUE ORDER BY 1")


def test_same_columns_ignores_display_width_and_name_case():
    assert same_columns([Column("A", "int", "int(11)")], [Column("a", "int", "int(10)")])
    assert not same_columns([Column("a", "int", "int")], [Column("a", "bigint", "bigint")])
    assert not same_columns([Column("a", "int")], [Column("a", "int"), Column("b", "int")])
