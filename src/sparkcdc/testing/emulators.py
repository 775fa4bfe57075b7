"""Object storage emulators for tests: moto (S3), Azurite (Azure Blob), fake-gcs-server (GCS).

Each runs as a child process on a free 127.0.0.1 port, in memory. `scripts/setup-emulators.sh`
installs them: moto from PyPI into the venv, Azurite from npm and fake-gcs-server from the Go
module proxy into `<project>/.tools` (or `$SPARKCDC_TOOLS_DIR`).

    with start_emulator("s3") as s3:
        s3.create_bucket("b")
        StorageSink(s3.uri("b", "prefix", protocol="csv"), ...)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import urlencode

from sparkcdc.testing.ports import free_port

# Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
# moto accepts any non-empty credentials.
S3_ACCESS_KEY = "sparkcdc-test-access"
S3_SECRET_KEY = "sparkcdc-test-secret"


class EmulatorNotInstalled(RuntimeError):
    """The emulator's binary is missing: run scripts/setup-emulators.sh."""


def tools_dir() -> Path:
    """Where setup-emulators.sh puts Azurite and fake-gcs-server."""
    configured = os.environ.get("SPARKCDC_TOOLS_DIR")
    if configured:
        return Path(configured)
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").exists():
            return parent / ".tools"
    return Path.cwd() / ".tools"


def _binary(name: str, *candidates: Path) -> str:
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise EmulatorNotInstalled(f"{name} is not installed; run scripts/setup-emulators.sh")


def binary_for(backend: str) -> str:
    """The emulator executable of a backend (s3, azblob, gcs), or EmulatorNotInstalled."""
    if backend == "s3":
        return _binary("moto_server", Path(sys.executable).parent / "moto_server")
    if backend == "azblob":
        return _binary("azurite-blob", tools_dir() / "azurite" / "node_modules" / ".bin" / "azurite-blob")
    if backend == "gcs":
        return _binary("fake-gcs-server", tools_dir() / "bin" / "fake-gcs-server")
    raise ValueError(f"unknown backend {backend!r}; use s3, azblob or gcs")


@dataclass
class Emulator:
    """A running emulator: its endpoint, how to make a bucket, and sink URIs that reach it."""

    backend: str
    endpoint: str
    process: subprocess.Popen
    log_path: str
    make_bucket: Callable[[str], None] = field(repr=False)
    credentials: dict[str, str] = field(default_factory=dict, repr=False)

    def create_bucket(self, name: str) -> None:
        self.make_bucket(name)

    def uri(self, bucket: str, prefix: str = "", **params: str) -> str:
        """A storage URI into this emulator, with its credentials and `params` (sink options)."""
        scheme = {"s3": "s3", "azblob": "azblob", "gcs": "gcs"}[self.backend]
        query = {"endpoint": self.endpoint, **self.credentials,
                 **{k.replace("_", "-"): v for k, v in params.items()}}
        path = f"/{prefix.strip('/')}" if prefix else ""
        return f"{scheme}://{bucket}{path}?{urlencode(query, safe='/:')}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "Emulator":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _wait_http(url: str, process: subprocess.Popen, log_path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"emulator exited with {process.returncode}; see {log_path}:\n"
                               + Path(log_path).read_text(errors="replace")[-2000:])
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers: any HTTP status means it is up
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"emulator did not answer {url} within {timeout:.0f}s; see {log_path}")


def _spawn(command: list[str], log_dir: str, name: str, cwd: Optional[str] = None) -> tuple[subprocess.Popen, str]:
    log_path = os.path.join(log_dir, f"{name}.log")
    log = open(log_path, "wb")
    try:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
    finally:
        log.close()
    return process, log_path


def start_emulator(backend: str, work_dir: Optional[str] = None, timeout: float = 60) -> Emulator:
    """Start one emulator on a free 127.0.0.1 port and wait until it answers."""
    binary = binary_for(backend)
    work_dir = work_dir or tempfile.mkdtemp(prefix=f"sparkcdc-{backend}-")
    os.makedirs(work_dir, exist_ok=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    if backend == "s3":
        process, log = _spawn([binary, "-H", "127.0.0.1", "-p", str(port)], work_dir, "moto")
        _wait_http(f"{endpoint}/moto-api/", process, log, timeout)
        credentials = {"access-key": S3_ACCESS_KEY, "secret-access-key": S3_SECRET_KEY}
        return Emulator(backend, endpoint, process, log, _s3_bucket_maker(endpoint), credentials)
    if backend == "azblob":
        command = [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                   "--skipApiVersionCheck", "--loose", "--disableTelemetry"]
        process, log = _spawn(command, work_dir, "azurite", cwd=work_dir)
        _wait_http(f"{endpoint}/{AZURITE_ACCOUNT}?comp=list", process, log, timeout)
        endpoint = f"{endpoint}/{AZURITE_ACCOUNT}"
        credentials = {"account-name": AZURITE_ACCOUNT, "account-key": AZURITE_KEY}
        return Emulator(backend, endpoint, process, log, _azure_container_maker(endpoint), credentials)
    if backend == "gcs":
        command = [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                   "-backend", "memory", "-external-url", endpoint, "-public-host", f"127.0.0.1:{port}"]
        process, log = _spawn(command, work_dir, "fake-gcs-server", cwd=work_dir)
        _wait_http(f"{endpoint}/storage/v1/b", process, log, timeout)
        return Emulator(backend, endpoint, process, log, _gcs_bucket_maker(endpoint), {})
    raise ValueError(f"unknown backend {backend!r}")


def _s3_bucket_maker(endpoint: str) -> Callable[[str], None]:
    def make(name: str) -> None:
        import s3fs

        # No region: moto refuses a location constraint it does not expect.
        fs = s3fs.S3FileSystem(key=S3_ACCESS_KEY, secret=S3_SECRET_KEY, endpoint_url=endpoint,
                               skip_instance_cache=True)
        fs.mkdir(name)
    return make


def _azure_container_maker(endpoint: str) -> Callable[[str], None]:
    def make(name: str) -> None:
        from azure.storage.blob import BlobServiceClient

        connection = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
                      f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint}")
        BlobServiceClient.from_connection_string(connection).create_container(name)
    return make


def _gcs_bucket_maker(endpoint: str) -> Callable[[str], None]:
    def make(name: str) -> None:
        request = urllib.request.Request(
            f"{endpoint}/storage/v1/b?project=test", data=('{"name": "%s"}' % name).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(request, timeout=10).close()
    return make
