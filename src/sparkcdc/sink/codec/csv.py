"""CSV as TiCDC writes it to storage (pkg/sink/codec/csv/csv_message.go).

Row layout: op, table, schema, [commit-ts], [is-update], [handle-key], columns. Strings (text,
dates, times, decimals, json, enum/set names, encoded binary) are quoted with the quote char
doubled inside; integers, bit, year and floats (Go's `%v`) are bare; NULL is the null string.
With output-old-value an UPDATE becomes a `D` row of the pre-image then an `I` row.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Optional, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo, Value
from sparkcdc.sink.codec.encoder import FileEncoder
from sparkcdc.sink.codec.mysqltypes import is_binary, type_name

if TYPE_CHECKING:
    import pyarrow as pa

HEADER_META = ("ticdc-meta$operation", "ticdc-meta$table", "ticdc-meta$schema")
_BARE_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "bit", "year"})


def go_float_text(text: str) -> str:
    """Go's `%v` of a float from our shortest decimal text: the shortest digits, in exponent
    form when the decimal exponent is < -4 or >= 6 (strconv's 'g' rule for shortest)."""
    number = Decimal(text)
    if number.is_zero():
        return "-0" if text.startswith("-") else "0"
    sign, digits, exponent = number.normalize().as_tuple()
    digit_text = "".join(map(str, digits))
    exp10 = len(digit_text) - 1 + exponent  # decimal exponent of the leading digit
    neg = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:
        mantissa = digit_text[0] + ("." + digit_text[1:] if len(digit_text) > 1 else "")
        return f"{neg}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    return neg + format(number.normalize().copy_abs(), "f")


class CSVEncoder(FileEncoder):
    """TiCDC's CSV BatchEncoder: one line per row (two for an UPDATE with output-old-value)."""

    file_extension = "csv"

    def __init__(self, sink: SinkConfig, native: bool = True):
        """`native`: encode `encode_arrow` rows with sparkcdc_native when it is built with the
        CSV encoder (else, or when False, with the Python reference)."""
        self._sink = sink
        self._csv = sink.csv
        self._native = None
        if native:
            from sparkcdc.upstream.native_decode import native_encoder_module

            module = native_encoder_module()
            self._native = module if module is not None and hasattr(module, "CsvLayout") else None
        self._native_layouts: dict[tuple, Any] = {}

    @property
    def is_native(self) -> bool:
        """Whether `encode_arrow` runs in sparkcdc_native."""
        return self._native is not None

    # -- values -------------------------------------------------------------------------
    def _quoted(self, text: str) -> str:
        quote = self._csv.quote
        if quote:
            return quote + text.replace(quote, quote + quote) + quote
        return self._escaped(text)

    def _escaped(self, text: str) -> str:
        """Without a quote char, TiCDC backslash-escapes CR, LF, backslash and the delimiter."""
        delimiter = self._csv.delimiter
        out = []
        i = 0
        while i < len(text):
            if delimiter and text.startswith(delimiter, i):
                out.append("".join("\\" + ch for ch in delimiter))
                i += len(delimiter)
                continue
            ch = text[i]
            if ch in "\r\n\\":
                out.append("\\" + {"\r": "r", "\n": "n"}.get(ch, ch))
            else:
                out.append(ch)
            i += 1
        return "".join(out)

    def format_value(self, col: ColumnInfo, value: Value) -> str:
        if value is None:
            return self._csv.null
        name = type_name(col)
        if name in _BARE_TYPES:
            return value
        if name in ("float", "double"):
            return go_float_text(value)
        if is_binary(col):
            raw = value.encode("latin-1")
            if self._csv.binary_encoding_method == "hex":
                return self._quoted(raw.hex())
            return self._quoted(base64.b64encode(raw).decode("ascii"))
        return self._quoted(value)

    # -- rows ---------------------------------------------------------------------------
    def header(self, table: TableInfo) -> bytes:
        """The field header line TiCDC puts first in each file with output-field-header."""
        if not self._csv.output_field_header:
            return b""
        names = list(HEADER_META)
        if self._csv.include_commit_ts:
            names.append("ticdc-meta$commit-ts")
        if self._csv.output_old_value:
            names.append("ticdc-meta$is-update")
        names.extend(table.column_names)
        return (self._csv.delimiter.join(names) + self._sink.terminator).encode()

    def _handle_key(self, table: TableInfo, values: Sequence[Value]) -> str:
        # kv.Handle.String(): the integer for an int handle, `{v1, v2}` for a common handle.
        index = {c.name: i for i, c in enumerate(table.columns)}
        parts = [values[index[name]] or "" for name in table.handle_key if name in index]
        if len(parts) == 1 and parts[0].lstrip("-").isdigit():
            return parts[0]
        return "{" + ", ".join(parts) + "}"

    def _line(self, table: TableInfo, row: RowChange, op: str, values: Sequence[Value]) -> str:
        fields = [self._quoted(op), self._quoted(table.table), self._quoted(table.schema)]
        if self._csv.include_commit_ts:
            fields.append(str(row.commit_ts))
        if self._csv.output_old_value:
            fields.append("true" if row.op == "update" else "false")
        if self._csv.output_handle_key:
            fields.append(self._quoted(self._handle_key(table, values)))
        fields.extend(self.format_value(c, v) for c, v in zip(table.columns, values))
        return self._csv.delimiter.join(fields) + self._sink.terminator

    def encode_row(self, table: TableInfo, row: RowChange) -> str:
        if row.op == "delete":
            assert row.before is not None
            return self._line(table, row, "D", row.before)
        assert row.after is not None
        if row.op == "insert":
            return self._line(table, row, "I", row.after)
        if self._csv.output_old_value:
            assert row.before is not None
            return self._line(table, row, "D", row.before) + self._line(table, row, "I", row.after)
        return self._line(table, row, "U", row.after)

    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> bytes:
        return "".join(self.encode_row(table, row) for row in rows).encode()

    def encode_arrow(self, table: TableInfo, commit_ts: pa.Int64Array, ops: pa.StringArray,
                     before: pa.ListArray, after: pa.ListArray) -> list[tuple[int, bytes]]:
        """`encode_rows` per transaction of one table's rows given as columns (see
        codec.Encoder.encode_arrow)."""
        from sparkcdc.sink.codec.arrow_input import arrow_buffers, arrow_rows, arrow_transactions

        native = self._native_layout(table)
        rows = arrow_rows(table, commit_ts, ops, before, after, check_widths=native is None)
        if not len(rows):
            return []
        if native is None:
            return [(ts, self.encode_rows(table, changes)) for ts, changes in arrow_transactions(table, rows)]
        return native.encode(len(rows), *arrow_buffers(rows))

    def _native_layout(self, table: TableInfo) -> Optional[Any]:
        if self._native is None:
            return None
        key = (table.schema, table.table, table.version, table.columns)
        layout = self._native_layouts.get(key)
        if layout is None:
            layout = self._native_layouts[key] = self._compile_native(table)
        return layout

    def _compile_native(self, table: TableInfo) -> Any:
        assert self._native is not None
        csv = self._csv
        start = csv.delimiter + self._quoted(table.table) + csv.delimiter + self._quoted(table.schema)
        index = {c.name: i for i, c in enumerate(table.columns)}
        escaped_delimiter = "".join("\\" + ch for ch in csv.delimiter)
        return self._native.CsvLayout(
            f"{table.schema}.{table.table}",
            tuple(self._quoted(op) + start for op in ("D", "I", "U")),
            [self._value_kind(c) for c in table.columns],
            [index[name] for name in table.handle_key if name in index],
            (csv.delimiter, csv.quote, escaped_delimiter, csv.null, self._sink.terminator),
            (csv.include_commit_ts, csv.output_old_value, csv.output_handle_key, csv.binary_encoding_method == "hex"),
        )

    @staticmethod
    def _value_kind(col: ColumnInfo) -> str:
        """How `format_value` writes the column, for the native encoder."""
        name = type_name(col)
        if name in _BARE_TYPES:
            return "bare"
        if name in ("float", "double"):
            return "float"
        return "binary" if is_binary(col) else "quoted"

    def encode_ddl(self, ddl: DDLEvent) -> Optional[bytes]:
        return None

    def encode_watermark(self, ts: int) -> Optional[bytes]:
        return None
