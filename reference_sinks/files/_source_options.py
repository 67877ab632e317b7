"""`FileSource` from string options, for ``spark.read.format("sinkv2").option("source", ...)``.

Spark's option values are strings and their names lower-cased; each is parsed
here with an error that names the option::

    .option("source", "files").option("path", "/data/in").option("format", "jsonl")
    .option("monitor_interval", "10").option("max_file_age", "604800")
    .option("clean_source", "archive").option("archive_dir", "/data/done")
    .option("dead_letter_dir", "/data/bad")

Spark's own spellings of the file stream's options are taken too: ``maxFileAge`` (a
Spark time string, ``7d``, ``1h``, ``30s``; a bare number is milliseconds, as in
Spark), ``cleanSource``, ``sourceArchiveDir``, ``inferSchema``, and ``format`` ``json``
(Spark's JSON reader reads JSON lines) for ``jsonl``.
"""

from __future__ import annotations

import math
import re

from reference_sinks.files._source import CleanSource, FileSource
from reference_sinks.files._source_formats import SOURCE_FORMATS, CsvOptions, SourceFormat
from sinkv2.errors import SinkConfigurationError

__all__ = ["file_source_from_options"]

_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})
_SPARK_TIME = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_SPARK_TIME_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def _spark_time(option: str, value: str) -> str:
    """Spark's time string (``7d``, ``1h``, ``500``: milliseconds) as seconds, as text."""
    match = _SPARK_TIME.fullmatch(value)
    if match is None or float(match.group(1)) <= 0:
        raise SinkConfigurationError(
            f"the {option!r} option must be a positive Spark time string such as '7d', "
            f"'12h', '30s' or '500ms' (a bare number is milliseconds) (got {value!r})"
        )
    unit = (match.group(2) or "ms").lower()
    return repr(float(match.group(1)) * _SPARK_TIME_UNITS[unit])


def _one_of(spellings: dict[str, str | None]) -> tuple[str, str | None]:
    """The one option given among ``spellings`` (ours first), refusing two."""
    given = [(name, value) for name, value in spellings.items() if value is not None]
    if len(given) > 1:
        raise SinkConfigurationError(
            f"give one of the options {[name for name, _ in given]}, not both: they mean the same"
        )
    return given[0] if given else (next(iter(spellings)), None)


def _number(option: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number < math.inf:
        raise SinkConfigurationError(
            f"the {option!r} option must be a positive number of seconds, finite (got "
            f"{value!r}); e.g. .option({option!r}, '10')"
        )
    return number


def _count(option: str, value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise SinkConfigurationError(
            f"the {option!r} option must be a positive integer (got {value!r})"
        )
    return int(text)


def _flag(option: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    text = value.strip().lower()
    if text not in _TRUE | _FALSE:
        raise SinkConfigurationError(
            f"the {option!r} option must be 'true' or 'false' (got {value!r})"
        )
    return text in _TRUE


def file_source_from_options(
    *,
    path: str | None = None,
    format: str = "parquet",  # the option's name (Spark's)
    monitor_interval: str | None = None,
    max_file_age: str | None = None,
    clean_source: str = "off",
    archive_dir: str | None = None,
    split_bytes: str | None = None,
    batch_rows: str | None = None,
    header: str | None = None,
    sep: str | None = None,
    infer_schema: str | None = None,
    inferschema: str | None = None,
    dead_letter_dir: str | None = None,
    maxfileage: str | None = None,
    cleansource: str | None = None,
    sourcearchivedir: str | None = None,
) -> FileSource:
    r"""A `FileSource` from Spark's string options (names as Spark's file readers spell them).

    ``path`` is required. ``monitor_interval`` (seconds) makes the source continuous;
    ``max_file_age`` (seconds), ``clean_source`` and ``archive_dir`` go with it. CSV
    takes ``header``, ``sep`` (one character, or Spark's ``\t`` for a tab) and
    ``infer_schema`` (or Spark's ``inferSchema``, which Spark passes lower-cased).
    The schema is inferred as `FileSource` infers it. ``dead_letter_dir`` sets
    aside what does not parse (see `FileSource`).

    Raises:
        SinkConfigurationError: A missing or bad option, named.
    """
    if path is None or not path.strip():
        raise SinkConfigurationError(
            "the files source needs the 'path' option; e.g. .option('path', '/data/in')"
        )
    file_format = format.strip().lower()
    file_format = "jsonl" if file_format == "json" else file_format  # Spark's name
    if file_format not in SOURCE_FORMATS:
        raise SinkConfigurationError(
            f"the 'format' option must be one of {list(SOURCE_FORMATS)} (got {format!r})"
        )
    if infer_schema is not None and inferschema is not None:
        raise SinkConfigurationError(
            "give the 'infer_schema' option or Spark's 'inferSchema', not both"
        )
    csv = CsvOptions(
        header=_flag("header", header, default=True),
        delimiter=_separator(sep),
        infer_schema=_flag(
            "infer_schema" if inferschema is None else "inferSchema",
            infer_schema if inferschema is None else inferschema,
            default=False,
        ),
    )
    kwargs: dict[str, int] = {}
    for option, value in (("split_bytes", split_bytes), ("batch_rows", batch_rows)):
        count = _count(option, value)
        if count is not None:
            kwargs[option] = count
    source = FileSource(
        path,
        _format(file_format),
        csv=csv,
        dead_letter_dir=dead_letter_dir,
        **kwargs,  # type: ignore[arg-type]
    )
    interval = _number("monitor_interval", monitor_interval)
    if maxfileage is not None:
        maxfileage = _spark_time("maxFileAge", maxfileage)
    age_option, max_file_age = _one_of({"max_file_age": max_file_age, "maxFileAge": maxfileage})
    clean_option, clean = _one_of(
        {
            "clean_source": None if clean_source == "off" else clean_source,
            "cleanSource": cleansource,
        }
    )
    archive_option, archive_dir = _one_of(
        {"archive_dir": archive_dir, "sourceArchiveDir": sourcearchivedir}
    )
    clean_source = clean if clean is not None else "off"
    continuous_only = {age_option: max_file_age, archive_option: archive_dir}
    if interval is None:
        given = [name for name, value in continuous_only.items() if value is not None]
        if given or clean_source.strip().lower() != "off":
            raise SinkConfigurationError(
                f"the options {given or [clean_option]} are for a continuous source; add "
                ".option('monitor_interval', '<seconds>')"
            )
        return source
    return source.monitor_continuously(
        interval,
        max_file_age=_number(age_option, max_file_age),
        clean_source=_clean(clean_source, clean_option),
        archive_dir=archive_dir,
    )


def _separator(sep: str | None) -> str:
    if sep is None:
        return ","
    text = "\t" if sep == "\\t" else sep  # Spark's spelling of a tab
    if len(text) != 1 or text in "\r\n":
        raise SinkConfigurationError(
            f"the 'sep' option must be one character other than a line break (got {sep!r}); "
            "e.g. .option('sep', ';'), or .option('sep', '\\t') for a tab"
        )
    return text


def _format(text: str) -> SourceFormat:
    return text  # type: ignore[return-value]  # checked against SOURCE_FORMATS above


def _clean(text: str, option: str = "clean_source") -> CleanSource:
    value = text.strip().lower()
    if value not in ("off", "archive", "delete"):
        raise SinkConfigurationError(
            f"the {option!r} option must be 'off', 'archive' or 'delete' (got {text!r})"
        )
    return value  # type: ignore[return-value]  # one of the three
