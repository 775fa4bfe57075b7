import re

from hypothesis import given, settings, strategies as st
import pytest

from sparkcdc.errors import ErrInvalidReplicaConfig
from sparkcdc.filter.table_filter import TableFilter


def test_later_rules_win_and_exclusions():
    f = TableFilter(["db*.*", "!db1.secret", "db1.sec?et2"])
    assert f.match("db1", "orders")
    assert not f.match("db1", "secret")
    assert f.match("db1", "secret2")
    assert not f.match("other", "orders")


def test_case_insensitive_by_default_and_system_schemas_never_match():
    assert TableFilter(["DB.T"]).match("db", "t")
    assert not TableFilter(["DB.T"], case_sensitive=True).match("db", "t")
    assert not TableFilter(["*.*"]).match("mysql", "user")
    assert TableFilter(["*.*"]).match_event("db", "")
    assert not TableFilter(["*.*"]).match_event("mysql", "")


def test_backticks_and_classes():
    f = TableFilter(["`a.b`.`c*`", "x.[a-c]1"])
    assert f.match("a.b", "c*")
    assert not f.match("a.b", "cc")
    assert f.match("x", "b1") and not f.match("x", "d1")


def test_malformed_rule_names_the_rule():
    with pytest.raises(ErrInvalidReplicaConfig, match=r"filter.rules\[1\] 'nodot'"):
        TableFilter(["*.*", "nodot"])


# ---- full syntax --------------------------------------------------------------------------

@pytest.mark.parametrize("rule, position, message", [
    ("db", 3, "missing '.'"),
    ("db tbl", 3, "unexpected special character ' '"),
    ("db.", 4, "missing pattern"),
    (".tbl", 1, "missing pattern"),
    ("db.tbl.x", 7, "stray characters"),
    ("db.t-1", 5, "unexpected special character '-'"),
    ("db.[a-", 4, "character class"),
    ("db.t\\", 5, "cannot place \\\\ at end"),
    ("db.\\n", 4, "cannot escape a letter"),
    ("`db.t", 1, "incomplete quoted identifier"),
    ('"db.t', 1, "incomplete quoted identifier"),
    ("/db.t", 1, "incomplete regexp"),
    ("/(/.t", 1, "invalid regexp"),
    ("!", 2, "missing pattern"),
    ("  x.y z", 6, "unexpected special character ' '"),
    ("x.`y`z", 6, "stray characters"),
])
def test_malformed_rules_name_rule_and_position(rule, position, message):
    with pytest.raises(ErrInvalidReplicaConfig) as caught:
        TableFilter(["a.b", rule])
    text = str(caught.value)
    assert f"filter.rules[1] {rule!r}" in text
    assert f"at position {position}:" in text
    assert re.search(message, text), text


def test_comments_blank_lines_and_whitespace():
    f = TableFilter(["# only comments", "", "  db.t  ", "\t!db.x"])
    assert f.match("db", "t") and not f.match("db", "x")


def test_quoted_names_match_verbatim_including_wildcards():
    f = TableFilter(['"a""b".`c``d`', "`*`.`?`"])
    assert f.match('a"b', "c`d")
    assert f.match("*", "?") and not f.match("x", "y")


def test_backslash_escapes_special_characters():
    f = TableFilter([r"db\-1.t\*", r"a\.b.c"])
    assert f.match("db-1", "t*") and not f.match("db-1", "tx")
    assert f.match("a.b", "c")


def test_negated_and_caret_classes():
    f = TableFilter(["d.[!a-c]", "e.[^x]"])
    assert f.match("d", "z") and not f.match("d", "b")
    assert f.match("e", "^") and f.match("e", "x") and not f.match("e", "y")


def test_regex_patterns_search_unanchored():
    f = TableFilter(["/^db[0-9]+$/./tmp/"])
    assert f.match("db12", "a_tmp_b")
    assert not f.match("dbx", "tmp")


def test_non_ascii_and_dollar_names():
    f = TableFilter(["数据.表$1"])
    assert f.match("数据", "表$1")


def test_case_sensitive_applies_to_all_pattern_kinds():
    cs = TableFilter(["`Db`.T*", "/^X$/.y"], case_sensitive=True)
    assert cs.match("Db", "Tx") and not cs.match("db", "Tx") and not cs.match("Db", "tx")
    assert not cs.match("x", "y")
    ci = TableFilter(["`Db`.T*", "/^X$/.y"])
    assert ci.match("DB", "tX") and ci.match("x", "Y")


def test_import_file(tmp_path):
    path = tmp_path / "rules.txt"
    path.write_text("db.*\n# comment\n!db.secret\n")
    f = TableFilter([f"@{path}"])
    assert f.match("db", "a") and not f.match("db", "secret")
    path.write_text("db.*\nbad rule\n")
    with pytest.raises(ErrInvalidReplicaConfig, match=r"filter.rules\[0\] \(.*rules.txt:2\)"):
        TableFilter([f"@{path}"])
    path.write_text(f"@{path}\n")
    with pytest.raises(ErrInvalidReplicaConfig, match="recursively"):
        TableFilter([f"@{path}"])


def test_system_schemas_excluded_even_when_named():
    for schema in ("mysql", "INFORMATION_SCHEMA", "performance_schema", "sys", "metrics_schema"):
        assert not TableFilter([f"`{schema}`.*"]).match(schema, "t")


# ---- property test against a reference written from the spec ------------------------------

def _reference_glob(pattern: str, name: str, case_sensitive: bool) -> bool:
    """table-filter.md's wildcards, by direct recursion over the pattern (no regex)."""
    if not case_sensitive:
        pattern, name = pattern.lower(), name.lower()
    if not pattern:
        return not name
    head = pattern[0]
    if head == "*":
        return any(_reference_glob(pattern[1:], name[i:], True) for i in range(len(name) + 1))
    if not name:
        return False
    if head == "?":
        return _reference_glob(pattern[1:], name[1:], True)
    if head == "[":
        close = pattern.index("]", 2)
        body, negate = pattern[1:close], False
        if body.startswith("!"):
            body, negate = body[1:], True
        members, i = set(), 0
        while i < len(body):
            if i + 2 < len(body) and body[i + 1] == "-":
                members.update(chr(c) for c in range(ord(body[i]), ord(body[i + 2]) + 1))
                i += 3
            else:
                members.add(body[i])
                i += 1
        if (name[0] in members) == negate:
            return False
        return _reference_glob(pattern[close + 1:], name[1:], True)
    return head == name[0] and _reference_glob(pattern[1:], name[1:], True)


def _reference_match(rules, schema, table, case_sensitive):
    """Later rules win; `!` excludes; no matching rule: not matched."""
    verdict = False
    for rule in rules:
        exclude = rule.startswith("!")
        db, tbl = rule.lstrip("!").split(".")
        if _reference_glob(db, schema, case_sensitive) and _reference_glob(tbl, table, case_sensitive):
            verdict = not exclude
    return verdict


_atoms = st.sampled_from(["a", "b", "B", "_", "1", "*", "?", "[ab]", "[!a]", "[a-c]", "[!0-9]"])
_patterns = st.lists(_atoms, min_size=1, max_size=4).map("".join)
_rules = st.tuples(st.booleans(), _patterns, _patterns).map(
    lambda r: ("!" if r[0] else "") + r[1] + "." + r[2])
_names = st.text(alphabet="abAB_1-", min_size=0, max_size=5)


@given(st.lists(_rules, min_size=1, max_size=5), _names, _names, st.booleans())
@settings(max_examples=400, deadline=None)
def test_wildcard_rules_agree_with_reference(rules, schema, table, case_sensitive):
    expected = _reference_match(rules, schema, table, case_sensitive)
    assert TableFilter(rules, case_sensitive).match(schema, table) == expected


def test_database_level_events_follow_the_schema_patterns():
    f = TableFilter(["db1.*", "db2.t", "!db3.*", "db4.*", "!db4.t"])
    assert f.match_event("db1", "") and f.match_event("db2", "") and f.match_event("db4", "")
    assert not f.match_event("db3", "")
    assert not f.match_event("other", "")
    assert not f.match_event("mysql", "")
    assert not TableFilter(["e2e_a.*"]).match_event("e2e_b", "")
