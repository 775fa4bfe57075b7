"""How every sparkcdc command logs: one format, and no secret in any line at any level.

Each line (message, arguments, traceback) goes through `mask_text` (sparkcdc.config.secrets) as
it is formatted, so a password in a URI, a repr or an exception message never reaches the log,
whatever level `POST /api/v2/log` sets. py4j's DEBUG lines are its wire trace: every Spark call
with its arguments (a data source's options) and the gateway's auth token, so py4j stays at INFO.
"""

from __future__ import annotations

import logging
from typing import Optional

from sparkcdc.config.secrets import mask_text

LOG_FORMAT = "[%(asctime)s] [%(levelname)s] [%(name)s] %(message)s"
# Loggers that never go below INFO: their DEBUG output is a trace of secrets we pass through them.
QUIET_BELOW_INFO = ("py4j",)


class SecretMaskingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record))


def configure_logging(level: str, filename: Optional[str] = None) -> None:
    """Log at `level` (TiCDC's names: debug, info, warn, error) to `filename`, else stderr."""
    handler = logging.FileHandler(filename, encoding="utf-8", delay=True) if filename else logging.StreamHandler()
    handler.setFormatter(SecretMaskingFormatter(LOG_FORMAT))
    logging.basicConfig(level={"warn": "WARNING"}.get(level, level.upper()), handlers=[handler])
    for name in QUIET_BELOW_INFO:
        logging.getLogger(name).setLevel(logging.INFO)
