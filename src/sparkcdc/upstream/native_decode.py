"""Chooses the row-image decoder and compiles per-table layouts for the native one.

The native decoder (`sparkcdc_native`, Rust, built from `native/` by scripts/setup.sh) turns a
ROWS event body straight into tuples of canonical text. It must produce exactly what the pure
Python path (mysql-replication + `values.converter`) produces, which stays the reference:
`compile_layout` only accepts column shapes whose decoding it reproduces and returns None for
anything else (MySQL binary JSON, pre-5.6 temporal types, metadata that disagrees with the
schema store), so that table falls back to the pure path.

The same extension frames the replication stream of a range (`BinlogRangeReader`, used by
`range_reader.read_range_batches`) when it has it; without the extension mysql-replication frames
the events.

Selection is automatic: native when the extension imports, pure otherwise. Setting
SPARKCDC_PURE_PYTHON_DECODER=1 forces the pure path (for tests and comparisons). The same
extension carries the canal-json encoder (`native_encoder_module`, used by
`sink.codec.canal_json`); SPARKCDC_PURE_PYTHON_ENCODER=1 forces the Python encoder.
"""

from __future__ import annotations

import codecs
import os
from typing import Any, Optional

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from sparkcdc.model.events import ColumnInfo, TableInfo

FORCE_PURE_ENV = "SPARKCDC_PURE_PYTHON_DECODER"
FORCE_PURE_ENCODER_ENV = "SPARKCDC_PURE_PYTHON_ENCODER"

_INT_WIDTHS = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 8}
_INT_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint"}


def native_module() -> Optional[Any]:
    """The native extension module, or None when it is not built or the pure path is forced."""
    if _forced(FORCE_PURE_ENV):
        return None
    module = _built_module()
    return module if module is not None and _is_current(module) else None


def native_encoder_module() -> Optional[Any]:
    """The native extension when it has the encoders (`CanalJsonLayout`; `CsvLayout` came with
    it), or None when it is not built, is an older build, or SPARKCDC_PURE_PYTHON_ENCODER=1
    forces the Python encoders."""
    if _forced(FORCE_PURE_ENCODER_ENV):
        return None
    module = _built_module()
    return module if module is not None and hasattr(module, "CanalJsonLayout") else None


def _forced(env: str) -> bool:
    return os.environ.get(env, "").strip().lower() in ("1", "true", "yes", "on")


def _built_module() -> Optional[Any]:
    try:
        import sparkcdc_native
    except ImportError:
        return None
    return sparkcdc_native


def _is_current(module: Any) -> bool:
    # A build from an older native/ lacks the columnar builder the source needs.
    return hasattr(module, "ChangeBatchBuilder")


def decoder_description() -> str:
    """One line for `--version` and the server log: which row decoder and canal-json/CSV encoders
    this process uses."""
    return _row_decoder() + "; " + _canal_json_encoder()


def _row_decoder() -> str:
    module = native_module()
    if module is not None:
        framer = ("native" if hasattr(module, "BinlogRangeReader")
                  else "mysql-replication (sparkcdc_native predates the native framer; rerun scripts/setup.sh)")
        return f"row decoder: native (sparkcdc_native {module.__version__}), binlog framer: {framer}"
    if os.environ.get(FORCE_PURE_ENV):
        return f"row decoder: pure Python (forced by {FORCE_PURE_ENV}), binlog framer: mysql-replication"
    if _built_module() is not None:
        return ("row decoder: pure Python (sparkcdc_native is older than native/; rerun scripts/setup.sh), "
                "binlog framer: mysql-replication")
    return ("row decoder: pure Python (sparkcdc_native not built; run scripts/setup.sh with cargo installed), "
            "binlog framer: mysql-replication")


def _canal_json_encoder() -> str:
    if native_encoder_module() is not None:
        return "canal-json/CSV encoders: native"
    if _forced(FORCE_PURE_ENCODER_ENV):
        return f"canal-json/CSV encoders: pure Python (forced by {FORCE_PURE_ENCODER_ENV})"
    if _built_module() is not None:
        return "canal-json/CSV encoders: pure Python (sparkcdc_native is older than native/; rerun scripts/setup.sh)"
    return "canal-json/CSV encoders: pure Python (sparkcdc_native not built)"


def compile_layout(module: Any, info: TableInfo, binlog_columns: list) -> Optional[Any]:
    """A native `RowLayout` for rows of `info` described by TABLE_MAP `binlog_columns`, or None
    when some column needs the pure Python path."""
    if len(binlog_columns) != len(info.columns):
        return None
    specs = []
    for column, binlog in zip(info.columns, binlog_columns):
        spec = _column_spec(column, binlog)
        if spec is None:
            return None
        specs.append(spec)
    return module.RowLayout(f"{info.schema}.{info.table}", specs)


def _spec(kind: str, a: int = 0, b: int = 0, elements: tuple = (), encoding: str = "", errors: str = "") -> tuple:
    return (kind, a, b, list(elements), encoding, errors)


def _column_spec(column: ColumnInfo, binlog) -> Optional[tuple]:
    """The native spec that reproduces `values.converter(column)` applied to mysql-replication's
    decoding of `binlog`, or None."""
    t, binlog_type = column.mysql_type, binlog.type
    scale = column.scale or 0
    if binlog_type in _INT_WIDTHS:
        return _spec("int", _INT_WIDTHS[binlog_type], int(bool(binlog.unsigned))) if t in _INT_TYPES else None
    if binlog_type == FIELD_TYPE.FLOAT:
        return _spec("float") if t == "float" else None
    if binlog_type == FIELD_TYPE.DOUBLE:
        return _spec("double") if t == "double" else None
    if binlog_type == FIELD_TYPE.NEWDECIMAL:
        ok = t == "decimal" and binlog.decimals == scale and binlog.precision <= 65
        return _spec("decimal", binlog.precision, binlog.decimals) if ok else None
    if binlog_type == FIELD_TYPE.BIT:
        return _spec("bit", binlog.bytes, binlog.bits) if t == "bit" and 0 < binlog.bytes <= 8 else None
    if binlog_type == FIELD_TYPE.DATE:
        return _spec("date") if t == "date" else None
    if binlog_type == FIELD_TYPE.DATETIME2:
        return _spec("datetime", binlog.fsp) if t == "datetime" and binlog.fsp == scale else None
    if binlog_type == FIELD_TYPE.TIMESTAMP2:
        return _spec("timestamp", binlog.fsp) if t == "timestamp" and binlog.fsp == scale else None
    if binlog_type == FIELD_TYPE.TIME2:
        return _spec("time", binlog.fsp) if t == "time" and binlog.fsp == scale else None
    if binlog_type == FIELD_TYPE.YEAR:
        return _spec("year") if t == "year" else None
    if binlog_type == FIELD_TYPE.ENUM:
        if t != "enum" or not binlog.enum_values:
            return None
        return _spec("enum", binlog.size, 0, tuple(binlog.enum_values[1:]))
    if binlog_type == FIELD_TYPE.SET:
        if t != "set" or not binlog.set_values or tuple(binlog.set_values) != tuple(column.elements):
            return None
        return _spec("set", binlog.size, 0, column.elements)
    if binlog_type in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _string_spec(column, binlog, 2 if binlog.max_length > 255 else 1)
    if binlog_type == FIELD_TYPE.BLOB:
        return _string_spec(column, binlog, binlog.length_size)
    if binlog_type == FIELD_TYPE.GEOMETRY:
        return _spec("bytes", binlog.length_size) if _is_bytes_column(column) else None
    return None  # MySQL binary JSON, pre-5.6 temporal types, ...


def _is_bytes_column(column: ColumnInfo) -> bool:
    return column.is_binary or column.mysql_type in ("geometry", "point", "linestring", "polygon")


def _string_spec(column: ColumnInfo, binlog, length_size: int) -> Optional[tuple]:
    # mysql-replication decodes with the column's charset; a charset Python has no codec for
    # (notably "binary") leaves bytes. values.converter then picks text, latin-1 or JSON.
    encoding = RowsEvent.charset_to_encoding(binlog.character_set_name) if binlog.character_set_name else "utf-8"
    try:
        codecs.lookup(encoding)
        decodes_to_text = True
    except LookupError:
        decodes_to_text = False
    t = column.mysql_type
    if t in ("enum", "set", "bit") or t in _INT_TYPES:
        return None
    if _is_bytes_column(column):
        if decodes_to_text:
            return None  # a binary column under a text charset: leave it to the reference path
        pad_to = column.length if t == "binary" and column.length else 0
        return _spec("bytes", length_size, pad_to)
    if decodes_to_text:
        return _spec("text", length_size, 0, (), encoding, "strict")
    # Undecodable charset: values._text (and values._json) read the bytes as UTF-8.
    return _spec("text", length_size, 0, (), "utf-8", "strict" if t == "json" else "surrogateescape")
