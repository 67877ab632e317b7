"""The reference pages of docs/ say what the code does.

Each connector page has a table of the constructor's options with their defaults,
quotes the errors a bad argument raises, and docs/flink-names.md names the Python
counterpart of every Flink name. These drift when a parameter is added, renamed or
given another default, or a message is reworded; these tests compare the pages with
the code, without Spark and without servers.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def table(text: str, header: str, nth: int = 0) -> list[list[str]]:
    """The rows (cells stripped) of the ``nth`` table whose first column is ``header``."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        separator = lines[index + 1] if index + 1 < len(lines) else ""
        if line.startswith(f"| {header} |") and separator.startswith("|---"):
            if nth:
                nth -= 1
                continue
            rows = []
            for row in lines[index + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]])
            return rows
    raise AssertionError(f"no table with a {header!r} column")


def names_in(cell: str) -> list[str]:
    """The identifiers a first cell names: `a` or `a`, `b`."""
    return re.findall(r"`([A-Za-z_]\w*)`", cell)


def literal(cell: str) -> tuple[bool, object]:
    """A default cell's value when it is a plain literal (`8`, 4096, 65,536, `None`)."""
    text = cell.strip().strip("`")
    if re.fullmatch(r"\d{1,3}(,\d{3})*|\d+", text):
        return True, int(text.replace(",", ""))
    known = {"None": None, "False": False, "True": True, "()": ()}
    if text in known:
        return True, known[text]
    if re.fullmatch(r'"[\w-]*"', text):
        return True, text.strip('"')
    return False, None


def parameters(target: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    signature = inspect.signature(target)
    return {name: p for name, p in signature.parameters.items() if name != "self"}


# (page, header of its options table, where the constructor lives)
OPTION_TABLES = [
    ("sinks/files.md", "option", "reference_sinks.files:FileSink.__init__"),
    ("sinks/file-source.md", "option", "reference_sinks.files:FileSource.__init__"),
    ("sinks/iceberg.md", "option", "reference_sinks.iceberg:IcebergSink.__init__"),
    ("sinks/postgres.md", "argument", "reference_sinks.postgres:PostgresSink.__init__"),
    ("sinks/postgres-source.md", "option", "reference_sinks.postgres:PostgresSource.__init__"),
    ("sinks/postgres-cdc.md", "option", "reference_sinks.postgres:PostgresCdcSource.__init__"),
    ("sinks/redis.md", "argument", "reference_sinks.redis:RedisSink.__init__"),
    ("sinks/redis-stream-source.md", "option", "reference_sinks.redis:RedisStreamSource.__init__"),
    ("sinks/http.md", "option", "reference_sinks.http:HttpSink.__init__"),
]


def load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize(("name", "header", "target"), OPTION_TABLES)
def test_an_options_table_lists_every_parameter_with_its_default(name, header, target):
    rows = table(page(name), header)
    documented = {option: row[1] for row in rows for option in names_in(row[0])}
    actual = parameters(load(target))

    assert set(documented) == set(actual), (
        f"{name}: the table lists {sorted(documented)}, the constructor takes {sorted(actual)}"
    )
    for option, cell in documented.items():
        is_literal, value = literal(cell)
        if is_literal:
            assert actual[option].default == value, (
                f"{name}: {option} defaults to {actual[option].default!r}, the page says {cell}"
            )


@pytest.mark.parametrize("name", ["sinks/http.md", "howto/async-sink.md"])
def test_the_buffering_hints_tables_give_the_configuration_s_defaults(name):
    from sinkv2.asyncsink import AsyncSinkWriterConfiguration

    defaults = parameters(AsyncSinkWriterConfiguration)
    sizes = {"5 MiB": 5 * 1024 * 1024, "1 MiB": 1024 * 1024}
    checked = 0
    for row in table(page(name), "hint"):
        for hint in names_in(row[0]):
            assert hint in defaults, f"{name}: {hint} is not a configuration field"
            is_literal, value = literal(row[1])
            if row[1] in sizes:
                is_literal, value = True, sizes[row[1]]
            if is_literal:
                assert defaults[hint].default == value, f"{name}: {hint} is {row[1]} on the page"
                checked += 1
    assert checked >= 6


def test_the_streaming_keywords_table_names_apply_s_keywords():
    from sinkv2_spark import SinkTopologyTranslator

    keywords = parameters(SinkTopologyTranslator.apply)
    for row in table(page("streaming.md"), "keyword"):
        (keyword,) = names_in(row[0])
        assert keyword in keywords, f"streaming.md: apply() has no keyword {keyword!r}"
        is_literal, value = literal(row[1])
        if is_literal:
            assert keywords[keyword].default == value


def test_the_data_source_s_short_names_table_names_each_factory_s_options():
    from sinkv2_spark._doors.datasource_stream_options import STREAM_DOOR_OPTIONS
    from sinkv2_spark._rules.options import DOOR_OPTIONS, SHORT_NAMES

    text = page("howto/spark-data-source.md")
    assert {row[0].strip("`") for row in table(text, "option")} == set(DOOR_OPTIONS)
    streaming = {row[0].strip("`").lower() for row in table(text, "option", nth=1)}
    assert streaming == set(STREAM_DOOR_OPTIONS)
    rows = {row[0].strip("`"): row[2] for row in table(text, "`sink`")}
    assert set(rows) == set(SHORT_NAMES)
    for short, cell in rows.items():
        factory = load(SHORT_NAMES[short])
        mentioned = set(re.findall(r"`([a-z_]+)`", cell))
        for option, parameter in parameters(factory).items():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                assert "`catalog.<property>`" in cell
                continue
            if option == "sink_id":  # the data source's own option, passed on
                continue
            assert option in mentioned, f"the {short!r} row does not name its {option!r} option"


# -- errors quoted on the pages -------------------------------------------------------


def raised(call: Callable[[], object]) -> str:
    with pytest.raises(Exception) as caught:  # noqa: PT011  # any error: its text is compared
        call()
    return f"{type(caught.value).__name__}: {caught.value}"


def test_the_sink_pages_quote_the_errors_bad_arguments_raise():
    from reference_sinks.files import FileSink
    from reference_sinks.http import HttpSink
    from reference_sinks.postgres import PostgresSink
    from sinkv2.asyncsink import AsyncSinkWriterConfiguration

    url = "postgresql://app@db:5432/shop"
    quoted = {
        "sinks/files.md": [raised(lambda: FileSink("/tmp/out", format="csv"))],  # type: ignore[arg-type]
        "sinks/postgres.md": [
            raised(lambda: PostgresSink(url, "a.b.c")),
            raised(lambda: PostgresSink(url, "t", upsert_key=[])),
        ],
        "sinks/http.md": [raised(lambda: HttpSink("ftp://host/x"))],
    }
    for name, messages in quoted.items():
        text = page(name)
        for message in messages:
            assert message in text, f"{name} does not quote {message!r}"

    message = raised(
        lambda: AsyncSinkWriterConfiguration(max_buffered_requests=500, max_batch_size=500)
    )
    quote = re.search(r"`('max_buffered_requests' must[^`]*)`", page("howto/async-sink.md"))
    assert quote is not None
    assert " ".join(quote.group(1).split()) in message


def test_the_iceberg_page_quotes_the_missing_table_and_schema_errors(tmp_path):
    import pyarrow as pa

    from reference_sinks.iceberg import IcebergSink, local_catalog

    text = page("sinks/iceberg.md")
    warehouse = tmp_path / "warehouse"
    assert raised(lambda: IcebergSink(local_catalog(warehouse), "ns.nope")) in text

    table = pa.schema(
        [
            ("id", pa.int64()),
            ("key", pa.string()),
            ("value", pa.float64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
        ]
    )
    sink = IcebergSink.local(warehouse, "ns.events", schema=table)
    columns = [pa.field("amount", pa.float64()) if f.name == "value" else f for f in table]
    got = pa.schema(columns).set(1, pa.field("key", pa.large_string()))
    assert raised(lambda: sink.check_schema(got)) in text


# -- docs/flink-names.md ---------------------------------------------------------------

MODULES = [
    "sinkv2",
    "sinkv2.metrics",
    "sinkv2.asyncsink",
    "sinkv2.errors",
    "sinkv2.source",
    "sinkv2.source.reader",
    "sinkv2.source.lib",
    "sinkv2.runtime",
    "sinkv2.runtime.committables",
    "sinkv2.testing",
    "sinkv2_spark",
    "sinkv2_spark.committables",
]


def resolve(dotted: str) -> Any:
    """A name as the page writes it: `sinkv2.x.Y.z`, or `Y.z` of one of the modules."""
    parts = dotted.split(".")
    if parts[0] in ("sinkv2", "sinkv2_spark"):
        for cut in range(len(parts), 0, -1):
            try:
                target: Any = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for part in parts[cut:]:
                target = getattr(target, part)
            return target
    for module in MODULES:
        target = importlib.import_module(module)
        try:
            for part in parts:
                target = getattr(target, part)
        except AttributeError:
            continue
        return target
    raise LookupError(dotted)


def python_column(line: str) -> str | None:
    """The cell of a table row that holds sinkv2's names, if the row maps a name."""
    if not line.startswith("| ") or line.startswith(("| Flink", "| sinkv2 ")):
        return None
    cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
    if len(cells) < 3 or set(cells[0]) <= {"-"}:
        return None
    return cells[0] if cells[-1] == "extension" else cells[1]


def wrong_arguments(target: Any, arguments: str, *, signature: bool) -> list[str]:
    """What ``name(a, b=1)`` gets wrong about ``target``: names it lacks, other defaults.

    Defaults are compared only where the token is a ``signature`` (not a call).
    """
    try:
        accepted = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return []
    wrong = []
    for argument in arguments.split(","):
        name, _, default = (part.strip() for part in argument.partition("="))
        name = name.lstrip("*")
        if not re.fullmatch(r"[a-z_]\w*", name):
            continue
        if name not in accepted:
            wrong.append(f"no parameter {name!r}")
            continue
        try:
            value = ast.literal_eval(default) if default else ...
        except (ValueError, SyntaxError):
            continue  # a name, such as DEFAULT_RETAIN
        if signature and value is not ... and accepted[name].default != value:
            wrong.append(f"{name} defaults to {accepted[name].default!r}, not {default}")
    return wrong


def test_every_python_name_in_the_flink_name_table_exists_with_those_parameters():
    problems = []
    for line in page("flink-names.md").splitlines():
        column = python_column(line)
        # an extension row gives signatures; elsewhere `f(a=)` or `*` marks one, not a call
        extension = line.rstrip().endswith("| extension |")
        context: Any = None  # the class a bare method name belongs to
        for token in re.findall(r"`([^`]+)`", column or ""):
            match = re.match(r"([A-Za-z_][\w.]*)(\[[^\]]*\])?(\((.*)\))?", token)
            if match is None or token.startswith("async def"):
                continue
            name, arguments = match.group(1), match.group(4)
            signature = extension or bool(re.search(r"=[,)]|=$|\*", arguments or ""))
            if name in {"None", "True", "False"}:
                continue
            if "." not in name and name[0].islower():
                if context is None or not hasattr(context, name):
                    continue  # a method named beside its class, or a call shown
                target = getattr(context, name)
            else:
                try:
                    target = resolve(name)
                except (LookupError, AttributeError):
                    problems.append(f"{name!r} (in `{token}`) is not importable")
                    continue
            if inspect.isclass(target):
                context = target
            problems += [
                f"`{token}`: {name}: {wrong}"
                for wrong in wrong_arguments(target, arguments or "", signature=signature)
            ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("name", "opening", "factory"),
    [
        (
            "sinks/file-source.md",
            "Through the door",
            "reference_sinks.files:file_source_from_options",
        ),
        (
            "sinks/iceberg-source.md",
            "Options: ",
            "reference_sinks.iceberg:iceberg_source_from_options",
        ),
    ],
)
def test_a_read_door_paragraph_names_every_option_the_factory_takes(name, opening, factory):
    paragraphs = page(name).split("\n\n")
    [paragraph] = [p for p in paragraphs if p.startswith(opening)]
    mentioned = {word.lower() for word in re.findall(r"\w+", paragraph)}
    if "each option below" in paragraph:  # and the options table's names
        mentioned |= {n for row in table(page(name), "option") for n in names_in(row[0])}
    for option, parameter in parameters(load(factory)).items():
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD:
            assert option in mentioned, f"{name}: the read door's {option!r} is not named"


def test_the_translator_page_describes_every_field_of_sink_result():
    import attrs

    from sinkv2.runtime import SinkResult

    rows = table(page("explanation/spark-translator.md"), "field")
    documented = [name for row in rows for name in names_in(row[0])]
    assert documented == [field.name for field in attrs.fields(SinkResult)]


def test_every_import_in_the_pages_python_blocks_resolves(monkeypatch):
    root = DOCS.parent
    for folder in (root, root / "examples", DOCS / "examples"):  # parquet_sink, sqlite_sink
        monkeypatch.syspath_prepend(str(folder))
    missing = []
    for path in sorted(DOCS.rglob("*.md")):
        for block in re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            for found in re.finditer(r"^\s*from ([\w.]+) import (\([^)]*\)|[^\n]+)", block, re.M):
                module = importlib.import_module(found.group(1))
                text = re.sub(r"#[^\n]*", "", found.group(2)).strip("()")
                for name in filter(None, (n.strip().split(" as ")[0] for n in text.split(","))):
                    if not hasattr(module, name):
                        missing.append(f"{path.relative_to(DOCS)}: {found.group(1)} has no {name}")
            for found in re.finditer(r"^\s*import ([\w.]+)", block, re.M):
                importlib.import_module(found.group(1))
    assert not missing, "\n".join(missing)


def test_the_streaming_page_lists_every_member_of_the_query_handle():
    from sinkv2_spark import SinkStreamingQuery

    rows = table(page("streaming.md"), "member")
    documented = {n for row in rows for n in re.findall(r"`([A-Za-z_]\w*)[`(]", row[0])}
    documented |= {"query"}  # "`query` is Spark's `StreamingQuery` itself", in a cell
    public = {name for name in dir(SinkStreamingQuery) if not name.startswith("_")}
    assert documented == public


def test_the_redis_page_gives_the_sink_s_default_configuration():
    from reference_sinks.redis import DEFAULT_CONFIGURATION

    [paragraph] = [
        p for p in page("sinks/redis.md").split("\n\n") if "`DEFAULT_CONFIGURATION`:" in p
    ]
    stated = dict(re.findall(r"`(\w+)=(\d+)`", paragraph))
    assert len(stated) >= 5
    for name, value in stated.items():
        assert getattr(DEFAULT_CONFIGURATION, name) == int(value), name
