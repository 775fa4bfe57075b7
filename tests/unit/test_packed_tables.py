"""Read tasks get the replicated tables packed (range_reader.PackedTables): once per set of tables
by the planner, much smaller than the plain texts, and read back the same."""

import pickle

from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.pipeline.planning import SourceOptions, _replicated_tables_at
from sparkcdc.upstream import range_reader
from sparkcdc.upstream.range_reader import PackedTables


def table(name, *cols):
    return TableInfo("db", name, 1, tuple(ColumnInfo(c, "int", is_primary_key=c == "id") for c in cols), 7, ("id",))


TABLES = {f"db.t{i}": table(f"t{i}", "id", "k", "c", "pad").to_json() for i in range(2000)}


def test_packed_tables_read_back_the_same_and_travel_smaller():
    packed = PackedTables.pack(TABLES)
    travelled = pickle.loads(pickle.dumps(packed))
    range_reader._UNPACKED.clear()  # as a fresh worker process
    assert all(travelled.get(name) == text for name, text in TABLES.items())
    assert travelled.get("db.missing") is None
    assert len(pickle.dumps(packed)) * 10 < len(pickle.dumps(TABLES))
    assert PackedTables.pack(dict(reversed(TABLES.items()))) == packed  # the same set, the same bytes


def test_the_unpacked_sets_a_process_keeps_are_bounded():
    range_reader._UNPACKED.clear()
    for i in range(range_reader._UNPACKED_SETS + 3):
        assert PackedTables.pack({"db.a": str(i)}).get("db.a") == str(i)
    assert len(range_reader._UNPACKED) == range_reader._UNPACKED_SETS


class _Index:
    def __init__(self, tables):
        self.tables = tables

    def tables_at(self, ts):
        return list(self.tables)


def test_the_planner_packs_a_set_of_tables_once_and_again_when_they_change():
    infos = [TableInfo.from_json(text) for text in TABLES.values()]
    index = _Index(infos)
    options = SourceOptions(index_path="", upstream_uri="mysql://root@127.0.0.1:1/", start_ts=0,
                            filter_rules=("db.*", "!db.t1"))
    first = _replicated_tables_at(index, 10, options, set())
    assert _replicated_tables_at(index, 20, options, set()) is first
    assert first.get("db.t0") == TABLES["db.t0"] and first.get("db.t1") is None  # filtered out
    index.tables = infos + [table("added", "id")]
    assert _replicated_tables_at(index, 30, options, set()).get("db.added") is not None
    everything = _replicated_tables_at(index, 30, SourceOptions(index_path="", upstream_uri="mysql://root@127.0.0.1:1/",
                                                                start_ts=0), set())
    assert everything.get("db.t1") == TABLES["db.t1"]
