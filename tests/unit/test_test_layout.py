"""The test tree itself: `make test` collects unit, integration and e2e in one pytest run, in
pytest's default import mode, where two test modules with the same file name cannot both load
(the later one fails collection and the whole run stops). Helpers run one ring at a time, so
this check lives in the ring everyone runs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_unique_file_name():
    places: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name != "conftest.py" and path.name != "__init__.py":
            places[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in places.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a file name (rename one): {clashes}"
