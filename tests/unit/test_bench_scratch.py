"""Benchmarks' scratch directories go away when the process exits (a 10M-row run leaves tens of
GB), unless SPARKCDC_BENCH_KEEP asks to keep them for reading a failed run's logs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = ("from sparkcdc.testing.scratch import scratch_dir\n"
          "path = scratch_dir('sparkcdc-scratch-test-')\n"
          "open(path + '/data', 'w').write('x' * 1000)\n"
          "print(path)\n")


@pytest.mark.parametrize("keep, kept", [("", False), ("0", False), ("1", True)])
def test_scratch_directory_is_removed_at_exit_unless_kept(tmp_path, keep, kept):
    env = {**os.environ, "TMPDIR": str(tmp_path), "SPARKCDC_BENCH_KEEP": keep}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    path = out.stdout.strip().splitlines()[-1]
    assert path.startswith(str(tmp_path))
    assert os.path.exists(os.path.join(path, "data")) is kept
