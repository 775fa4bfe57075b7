"""`sparkcdc server --trigger-interval`: a Go duration turned into Spark's trigger interval, and a
bad value refused with what to give instead."""

from __future__ import annotations

import pytest

from sparkcdc.cli.main import main
from sparkcdc.cli.server_cmd import trigger_interval
from sparkcdc.pipeline.connect_loop import trigger_seconds


@pytest.mark.parametrize("text, spark", [("1s", "1000 milliseconds"), ("250ms", "250 milliseconds"),
                                          ("1.5s", "1500 milliseconds"), ("1m", "60000 milliseconds")])
def test_durations_become_spark_intervals(text, spark):
    assert trigger_interval(text) == spark
    assert trigger_seconds(spark) == pytest.approx(int(spark.split()[0]) / 1000)  # the Connect loop reads it too


@pytest.mark.parametrize("text", ["0s", "50ms", "2m", "1 second", "fast", ""])
def test_bad_intervals_are_refused_before_anything_starts(tmp_path, capsys, text):
    with pytest.raises(SystemExit) as exited:
        main(["server", "--upstream-uri", "mysql://root@127.0.0.1:1/", "--data-dir", str(tmp_path / "data"),
              "--trigger-interval", text])
    assert exited.value.code == 2
    assert f"{text!r} is not a duration from 100ms to 1m; give e.g. 1s or 250ms" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
