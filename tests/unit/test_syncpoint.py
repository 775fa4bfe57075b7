"""When a batch records a syncpoint: it crossed a multiple of sync-point-interval."""

from sparkcdc.model.tso import compose
from sparkcdc.sink.mysql.syncpoint import crosses_interval


def test_a_batch_records_a_syncpoint_when_it_crosses_an_interval_boundary():
    second = 1000
    assert crosses_interval(compose(9 * second), compose(10 * second), 10)
    assert crosses_interval(compose(9 * second), compose(21 * second), 10)  # once, however many
    assert not crosses_interval(compose(10 * second), compose(19 * second + 999), 10)
    assert not crosses_interval(compose(10 * second, 1), compose(10 * second, 5), 10)
    assert crosses_interval(compose(29_999), compose(30_000), 30)
