"""How every sparkcdc command logs: one format, and no secret in any line at any level.

Each line (message, arguments, traceback) goes through `mask_text` (sparkcdc.config.secrets) as
it is formatted, so a password in a URI, a repr or an exception message never reaches the log,
whatever level `POST /api/v2/log` sets. py4j's DEBUG lines are its wire trace: every Spark call
with its arguments (a data source's options) and the gateway's auth token, so py4j stays at INFO.

`--log-format json` writes one JSON object a line instead: `time` (UTC, ISO 8601 with
milliseconds), `level` (TiCDC's names: DEBUG, INFO, WARN, ERROR), `logger`, `message` (with the
traceback, if any), `changefeed` (`<namespace>/<id>` when the line is about one: the record's
`extra={"changefeed": ...}` or the thread's `observability.log_context`) and `fields` (any other
`extra` of the record). The text format is the default and does not change.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
from typing import Optional

from sparkcdc.config.secrets import mask_document, mask_text
from sparkcdc.observability.log_context import current_changefeed

LOG_FORMAT = "[%(asctime)s] [%(levelname)s] [%(name)s] %(message)s"
# Loggers that never go below INFO: their DEBUG output is a trace of secrets we pass through them.
QUIET_BELOW_INFO = ("py4j",)


class SecretMaskingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record))


# The attributes every LogRecord has: anything else on a record came from `extra`.
_RECORD_ATTRIBUTES = (frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)))
                      | {"message", "asctime", "changefeed"})
_LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "FATAL"}
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object a line (module docstring), masked like the text format."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            message += "\n" + self.formatStack(record.stack_info)
        document = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": _LEVEL_NAMES.get(record.levelname, record.levelname),
            "logger": record.name,
            "message": mask_text(message),
        }
        changefeed = getattr(record, "changefeed", None) or current_changefeed()
        if changefeed:
            document["changefeed"] = changefeed
        fields = {key: value for key, value in vars(record).items() if key not in _RECORD_ATTRIBUTES}
        if fields:
            document["fields"] = mask_document(json.loads(json.dumps(fields, default=str)))
        return json.dumps(document, ensure_ascii=False)


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-format", default="text", choices=LOG_FORMATS,
                        help="text (default) or json: one JSON object a line with time, level, logger, message, "
                             "changefeed and fields")


def configure_logging(level: str, filename: Optional[str] = None, log_format: str = "text") -> None:
    """Log at `level` (TiCDC's names: debug, info, warn, error) to `filename`, else stderr, in
    `log_format` (text or json)."""
    handler = logging.FileHandler(filename, encoding="utf-8", delay=True) if filename else logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else SecretMaskingFormatter(LOG_FORMAT))
    logging.basicConfig(level={"warn": "WARNING"}.get(level, level.upper()), handlers=[handler])
    for name in QUIET_BELOW_INFO:
        logging.getLogger(name).setLevel(logging.INFO)
