"""The HA e2e tests' check that no two captures write one changefeed at once, on synthetic logs."""

from __future__ import annotations

from sparkcdc.testing.ha import concurrent_writes, write_windows

PROGRESS = "[Stage 8:=====>      (1 + 1) / 2]" + " " * 20


def batch_line(time: str, changefeed: str, seconds: float, prefix: str = "") -> str:
    return (f"{prefix}[2026-11-22 {time}] [INFO] [sparkcdc.pipeline.runner] changefeed {changefeed} batch 3: "
            f"(470643176636416004, 470643185549312000] rows=12 ddls=0 in {seconds}s\n")


def write_logs(tmp_path, **lines: list[str]) -> dict[str, str]:
    paths = {}
    for server, content in lines.items():
        path = tmp_path / f"{server}.log"
        path.write_text("".join(content))
        paths[server] = str(path)
    return paths


def test_batches_of_two_servers_that_overlap_in_time_are_reported(tmp_path):
    logs = write_logs(tmp_path,
                      cdc0=[batch_line("15:00:10,000", "feed", 4.0)],
                      cdc1=[batch_line("15:00:08,000", "feed", 1.0, prefix=PROGRESS)])
    windows = write_windows(logs, "feed")
    assert [w.server for w in windows] == ["cdc0", "cdc1"]  # 15:00:06-10 and 15:00:07-08
    overlaps = concurrent_writes(windows)
    assert [(a.server, b.server) for a, b in overlaps] == [("cdc0", "cdc1")]


def test_a_handover_one_server_after_the_other_and_other_changefeeds_are_not_overlaps(tmp_path):
    logs = write_logs(tmp_path,
                      cdc0=[batch_line("15:00:05,000", "feed", 2.0), batch_line("15:00:07,000", "feed", 1.5),
                            batch_line("15:00:30,000", "other", 60.0)],
                      cdc1=[batch_line("15:00:20,000", "feed", 12.0), "a line that is not a batch\n"])
    windows = write_windows(logs, "feed")
    assert len(windows) == 3
    assert concurrent_writes(windows) == []
