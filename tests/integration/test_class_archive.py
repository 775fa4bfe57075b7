"""scripts/setup.sh's class archive step (`python -m sparkcdc.pipeline.class_archive`) makes a
class-data-sharing archive that this JDK maps, in the cache dir, under the name the capture looks
for; run again it keeps it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sparkcdc.pipeline.class_archive import existing_archive

pytestmark = pytest.mark.integration


def test_setup_makes_an_archive_the_jdk_maps(tmp_path):
    # The one scripts/setup.sh made (CI runs it before the tests) is checked where it is: making
    # another costs a minute of JVM. Without one (setup not run, or its step failed) it is made here.
    module = [sys.executable, "-m", "sparkcdc.pipeline.class_archive"]
    environ = dict(os.environ)
    archive = existing_archive(environ)
    if archive is None:
        environ["SPARKCDC_CACHE_DIR"] = str(tmp_path / "cache")
        made = subprocess.run(module, env=environ, capture_output=True, text=True, timeout=900)
        assert made.returncode == 0, made.stdout + made.stderr
        archive = existing_archive(environ)
        assert archive is not None and archive in made.stdout
        assert os.listdir(tmp_path / "cache") == [os.path.basename(archive)]
    leftovers = [name for name in os.listdir(os.path.dirname(archive)) if name.endswith((".partial", ".log"))]
    assert not leftovers, f"a partial archive or a dump log was left: {leftovers}"
    mapped = subprocess.run(["java", f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=info", "-version"],
                            capture_output=True, text=True, timeout=60)
    assert f"Opened archive {archive}" in mapped.stdout and "Mapped dynamic region" in mapped.stdout, mapped.stdout

    again = subprocess.run(module, env=environ, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "up to date" in again.stdout and archive in again.stdout, again.stdout
