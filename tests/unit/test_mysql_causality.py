import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo
from sparkcdc.sink.mysql.causality import ConflictDetector, KeySpace, fold_text


def _info(handle_key=("id",)):
    cols = (ColumnInfo("id", "int", is_primary_key=True), ColumnInfo("name", "varchar"),
            ColumnInfo("code", "varbinary", charset="binary"))
    return TableInfo("db", "t", 42, cols, 1, handle_key)


def test_keys_cover_pre_and_post_images_and_unique_keys():
    space = KeySpace.for_table(_info(), unique_keys=[("name",)])
    update = RowChange(1, "db", "t", "update", before=("1", "a", "x"), after=("2", "b", "x"))
    assert len(space.transaction_keys([update])) == 4
    other = RowChange(2, "db", "t", "insert", after=("3", "B", "y"))
    assert space.transaction_keys([update]) & space.transaction_keys([other])  # 'b' = 'B' under _ci


def test_case_sensitive_collation_does_not_fold_and_nulls_give_no_key():
    space = KeySpace.for_table(_info(), unique_keys=[("name",)], collations={"name": "utf8mb4_bin"})
    a = RowChange(1, "db", "t", "insert", after=("1", "b", None))
    b = RowChange(2, "db", "t", "insert", after=("2", "B", None))
    assert not space.transaction_keys([a]) & space.transaction_keys([b])
    assert len(space.image_keys(("5", None, None))) == 1


def test_keyless_tables_serialize():
    space = KeySpace.for_table(_info(handle_key=()))
    a = RowChange(1, "db", "t", "insert", after=("1", "a", None))
    b = RowChange(2, "db", "t", "insert", after=("2", "b", None))
    assert space.transaction_keys([a]) == space.transaction_keys([b])


def test_fold_text_is_case_accent_and_pad_insensitive():
    assert fold_text("Élan  ") == fold_text("elan") == "elan"


def test_independent_transactions_spread_and_dependent_ones_follow():
    detector = ConflictDetector(4)
    tickets = [detector.acquire([i]) for i in range(4)]
    assert sorted(t.worker for t in tickets) == [0, 1, 2, 3]
    follower = detector.acquire([2])
    assert follower.worker == tickets[2].worker and follower.sequence == 2


def test_a_transaction_depending_on_two_workers_waits():
    detector = ConflictDetector(2)
    first, second = detector.acquire([1]), detector.acquire([2])
    assert first.worker != second.worker
    result = []
    thread = threading.Thread(target=lambda: result.append(detector.acquire([1, 2])))
    thread.start()
    time.sleep(0.1)
    assert not result
    detector.release(first)
    thread.join(2)
    assert result and result[0].worker == second.worker


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, 12), min_size=1, max_size=3), min_size=1, max_size=40),
       st.integers(1, 6))
def test_conflicting_transactions_run_in_order(transactions, worker_count):
    """Run real worker threads; any two transactions sharing a key execute in submission order."""
    detector = ConflictDetector(worker_count, slots=64)
    queues = [[] for _ in range(worker_count)]
    conditions = threading.Condition()
    log: list[tuple[str, int]] = []
    done = threading.Event()

    def worker(number):
        position = 0
        while True:
            with conditions:
                conditions.wait_for(lambda: position < len(queues[number]) or done.is_set())
                if position >= len(queues[number]):
                    return
                index, ticket = queues[number][position]
            position += 1
            with conditions:
                log.append(("start", index))
            time.sleep(0.0005 * (index % 3))
            with conditions:
                log.append(("end", index))
            detector.release(ticket)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(worker_count)]
    for t in threads:
        t.start()
    for index, keys in enumerate(transactions):
        ticket = detector.acquire(keys)
        with conditions:
            queues[ticket.worker].append((index, ticket))
            conditions.notify_all()
    assert detector.wait_idle(10)
    done.set()
    with conditions:
        conditions.notify_all()
    for t in threads:
        t.join(5)

    starts = {i: n for n, (what, i) in enumerate(log) if what == "start"}
    ends = {i: n for n, (what, i) in enumerate(log) if what == "end"}
    assert len(ends) == len(transactions)
    for later, keys in enumerate(transactions):
        for earlier in range(later):
            if keys & transactions[earlier]:
                assert ends[earlier] < starts[later], (earlier, later)
