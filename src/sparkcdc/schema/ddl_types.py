"""TiCDC's DDL type names (the event-filter spellings of pkg/binlog-filter) and the allow list.

`ALLOW_LIST` is the table of the DDL document: which types replicate when the table has a valid
index, has none with force-replicate=false, has none with force-replicate=true. `ACTION_TYPES`
numbers them as TiDB does, for the codecs and storage schema files that write the number.
"""

from __future__ import annotations

CREATE_DATABASE = "create database"
DROP_DATABASE = "drop database"
MODIFY_SCHEMA_CHARSET = "modify schema charset and collate"
CREATE_TABLE = "create table"
DROP_TABLE = "drop table"
TRUNCATE_TABLE = "truncate table"
RENAME_TABLE = "rename table"
CREATE_INDEX = "create index"
DROP_INDEX = "drop index"
ADD_PRIMARY_KEY = "add primary key"
DROP_PRIMARY_KEY = "drop primary key"
ADD_COLUMN = "add column"
DROP_COLUMN = "drop column"
MODIFY_COLUMN = "modify column"
SET_DEFAULT_VALUE = "set default value"
MODIFY_TABLE_COMMENT = "modify table comment"
RENAME_INDEX = "rename index"
ADD_PARTITION = "add table partition"
DROP_PARTITION = "drop table partition"
TRUNCATE_PARTITION = "truncate table partition"
EXCHANGE_PARTITION = "exchange table partition"
REORGANIZE_PARTITION = "reorganize table partition"
# DM's event names: TiDB runs COALESCE as a reorganize job, and has no REBUILD/ANALYZE/CHECK/
# OPTIMIZE/REPAIR PARTITION jobs (they change neither schema nor rows), so neither replicates.
COALESCE_PARTITION = "coalesce table partition"
REBUILD_PARTITION = "rebuild table partition"
ALTER_PARTITIONING = "alter table partitioning"
REMOVE_PARTITIONING = "remove table partitioning"
CREATE_VIEW = "create view"
DROP_VIEW = "drop view"
MODIFY_TABLE_CHARSET = "modify table charset and collate"
RECOVER_TABLE = "recover table"
REBASE_AUTO_ID = "rebase auto id"
ALTER_INDEX_VISIBILITY = "alter index visibility"
ALTER_TTL_INFO = "alter ttl info"
ALTER_TTL_REMOVE = "alter ttl remove"
MULTI_SCHEMA_CHANGE = "multi schema change"
ADD_FOREIGN_KEY = "add foreign key"
DROP_FOREIGN_KEY = "drop foreign key"
ADD_CHECK_CONSTRAINT = "add check constraint"
DROP_CHECK_CONSTRAINT = "drop check constraint"
# An ALTER TABLE that changes nothing TiCDC replicates (ENGINE=, FORCE, ORDER BY, ...).
ALTER_TABLE = "alter table"
# Statements on objects TiCDC does not know (triggers, procedures, events, sequences, ...).
OTHER = "other"
# A DDL the parser could not understand: the changefeed that reaches it stops (configurable skip).
UNPARSEABLE = "unparseable"

# DDL type -> (valid index, no valid index and force-replicate=false, ... force-replicate=true).
ALLOW_LIST: dict[str, tuple[bool, bool, bool]] = {
    CREATE_DATABASE: (True, True, True),
    DROP_DATABASE: (True, True, True),
    MODIFY_SCHEMA_CHARSET: (True, True, True),
    CREATE_INDEX: (True, True, True),
    DROP_INDEX: (True, False, True),
    ADD_PRIMARY_KEY: (True, True, True),
    DROP_PRIMARY_KEY: (True, False, True),
    CREATE_TABLE: (True, False, True),
    DROP_TABLE: (True, False, True),
    ADD_COLUMN: (True, False, True),
    DROP_COLUMN: (True, False, True),
    TRUNCATE_TABLE: (True, False, True),
    MODIFY_COLUMN: (True, False, True),
    RENAME_TABLE: (True, False, True),
    SET_DEFAULT_VALUE: (True, False, True),
    MODIFY_TABLE_COMMENT: (True, False, True),
    RENAME_INDEX: (True, False, True),
    ADD_PARTITION: (True, False, True),
    DROP_PARTITION: (True, False, True),
    TRUNCATE_PARTITION: (True, False, True),
    CREATE_VIEW: (True, False, True),
    DROP_VIEW: (True, False, True),
    MODIFY_TABLE_CHARSET: (True, False, True),
    RECOVER_TABLE: (True, False, True),
    REBASE_AUTO_ID: (True, False, True),
    ALTER_INDEX_VISIBILITY: (True, False, True),
    EXCHANGE_PARTITION: (True, False, True),
    REORGANIZE_PARTITION: (True, False, True),
    # Not rows of the document's table either, but in ddlWhiteListMap (TiDB's PARTITION BY and
    # REMOVE PARTITIONING jobs); TiCDC replicates them like the other partition DDLs.
    ALTER_PARTITIONING: (True, False, True),
    REMOVE_PARTITIONING: (True, False, True),
    ALTER_TTL_INFO: (True, False, True),
    ALTER_TTL_REMOVE: (True, False, True),
    # Not a row of the document's table, but TiDB's multi-schema change job is in ddlWhiteListMap.
    MULTI_SCHEMA_CHANGE: (True, False, True),
    # In ddlWhiteListMap since TiCDC's "add foreign key and drop foreign key DDL to the white list"
    # (#12329): a MySQL downstream needs the constraints to re-run the cascades the binlog lacks.
    ADD_FOREIGN_KEY: (True, False, True),
    DROP_FOREIGN_KEY: (True, False, True),
}

# DDLs that are about a database, not one table.
DATABASE_DDLS = frozenset({CREATE_DATABASE, DROP_DATABASE, MODIFY_SCHEMA_CHARSET})


def is_allowed(ddl_type: str, has_valid_index: bool, force_replicate: bool) -> bool:
    """Whether the allow list replicates `ddl_type` for a table in this state."""
    row = ALLOW_LIST.get(ddl_type)
    if row is None:
        return False
    if has_valid_index:
        return row[0]
    return row[2] if force_replicate else row[1]


# TiDB's ActionType numbers (pkg/meta/model/job.go), by action name. Both TiDB's names and
# the event-filter spellings ("create database", "create index") are accepted.
ACTION_TYPES = {
    "create schema": 1, "create database": 1, "drop schema": 2, "drop database": 2,
    "create table": 3, "drop table": 4, "add column": 5, "drop column": 6, "add index": 7,
    "create index": 7, "drop index": 8, "add foreign key": 9, "drop foreign key": 10,
    "truncate table": 11, "modify column": 12, "rebase auto id": 13,
    "rebase auto_increment id": 13, "rename table": 14, "set default value": 15,
    "shard row id": 16, "modify table comment": 17, "rename index": 18, "add partition": 19,
    "add table partition": 19, "drop partition": 20, "drop table partition": 20,
    "create view": 21, "modify table charset and collate": 22, "truncate partition": 23,
    "truncate table partition": 23, "drop view": 24, "recover table": 25,
    "modify schema charset and collate": 26, "alter database": 26, "lock table": 27,
    "unlock table": 28, "repair table": 29, "add primary key": 32, "drop primary key": 33,
    "create sequence": 34, "alter sequence": 35, "drop sequence": 36, "add columns": 37,
    "drop columns": 38, "alter index visibility": 41, "exchange partition": 42,
    "exchange table partition": 42, "add check constraint": 43, "drop check constraint": 44,
    "alter check constraint": 45, "rename tables": 47, "create tables": 60,
    "multi-schema change": 61, "multi schema change": 61, "recover schema": 63,
    "reorganize partition": 64, "reorganize table partition": 64,
    "alter table partitioning": 71, "remove partitioning": 72, "remove table partitioning": 72,
}


def action_type(ddl_type: str) -> int:
    """TiDB's ActionType number of a DDL type name (0 for one it does not number)."""
    return ACTION_TYPES.get(ddl_type.lower(), 0)
