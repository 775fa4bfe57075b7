"""MySQL boolean expressions over a row's columns (event filters' `ignore-*-value-expr`).

The text is parsed by sqlglot's MySQL dialect (a maintained parser) once, when the changefeed
config is validated; anything outside the supported subset is refused then, with the reason.
Evaluation is plain Python over a row's canonical values typed by the TableInfo, with MySQL's
rules: three-valued logic with NULL, a string compared with a number is read as a number
(`'12abc'` is 12), integers and decimals compare exactly, division by zero is NULL, and string
comparison is binary (TiDB's default utf8mb4_bin collation, which TiCDC evaluates with).
DATE, DATETIME, TIMESTAMP and TIME columns compare as temporal values (filter/temporal.py): a
string constant is read as a date/time of the column's kind, a number compares with the value's
numeric form. TIMESTAMP values are the UTC text the pipeline carries.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Optional, Sequence

import sqlglot
from sqlglot import exp

from sparkcdc.errors import ErrExpressionColumnNotFound, ErrExpressionParseFailed
from sparkcdc.filter import temporal
from sparkcdc.filter.temporal import Temporal
from sparkcdc.model.events import INTEGER_TYPES, TableInfo

SqlValue = Any  # None | int | Decimal | float | str


class ExpressionError(ErrExpressionParseFailed):
    """An expression sparkcdc cannot evaluate; raised at changefeed creation."""


class ExpressionColumnError(ErrExpressionColumnNotFound):
    """An expression reads a column its table does not have."""


_NUMBER_PREFIX = re.compile(r"^\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def to_number(value: SqlValue) -> int | Decimal | float:
    """MySQL's implicit string-to-number cast: the longest numeric prefix, else 0."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, Decimal, float)):
        return value
    if isinstance(value, Temporal):
        return value.as_number()
    found = _NUMBER_PREFIX.match(value)
    if not found:
        return 0
    text = found.group(0).strip()
    if "e" in text.lower():
        return float(text)
    return Decimal(text) if "." in text else int(text)


def _common(a, b):
    """Bring two numbers to a common type: float wins, then Decimal, then int."""
    if isinstance(a, float) or isinstance(b, float):
        return float(a), float(b)
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return Decimal(a), Decimal(b)
    return a, b


def compare(a: SqlValue, b: SqlValue) -> Optional[int]:
    """-1, 0, 1, or None when either side is NULL."""
    if a is None or b is None:
        return None
    if isinstance(a, Temporal) or isinstance(b, Temporal):
        result = temporal.compare_temporal(a, b)
        if result is not None:
            return result
    if isinstance(a, str) and isinstance(b, str):
        return (a > b) - (a < b)
    x, y = _common(to_number(a), to_number(b))
    return (x > y) - (x < y)


def truth(value: SqlValue) -> Optional[bool]:
    if value is None:
        return None
    return to_number(value) != 0


def _bool(value: Optional[bool]) -> Optional[int]:
    return None if value is None else int(value)


def to_text(value: SqlValue) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value).removesuffix(".0") if value == int(value) else repr(value)
    return str(value)


def like_regex(pattern: str, escape: str = "\\") -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _arith(op: Callable, a, b):
    if a is None or b is None:
        return None
    x, y = _common(to_number(a), to_number(b))
    return op(x, y)


def _divide(a, b):
    if a is None or b is None:
        return None
    x, y = _common(to_number(a), to_number(b))
    if y == 0:
        return None
    if isinstance(x, float):
        return x / y
    return Decimal(x) / Decimal(y)


def _int_divide(a, b):
    if a is None or b is None:
        return None
    x, y = to_number(a), to_number(b)
    if y == 0:
        return None
    quotient = Decimal(x) / Decimal(y)
    return int(quotient)  # truncates toward zero, as MySQL's DIV


def _modulo(a, b):
    if a is None or b is None:
        return None
    x, y = _common(to_number(a), to_number(b))
    if y == 0:
        return None
    result = abs(x) % abs(y)
    return -result if x < 0 else result


_BINARY_ARITH = {
    exp.Add: lambda a, b: _arith(lambda x, y: x + y, a, b),
    exp.Sub: lambda a, b: _arith(lambda x, y: x - y, a, b),
    exp.Mul: lambda a, b: _arith(lambda x, y: x * y, a, b),
    exp.Div: _divide,
    exp.IntDiv: _int_divide,
    exp.Mod: _modulo,
}
_COMPARISONS = {
    exp.EQ: lambda c: c == 0, exp.NEQ: lambda c: c != 0, exp.LT: lambda c: c < 0,
    exp.LTE: lambda c: c <= 0, exp.GT: lambda c: c > 0, exp.GTE: lambda c: c >= 0,
}


def _strings(function: Callable[..., SqlValue]) -> Callable[..., SqlValue]:
    """A string function of text arguments that is NULL when any argument is NULL."""
    def call(*args):
        if any(a is None for a in args):
            return None
        return function(*[to_text(a) for a in args])
    return call


def _substring(text, start, length=None):
    if text is None or start is None:
        return None
    text, start = to_text(text), int(to_number(start))
    if start == 0:
        return ""
    begin = start - 1 if start > 0 else len(text) + start
    if begin < 0:
        return ""
    if length is None:
        return text[begin:]
    return text[begin:begin + max(0, int(to_number(length)))]


def _round(value, digits=0):
    if value is None or digits is None:
        return None
    number, digits = to_number(value), int(to_number(digits))
    if isinstance(number, float):
        return round(number, digits)
    quantum = Decimal(1).scaleb(-digits)
    rounded = Decimal(number).quantize(quantum, rounding=decimal.ROUND_HALF_UP)
    return int(rounded) if digits <= 0 else rounded


def _numeric(function):
    def call(value):
        if value is None:
            return None
        number = to_number(value)
        return function(number)
    return call


def _floor_ceil(rounding):
    def call(value):
        if value is None:
            return None
        number = to_number(value)
        if isinstance(number, int):
            return number
        return int(Decimal(number).to_integral_value(rounding=rounding))
    return call


# sqlglot node -> (callable over evaluated arguments, argument keys in order)
_FUNCTIONS: dict[type, tuple[Callable, tuple[str, ...]]] = {
    exp.Lower: (_strings(str.lower), ("this",)),
    exp.Upper: (_strings(str.upper), ("this",)),
    exp.Abs: (_numeric(abs), ("this",)),
    exp.Floor: (_floor_ceil(decimal.ROUND_FLOOR), ("this",)),
    exp.Ceil: (_floor_ceil(decimal.ROUND_CEILING), ("this",)),
    exp.Round: (_round, ("this", "decimals")),
    exp.Substring: (_substring, ("this", "start", "length")),
    exp.Left: (_strings(lambda s, n: s[:max(0, int(to_number(n)))]), ("this", "expression")),
    exp.Right: (_strings(lambda s, n: s[len(s) - max(0, int(to_number(n))):] if int(to_number(n)) > 0 else ""),
                ("this", "expression")),
    exp.Nullif: (lambda a, b: None if compare(a, b) == 0 else a, ("this", "expression")),
}
_NAMED_FUNCTIONS: dict[str, Callable[..., SqlValue]] = {
    "OCTET_LENGTH": _strings(lambda s: len(s.encode("utf-8"))),
    "ISNULL": lambda v: int(v is None),
    "STRCMP": lambda a, b: compare(to_text(a), to_text(b)),
    "REVERSE": _strings(lambda s: s[::-1]),
    "LTRIM": _strings(str.lstrip),
    "RTRIM": _strings(str.rstrip),
    "SIGN": _numeric(lambda n: (n > 0) - (n < 0)),
}


@dataclass(frozen=True)
class Expression:
    """A compiled value expression; `columns` are the column names it reads (lower-case)."""

    text: str
    tree: exp.Expression
    columns: frozenset[str]

    def evaluate(self, row: Callable[[str], SqlValue]) -> Optional[bool]:
        return truth(_Evaluator(row).eval(self.tree))

    def bind(self, table: TableInfo) -> "BoundExpression":
        positions = {c.name.lower(): i for i, c in enumerate(table.columns)}
        missing = sorted(c for c in self.columns if c not in positions)
        if missing:
            raise ExpressionColumnError(
                f"expression {self.text!r} reads column {', '.join(missing)} which "
                f"{table.schema}.{table.table} does not have; fix the event filter's matcher or expression")
        converters = {name: _typed(table.columns[i]) for name, i in positions.items()}
        return BoundExpression(self, positions, converters)


@dataclass(frozen=True)
class BoundExpression:
    """An expression bound to a table version: evaluates canonical value tuples."""

    expression: Expression
    positions: dict
    converters: dict

    def matches(self, values: Sequence[Optional[str]]) -> bool:
        def column(name: str) -> SqlValue:
            value = values[self.positions[name]]
            return None if value is None else self.converters[name](value)
        return self.expression.evaluate(column) is True


def _typed(column) -> Callable[[str], SqlValue]:
    """Canonical text (model/events.py) to the MySQL value the expression engine compares."""
    base = column.mysql_type
    if base in INTEGER_TYPES or base in ("bit", "year"):
        return int
    if base == "decimal":
        return Decimal
    if base in ("float", "double"):
        return float
    if base in temporal.KIND_OF_TYPE:
        kind = temporal.KIND_OF_TYPE[base]
        return lambda text: Temporal(text, kind)
    return str


class _Evaluator:
    def __init__(self, row: Callable[[str], SqlValue]):
        self.row = row

    def eval(self, node: exp.Expression) -> SqlValue:
        kind = type(node)
        if kind is exp.Paren:
            return self.eval(node.this)
        if kind is exp.Column:
            return self.row(node.name.lower())
        if kind is exp.Literal:
            return node.this if node.is_string else to_number(node.this)
        if kind is exp.Null:
            return None
        if kind is exp.Boolean:
            return int(node.this)
        if kind is exp.Neg:
            value = self.eval(node.this)
            return None if value is None else -to_number(value)
        if kind in _COMPARISONS:
            result = compare(self.eval(node.this), self.eval(node.expression))
            return None if result is None else int(_COMPARISONS[kind](result))
        if kind is exp.NullSafeEQ:
            a, b = self.eval(node.this), self.eval(node.expression)
            if a is None or b is None:
                return int(a is None and b is None)
            return int(compare(a, b) == 0)
        if kind is exp.And:
            left = truth(self.eval(node.this))
            if left is False:
                return 0
            right = truth(self.eval(node.expression))
            if right is False:
                return 0
            return None if left is None or right is None else 1
        if kind is exp.Or:
            left = truth(self.eval(node.this))
            if left is True:
                return 1
            right = truth(self.eval(node.expression))
            if right is True:
                return 1
            return None if left is None or right is None else 0
        if kind is exp.Xor:
            left, right = truth(self.eval(node.this)), truth(self.eval(node.expression))
            return None if left is None or right is None else int(left != right)
        if kind is exp.Not:
            value = truth(self.eval(node.this))
            return None if value is None else int(not value)
        if kind is exp.Is:
            value = self.eval(node.this)
            target = node.expression
            if isinstance(target, exp.Null):
                return int(value is None)
            return int(truth(value) is bool(target.this))
        if kind is exp.In:
            value = self.eval(node.this)
            if value is None:
                return None
            saw_null = False
            for item in node.expressions:
                result = compare(value, self.eval(item))
                if result == 0:
                    return 1
                saw_null |= result is None
            return None if saw_null else 0
        if kind is exp.Between:
            value = self.eval(node.this)
            low = compare(value, self.eval(node.args["low"]))
            high = compare(value, self.eval(node.args["high"]))
            return _and3(None if low is None else low >= 0, None if high is None else high <= 0)
        if kind in (exp.Like, exp.Escape):
            return self.like(node)
        if kind is exp.RegexpLike:
            value, pattern = to_text(self.eval(node.this)), to_text(self.eval(node.expression))
            if value is None or pattern is None:
                return None
            return int(re.search(pattern, value) is not None)
        if kind in _BINARY_ARITH:
            return _BINARY_ARITH[kind](self.eval(node.this), self.eval(node.expression))
        if kind is exp.Coalesce:
            for item in [node.this, *node.expressions]:
                value = self.eval(item)
                if value is not None:
                    return value
            return None
        if kind is exp.If:
            return self.eval(node.args["true"]) if truth(self.eval(node.this)) else (
                self.eval(node.args["false"]) if node.args.get("false") is not None else None)
        if kind is exp.Case:
            subject = self.eval(node.this) if node.this is not None else None
            for branch in node.args["ifs"]:
                if node.this is not None:
                    hit = compare(subject, self.eval(branch.this)) == 0
                else:
                    hit = truth(self.eval(branch.this)) is True
                if hit:
                    return self.eval(branch.args["true"])
            default = node.args.get("default")
            return self.eval(default) if default is not None else None
        if kind is exp.Concat:
            values = [to_text(self.eval(a)) for a in node.expressions]
            return None if any(v is None for v in values) else "".join(values)
        if kind is exp.Trim:
            value = to_text(self.eval(node.this))
            return None if value is None else value.strip(" ")
        if kind is exp.Cast:
            return _cast(self.eval(node.this), node.to)
        if kind is exp.Length:  # LENGTH counts bytes (binary=True), CHAR_LENGTH characters
            value = to_text(self.eval(node.this))
            if value is None:
                return None
            return len(value.encode("utf-8")) if node.args.get("binary") else len(value)
        if kind in _FUNCTIONS:
            function, keys = _FUNCTIONS[kind]
            args = [self.eval(node.args[k]) for k in keys if node.args.get(k) is not None]
            return function(*args)
        if kind is exp.Anonymous:
            args = [self.eval(a) for a in node.expressions]
            return _NAMED_FUNCTIONS[node.name.upper()](*args)
        raise ExpressionError(f"unsupported expression {node.sql('mysql')!r}")

    def like(self, node: exp.Expression) -> SqlValue:
        escape = "\\"
        if isinstance(node, exp.Escape):
            escape = to_text(self.eval(node.expression)) or "\\"
            node = node.this
        value, pattern = to_text(self.eval(node.this)), to_text(self.eval(node.expression))
        if value is None or pattern is None:
            return None
        return int(like_regex(pattern, escape).fullmatch(value) is not None)


def _and3(a: Optional[bool], b: Optional[bool]) -> Optional[int]:
    if a is False or b is False:
        return 0
    return None if a is None or b is None else 1


_TEMPORAL_CASTS = {
    temporal.DATE: (exp.DataType.Type.DATE,),
    temporal.DATETIME: (exp.DataType.Type.DATETIME, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ),
    temporal.TIME: (exp.DataType.Type.TIME,),
}


def _cast(value: SqlValue, to: exp.DataType) -> SqlValue:
    if value is None:
        return None
    if to.is_type(*exp.DataType.INTEGER_TYPES):
        number = to_number(value)
        return int(number)
    if to.is_type(exp.DataType.Type.DECIMAL):
        return Decimal(to_number(value))
    if to.is_type(exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT):
        return float(to_number(value))
    if to.is_type(*exp.DataType.TEXT_TYPES, exp.DataType.Type.CHAR):
        return to_text(value)
    for kind, types in _TEMPORAL_CASTS.items():
        if to.is_type(*types):
            return temporal.cast(value, kind)
    raise ExpressionError(f"CAST to {to.sql('mysql')} is not supported")


_SUPPORTED_NODES = (
    {exp.Paren, exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Neg,
     exp.NullSafeEQ, exp.And, exp.Or, exp.Xor, exp.Not, exp.Is, exp.In, exp.Between, exp.Like,
     exp.Escape, exp.RegexpLike, exp.Coalesce, exp.If, exp.Case, exp.Concat, exp.Trim, exp.Cast,
     exp.DataType, exp.Anonymous, exp.Length}
    | set(_COMPARISONS) | set(_BINARY_ARITH) | set(_FUNCTIONS)
)


def compile_expression(text: str, where: str) -> Expression:
    """Parse and check an expression; ExpressionError names `where` and the reason."""
    def refuse(reason: str) -> ExpressionError:
        return ExpressionError(f"`{where}` {text!r} cannot be evaluated: {reason}; write a MySQL "
                               "boolean expression over the row's columns, e.g. \"id > 10 AND name IS NULL\"")

    try:
        tree = sqlglot.parse_one(text, read="mysql")
    except sqlglot.errors.SqlglotError as exc:
        raise refuse(f"syntax error: {str(exc).splitlines()[0]}") from None
    if isinstance(tree, (exp.Query, exp.DDL, exp.DML, exp.Command)) or tree is None:
        raise refuse("it is a statement, not an expression")
    columns = set()
    for node in tree.walk():
        if isinstance(node, exp.Cast):
            try:
                _cast("0", node.to)
            except ExpressionError as exc:
                raise refuse(exc.message) from None
        if isinstance(node, exp.Anonymous) and node.name.upper() not in _NAMED_FUNCTIONS:
            raise refuse(f"function {node.name.upper()}() is not supported")
        if type(node) not in _SUPPORTED_NODES:
            raise refuse(f"{node.sql('mysql')!r} ({type(node).__name__}) is not supported")
        if isinstance(node, exp.Column):
            if node.table:
                raise refuse(f"column {node.sql('mysql')} must not be qualified")
            columns.add(node.name.lower())
    return Expression(text, tree, frozenset(columns))
