"""Where a redo log lives: the root of one fsspec file system, from `consistent.storage`.

The URI takes the storage sink's location parameters (config/storage_location.py); `nfs://` and
`local://` are local paths, as in TiCDC. Local writes are made durable with fsync (the file and,
for new names, its directory); object stores are durable once a put returns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sparkcdc.config.storage_location import StorageLocation, parse_redo_storage_uri
from sparkcdc.errors import ErrConsistentStorage


@dataclass
class RedoStorage:
    """Reads and writes files under one root; names are relative, with `/` separators."""

    location: StorageLocation

    @classmethod
    def from_uri(cls, uri: str) -> "RedoStorage":
        return cls(parse_redo_storage_uri(uri))

    def __post_init__(self) -> None:
        self._fs: Any = self.location.filesystem()
        if self.location.is_local:
            try:
                os.makedirs(self.location.root, exist_ok=True)
            except OSError as exc:
                raise ErrConsistentStorage(f"cannot create the redo directory {self.location.root}: {exc}; "
                                           "pick a writable consistent.storage path") from None

    @property
    def is_local(self) -> bool:
        return self.location.is_local

    def path(self, name: str) -> str:
        return f"{self.location.root.rstrip('/')}/{name}"

    def list(self, prefix: str = "") -> list[str]:
        """Names of the files directly under the root whose names start with `prefix`, sorted."""
        try:
            entries = self._fs.ls(self.location.root, detail=False)
        except FileNotFoundError:
            return []
        names = sorted(entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries)
        return [name for name in names if name.startswith(prefix)]

    def read(self, name: str) -> bytes:
        return self._fs.cat_file(self.path(name))

    def exists(self, name: str) -> bool:
        return self._fs.exists(self.path(name))

    def put(self, name: str, data: bytes) -> None:
        """Write a whole file durably and atomically (local: temp file, fsync, rename)."""
        if not self.is_local:
            self._fs.pipe_file(self.path(name), data)
            return
        target = self.path(name)
        temporary = f"{target}.tmp"
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
        self.sync_directory()

    def sync_directory(self) -> None:
        if self.is_local:
            descriptor = os.open(self.location.root, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)

    def delete(self, name: str) -> None:
        try:
            self._fs.rm_file(self.path(name))
        except FileNotFoundError:
            pass

    def download(self, name: str, local_path: str) -> None:
        self._fs.get_file(self.path(name), local_path)
