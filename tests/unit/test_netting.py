"""Netting against a reference: replaying raw rows and netted rows gives the same table."""

from hypothesis import given, settings, strategies as st

from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.model.netting import net_changes_per_key

TABLE = TableInfo("db", "t", 1, (ColumnInfo("id", "int", is_primary_key=True), ColumnInfo("v", "int")),
                  1, ("id",))


def apply(state: dict, rows):
    for r in rows:
        if r.before is not None:
            assert r.before[0] in state, f"{r.op} of absent key {r.before}"
            del state[r.before[0]]
        if r.after is not None:
            assert r.after[0] not in state, f"{r.op} onto present key {r.after}"
            state[r.after[0]] = r.after
    return state


@st.composite
def transactions(draw):
    """A valid sequence of row events over keys 0..4 starting from a drawn table state."""
    state = {str(k): (str(k), "0") for k in range(5) if draw(st.booleans())}
    initial = dict(state)
    rows = []
    for seq in range(draw(st.integers(0, 12))):
        present = sorted(state)
        absent = [str(k) for k in range(5) if str(k) not in state]
        choices = (["insert"] if absent else []) + (["delete", "update", "move"] if present else [])
        if not choices:
            break
        op = draw(st.sampled_from(choices))
        value = str(draw(st.integers(0, 3)))
        if op == "insert":
            key = draw(st.sampled_from(absent))
            rows.append(RowChange(1, "db", "t", "insert", None, (key, value), seq))
            state[key] = (key, value)
        elif op == "delete":
            key = draw(st.sampled_from(present))
            rows.append(RowChange(1, "db", "t", "delete", state.pop(key), None, seq))
        elif op == "update":
            key = draw(st.sampled_from(present))
            rows.append(RowChange(1, "db", "t", "update", state[key], (key, value), seq))
            state[key] = (key, value)
        elif absent:
            old, new = draw(st.sampled_from(present)), draw(st.sampled_from(absent))
            rows.append(RowChange(1, "db", "t", "update", state.pop(old), (new, value), seq))
            state[new] = (new, value)
    return initial, rows


@given(transactions())
def test_netted_rows_have_the_same_effect_with_one_change_per_key(case):
    initial, rows = case
    netted = net_changes_per_key(TABLE, rows)
    assert apply(dict(initial), netted) == apply(dict(initial), rows)
    keys = [(r.before or r.after)[0] for r in netted]
    assert len(keys) == len(set(keys))
    # Deletes first (TiCDC's order after a split) must still be valid on netted rows.
    reordered = sorted(netted, key=lambda r: {"delete": 0, "update": 1, "insert": 2}[r.op])
    assert apply(dict(initial), reordered) == apply(dict(initial), rows)


def test_insert_then_pk_change_is_one_insert_of_the_new_key():
    rows = [RowChange(1, "db", "t", "insert", None, ("107", "a"), 0),
            RowChange(1, "db", "t", "update", ("107", "a"), ("108", "a"), 1)]
    assert net_changes_per_key(TABLE, rows) == [RowChange(1, "db", "t", "insert", None, ("108", "a"), 1)]
