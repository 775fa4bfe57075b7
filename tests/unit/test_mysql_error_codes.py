"""The one table of MySQL error numbers: what is retried, what counts as an applied DDL replay,
what is a configuration error, for exceptions and for messages that crossed Spark as text."""

from __future__ import annotations

import pymysql
import pytest
from pymysql.constants import CR, ER

from sparkcdc.pipeline.failure import is_retryable_failure
from sparkcdc.sink.mysql.error_codes import (
    MYSQL_ERROR_CODES,
    ErrorKind,
    error_number,
    error_numbers_in,
    is_configuration_message,
    is_ddl_already_applied,
    is_retryable,
    is_retryable_message,
)


def operational(number: int, text: str = "boom") -> pymysql.err.OperationalError:
    return pymysql.err.OperationalError(number, text)


def test_names_match_the_client_library_constants():
    """The table's names are the server's and client's own: pymysql agrees where it knows them."""
    for code in MYSQL_ERROR_CODES.values():
        module = CR if code.name.startswith("CR_") else ER
        short = code.name.removeprefix("CR_").removeprefix("ER_")
        known = getattr(module, code.name if module is CR else short, None)
        if known is not None:
            assert known == code.number, code


@pytest.mark.parametrize("number", [1040, 1053, 1152, 1158, 1159, 1160, 1161, 1184, 1205, 1213, 1927, 2002,
                                    2003, 2006, 2013, 2055, 4031, 8022, 8027, 8028, 9001, 9007])
def test_connection_class_errors_are_retried(number):
    assert MYSQL_ERROR_CODES[number].kind is ErrorKind.CONNECTION
    assert is_retryable(operational(number))
    assert is_retryable(pymysql.err.InternalError(number, "x"))  # the number decides, not the class


@pytest.mark.parametrize("number", [1045, 1044, 1049, 1062, 1064, 1146, 1050, 1054, 1105, 1406])
def test_other_errors_are_not_retried(number):
    assert not is_retryable(pymysql.err.ProgrammingError(number, "x"))


def test_socket_level_failures_are_retried_and_error_numbers_are_read_from_the_packet():
    assert is_retryable(pymysql.err.InterfaceError(0, ""))  # pymysql: connection already closed
    assert is_retryable(ConnectionResetError())
    assert is_retryable(TimeoutError())
    assert error_number(operational(2013)) == 2013
    assert error_number(ValueError("(2013, 'x')")) is None
    assert error_number(pymysql.err.OperationalError("no number")) is None


@pytest.mark.parametrize("number, ddl_type", [
    (1007, "create database"), (1008, "drop database"), (1050, "create table"), (1051, "drop table"),
    (1060, "add column"), (1061, "create index"), (1054, "drop column"), (1091, "drop index"),
    (1091, "drop column"), (1068, "add primary key"), (1176, "drop index"), (1517, "add table partition"),
    (1507, "drop table partition"), (1826, "add foreign key"), (1831, "create index"),
    (1146, "drop table"), (1146, "drop index"), (1146, "truncate table"), (1146, "drop column"),
])
def test_replayed_ddl_errors_count_as_done(number, ddl_type):
    assert is_ddl_already_applied(operational(number), ddl_type)


@pytest.mark.parametrize("number, ddl_type", [
    (1146, "add column"), (1146, "create index"), (1146, "rename table"), (1064, "create table"),
    (1062, "add primary key"), (2013, "create table"), (1045, "create table"),
])
def test_other_ddl_errors_are_not_treated_as_done(number, ddl_type):
    assert not is_ddl_already_applied(operational(number), ddl_type)


def test_numbers_are_found_in_message_text():
    message = ("[SPARKCDC:ErrMySQLTxnError] writing to the downstream mysql://root@h:3306/ failed: "
               "(1213, 'Deadlock found when trying to get lock; try restarting transaction')")
    assert error_numbers_in(message) == [1213]
    assert is_retryable_message(message) and not is_configuration_message(message)
    refused = "cannot connect: (1045, \"Access denied for user 'x'@'h'\") after (2013, 'Lost connection')"
    assert error_numbers_in(refused) == [1045, 2013]
    assert is_configuration_message(refused) and not is_retryable_message(refused)
    assert error_numbers_in("retrying 3 times (1 of 2, 5s)") == []


@pytest.mark.parametrize("message, retryable", [
    ("[SPARKCDC:ErrMySQLTxnError] failed: (1040, 'Too many connections')", True),
    ("[SPARKCDC:ErrMySQLTxnError] failed: (1053, 'Server shutdown in progress')", True),
    ("[SPARKCDC:ErrMySQLTxnError] failed: (1927, 'Connection was killed')", True),
    ("[SPARKCDC:ErrMySQLTxnError] failed: (9007, 'Write conflict, txnStartTS=1')", True),
    ("[SPARKCDC:ErrMySQLTxnError] failed: (1406, \"Data too long for column 'c' at row 1\")", False),
    ("[SPARKCDC:ErrMySQLConnectionError] stayed unreachable: (1049, \"Unknown database 'x'\")", False),
    # The wording no longer matters, only the number.
    ("[SPARKCDC:ErrMySQLTxnError] failed: (2013, 'Verbindung zum MySQL-Server verloren')", True),
    ("[SPARKCDC:ErrMySQLTxnError] failed: Lost connection (text without a number)", False),
])
def test_the_runner_classifies_failures_by_the_same_table(message, retryable):
    assert is_retryable_failure(message) is retryable
