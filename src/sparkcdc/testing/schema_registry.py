"""A Confluent-compatible schema registry (Apicurio Registry 3.0.9, in-memory) for tests and local runs.

The runner jar comes from Maven Central through `scripts/setup-registry.sh` (into
`.tools/apicurio`). The Confluent API the Avro protocol uses is `url` (`.../apis/ccompat/v7`).

    with start_schema_registry(tmp_path) as registry:
        uri = f"kafka://.../t?protocol=avro&schema-registry={registry.url}"

    python -m sparkcdc.testing.schema_registry /tmp/registry   # runs one until Ctrl-C
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from sparkcdc.testing.emulators import tools_dir
from sparkcdc.testing.jvm_service import java_command, serve_until_interrupted, spawn, terminate
from sparkcdc.testing.ports import free_port

class SchemaRegistryNotInstalled(RuntimeError):
    """The registry is missing: run scripts/setup-registry.sh."""


def registry_jar() -> Path:
    jars = sorted((tools_dir() / "apicurio").glob("apicurio-registry-app-*-runner.jar"))
    if not jars:
        raise SchemaRegistryNotInstalled(f"no Apicurio Registry in {tools_dir() / 'apicurio'}; "
                                         "run scripts/setup-registry.sh")
    return jars[-1]


@dataclass
class SchemaRegistry:
    data_dir: Path
    port: int = field(default_factory=free_port)
    process: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL (what `schema-registry=` takes)."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    def start(self, timeout: float = 180.0) -> "SchemaRegistry":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = java_command("128m", "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
                               "-Dquarkus.log.level=WARN", "-jar", str(registry_jar()))
        self.process = spawn(command, self.data_dir / "registry.log", cwd=self.data_dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the schema registry exited with {self.process.returncode}; "
                                   f"see {self.data_dir}/registry.log")
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the schema registry on port {self.port} was not ready in {timeout}s")

    def stop(self, timeout: float = 20.0) -> None:
        process, self.process = self.process, None
        terminate(process, timeout)


@contextlib.contextmanager
def start_schema_registry(data_dir: os.PathLike | str) -> Iterator[SchemaRegistry]:
    registry = SchemaRegistry(Path(data_dir)).start()
    try:
        yield registry
    finally:
        registry.stop()


def main(argv: list[str]) -> int:
    data_dir = Path(argv[1] if len(argv) > 1 else ".work/registry")
    return serve_until_interrupted(start_schema_registry(data_dir),
                                   lambda registry: f"schema registry ready at {registry.url}; Ctrl-C stops it")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
