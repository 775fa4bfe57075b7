"""Passwords kept off the command line: a URI flag's password from a file or the environment.

A password written in a URI on the command line shows in `ps` to every local user. So every
command that takes a MySQL URI pairs the flag with a password file and an environment variable
(`PasswordOption`): `--upstream-uri` with `--upstream-password-file` and
`SPARKCDC_UPSTREAM_PASSWORD`, `--downstream-uri` with `--downstream-password-file` and
`SPARKCDC_DOWNSTREAM_PASSWORD`, and so on. The file wins over the environment, as TiCDC takes
flags before the environment; the environment is used only when the URI has no password; a
password both in the URI and in the file is refused. Every command removes its variables from
its environment when it reads them, before it starts anything (Spark's JVM and Python workers)
that would inherit them.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Optional

from sparkcdc.errors import SparkCDCError


@dataclass(frozen=True)
class PasswordOption:
    """A URI flag (`--<name>-uri`, or `uri_flag`) and where else its password may come from."""

    name: str  # "downstream": --downstream-password-file, SPARKCDC_DOWNSTREAM_PASSWORD
    error: type[SparkCDCError]  # the coded error of a bad password source
    uri_flag: str = ""  # default --<name>-uri

    @property
    def flag(self) -> str:
        return self.uri_flag or f"--{self.name}-uri"

    @property
    def file_flag(self) -> str:
        return f"--{self.name}-password-file"

    @property
    def environment_variable(self) -> str:
        return f"SPARKCDC_{self.name.upper().replace('-', '_')}_PASSWORD"

    def add_arguments(self, parser: argparse.ArgumentParser, help: str, **uri_kwargs) -> None:
        """The URI flag (its help `help` plus where else the password may come from) and the file flag."""
        parser.add_argument(self.flag, help=f"{help}. A password written here shows in `ps` to every local user: "
                                            f"give it with {self.file_flag} or {self.environment_variable} instead",
                            **uri_kwargs)
        parser.add_argument(self.file_flag, default=None, metavar="PATH",
                            help=f"read the password of {self.flag} from this file (one line; keep it mode 0600)")

    def uri(self, args: argparse.Namespace) -> str:
        """The URI flag's value with its password from the file, else from the environment
        (when the URI has none); the environment variable is removed either way."""
        from sparkcdc.upstream.connection import with_password

        from_environment = os.environ.pop(self.environment_variable, None)
        uri = getattr(args, _dest(self.flag)) or ""
        path: Optional[str] = getattr(args, _dest(self.file_flag))
        if not uri:
            if path:
                raise self.error(f"{self.file_flag} is given without {self.flag}")
            return uri
        has_password = _has_password(uri)
        if path:
            if has_password:
                raise self.error(f"the password of {self.flag} is given twice, in the URI and in {self.file_flag}: "
                                 f"remove it from {self.flag}")
            return with_password(uri, _read_password(path, self.file_flag, self.error))
        if from_environment and not has_password:
            return with_password(uri, from_environment)
        return uri


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _has_password(uri: str) -> bool:
    from urllib.parse import urlsplit

    try:
        return bool(urlsplit(uri.strip()).password)
    except ValueError:  # a malformed URI: its own parser says what is wrong with it
        return False


def _read_password(path: str, flag: str, error: type[SparkCDCError]) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            password = f.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {flag} {path}: {exc}") from None
    if not password:
        raise error(f"{flag} {path} is empty; write the password on its first line")
    return password
