"""`sparkcdc diff`: are two MySQL-compatible endpoints' tables equal? (sync-diff-inspector's job)

Each table is cut into chunks by primary-key ranges taken from the source; each chunk's rows are
checksummed on both sides in SQL (count plus BIT_XOR of a 64-bit MD5 prefix over a NULL-safe
CONCAT_WS of the columns), and only chunks whose checksums differ are read row by row to report
missing, extra and changed rows.
"""

from sparkcdc.diff.inspector import DiffOptions, DiffReport, RowDifference, TableDiff, diff_endpoints

__all__ = ["DiffOptions", "DiffReport", "RowDifference", "TableDiff", "diff_endpoints"]
