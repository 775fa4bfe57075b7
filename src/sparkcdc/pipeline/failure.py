"""The changefeed failure policy: what a user sees of a failure, and whether it may pass by itself.

A changefeed's failure reaches the runner as the text of an exception that often crossed Spark
(a Python worker's traceback inside a `[STREAM_FAILED]` error). `user_message` turns it into the
one line a user sees: our own `[SPARKCDC:ErrXxx] ...` line when there is one (every error we
raise names its component and the fix), else `SPARKCDC:ErrProcessorUnknown` with the component
that failed and the exception's own last line, never a bare traceback header.

Whether a failure is retryable is said by its error class (`errors.py`: `retryable`); for the
classes whose cause decides (`retryable = None`), a MySQL error number quoted in the text decides
(sink/mysql/error_codes.py), or one of Spark's transient failures on a loaded machine.
"""

from __future__ import annotations

import re

from sparkcdc.errors import ErrProcessorUnknown, ErrPullerStalled, ErrUpstreamUnreachable, error_class
from sparkcdc.sink.mysql.error_codes import is_configuration_message, is_retryable_message

# Spark's own transient failures on a loaded machine: a Python worker that did not connect back
# in time, a Py4J socket timeout.
TRANSIENT_SPARK_TEXT = ("Python worker failed to connect back", "CANNOT_OPEN_SOCKET", "SocketTimeoutException",
                        "Py4JNetworkError")
# Failures that mean the upstream (or this capture's binlog puller) is not there: the runner waits
# for the puller to be healthy again rather than for a blind backoff.
UPSTREAM_CODES = frozenset({ErrUpstreamUnreachable.code, ErrPullerStalled.code})
_CODE = re.compile(r"\[(SPARKCDC:Err\w+)\]")
# The last line of a Python traceback: `package.module.SomeError: message`.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt|Timeout)(?::.*)?$")
# Exception classes that only wrap the real one as it crosses Spark.
_WRAPPERS = ("pyspark.", "py4j.", "org.apache.spark.", "java.", "StreamingQueryException",
             "PythonException", "Py4JJavaError")
MAX_MESSAGE = 2000


def error_code(message: str) -> str:
    """The `SPARKCDC:ErrXxx` code a user-facing message starts with (ErrProcessorUnknown if none)."""
    match = _CODE.match(message)
    return match.group(1) if match else ErrProcessorUnknown.code


def user_message(exc: BaseException | str) -> str:
    """The one line a user sees of a changefeed failure (see the module docstring)."""
    text = str(exc)
    for line in text.splitlines():
        if "[SPARKCDC:" in line:
            return line[line.index("[SPARKCDC:"):].strip()[:MAX_MESSAGE]
    cause = _innermost_exception_line(text) or (type(exc).__name__ if isinstance(exc, BaseException) else "")
    if not cause:
        cause = next((line.strip() for line in text.splitlines() if line.strip()), "no message")
    retryable = _cause_is_retryable(text)
    if retryable and not _cause_is_retryable(cause):  # show what makes it transient
        cause = next((line.strip() for line in text.splitlines() if _cause_is_retryable(line)), cause)
    fix = ("it looks transient: the changefeed restarts from its checkpoint by itself" if retryable else
           "the server log has the full trace; fix the cause and resume the changefeed "
           "(`sparkcdc cli changefeed resume`), and report it if it repeats")
    return f"[{ErrProcessorUnknown.code}] {_component(text)} failed: {cause.strip()[:MAX_MESSAGE // 2]}; {fix}"


def is_retryable_failure(message: str) -> bool:
    """Whether a changefeed failure may pass by itself (TiCDC retries these until stuck)."""
    if is_configuration_message(message):
        return False
    cls = error_class(error_code(message))
    if cls is None:
        return False
    if cls.retryable is None:
        return _cause_is_retryable(message)
    return cls.retryable


def is_upstream_failure(message: str) -> bool:
    """The failure says the upstream (or the binlog puller) is not there."""
    return error_code(message) in UPSTREAM_CODES


def _cause_is_retryable(text: str) -> bool:
    return is_retryable_message(text) or any(marker in text for marker in TRANSIENT_SPARK_TEXT)


def _innermost_exception_line(text: str) -> str:
    """The last `SomeError: message` line that is not one of Spark's wrappers: the real cause."""
    found = ""
    for line in text.splitlines():
        stripped = line.strip()
        if _EXCEPTION_LINE.match(stripped) and not stripped.startswith(_WRAPPERS) \
                and not any(wrapper in stripped.split(":", 1)[0] for wrapper in _WRAPPERS):
            found = stripped
    return found


def _component(text: str) -> str:
    """Which part of the changefeed failed, as far as Spark's error text tells."""
    if "Python worker" in text or "PythonException" in text:
        return "a Spark task reading the binlog"
    if "FOREACH_BATCH_USER_FUNCTION_ERROR" in text:
        return "the batch writer (foreachBatch)"
    if "STREAM_FAILED" in text:
        return "the changefeed's Spark query"
    return "the changefeed"
