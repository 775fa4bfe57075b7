"""GTID positions (MariaDB) and sets (MySQL): parsing, growth, membership and divergence."""

from __future__ import annotations

import pytest

from sparkcdc.errors import ErrStartTsInvalid
from sparkcdc.model.gtid import MariaDBPosition, MySQLGtidSet, parse_start, parse_state

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "4f22ab58-82db-22f2-af44-d91bb0530673"


def test_a_mariadb_position_keeps_the_newest_gtid_of_each_domain_and_round_trips():
    state = parse_state("0-1-25, 1-2-7,0-3-20")  # @@gtid_binlog_state lists one per (domain, server)
    assert isinstance(state, MariaDBPosition)
    assert str(state) == "0-1-25,1-2-7"
    assert parse_state(str(state)) == state
    state.add("0-2-26")
    assert str(state) == "0-2-26,1-2-7"
    assert state.contains("0-1-3") and state.contains("0-2-26") and not state.contains("0-2-27")
    assert not state.contains("5-1-1"), "a domain the position does not have"


def test_mariadb_divergence_names_what_each_side_lacks():
    history = parse_state("0-1-100,1-1-40")
    assert history.compare(parse_state("0-1-100,1-1-40")) == ([], [])
    # The new primary missed the old one's last transactions of domain 1.
    assert history.compare(parse_state("0-1-100,1-1-38")) == (["1-1-40"], [])
    # It wrote in a domain the old primary never had, and ahead in domain 0.
    assert history.compare(parse_state("0-2-101,1-1-40,7-2-3")) == ([], ["0-2-101", "7-2-3"])
    # The same sequence number from another server is another transaction: both sides differ.
    assert history.compare(parse_state("0-2-100,1-1-40")) == (["0-1-100"], [])


def test_a_mysql_gtid_set_merges_intervals_and_round_trips():
    state = parse_state(f"{UUID_A}:1-5:7-9,{UUID_B.upper()}:3")
    assert isinstance(state, MySQLGtidSet)
    state.add(f"{UUID_A}:6")
    state.add(f"{UUID_B}:4")
    assert str(state) == f"{UUID_A}:1-9,{UUID_B}:3-4"
    assert parse_state(str(state)) == state
    assert state.contains(f"{UUID_A}:9") and not state.contains(f"{UUID_A}:10")
    assert state.contains(f"{UUID_B.replace('-', '')}:3"), "a uuid without dashes is the same server"
    assert state.last(UUID_A) == 9


def test_mysql_divergence_is_the_set_difference_both_ways():
    history = parse_state(f"{UUID_A}:1-100")
    assert history.compare(parse_state(f"{UUID_A}:1-100")) == ([], [])
    assert history.compare(parse_state(f"{UUID_A}:1-97")) == ([f"{UUID_A}:98-100"], [])
    errant = parse_state(f"{UUID_A}:1-50:52-100,{UUID_B}:1-2")
    assert history.compare(errant) == ([f"{UUID_A}:51"], [f"{UUID_B}:1-2"])


def test_empty_states_and_bad_text():
    assert str(parse_state("")) == "" and not parse_state("")
    assert isinstance(parse_state("", "mysql"), MySQLGtidSet)
    with pytest.raises(ValueError):
        parse_state("0-1")
    with pytest.raises(ErrStartTsInvalid, match="not a TSO, a GTID"):
        parse_start("banana")


def test_a_binlog_files_start_is_past_a_state_only_in_what_the_state_names():
    oldest = parse_state("0-1-50,5-2-3")
    assert oldest.past(parse_state("0-1-40")) == ["0-1-50"], "purged for a dump from 0-1-40"
    assert oldest.past(parse_state("0-1-50")) == [] and oldest.past(parse_state("0-1-60,7-1-1")) == []
    previous = parse_state(f"{UUID_A}:1-50,{UUID_B}:1-9")
    assert previous.past(parse_state(f"{UUID_A}:1-40")) == [f"{UUID_A}:41-50"]
    assert previous.past(parse_state(f"{UUID_A}:1-60")) == []


def test_a_mariadb_binlog_state_knows_which_server_wrote_each_sequence_number():
    from sparkcdc.model.gtid import MariaDBBinlogState

    state = MariaDBBinlogState("0-1-2,0-2-3,1-1-7")
    assert state.contains("0-1-2") and state.contains("0-2-3") and state.contains("1-1-5")
    assert not state.contains("0-1-3"), "domain 0 reached 3 through server 2: 0-1-3 is another transaction"
    assert str(state) == "0-1-2,0-2-3,1-1-7"
