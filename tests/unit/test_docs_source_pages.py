"""The source pages of docs/ say what the code does.

The sink-side checks (options tables against constructors, quoted errors, the Flink
name table, imports) are in test_docs_reference_pages.py, which also checks the
options tables of the source connector pages. These cover what is particular to the
source pages: the read doors' options (the door's own, each factory's, Spark's
spellings refused), the signatures written out in prose (`monitor_continuously`,
`from_source`), the CSV options, the value tables (Redis field types, Iceberg start
points, the rows' metadata columns) and the errors the pages quote. No Spark and no
servers: the errors are raised by the code that raises them for the engines.
"""

from __future__ import annotations

import ast
import inspect
import re
import typing
from pathlib import Path

import pytest

from tests.unit.test_docs_reference_pages import (
    DOCS,
    load,
    names_in,
    page,
    parameters,
    raised,
    table,
    wrong_arguments,
)


def prose(text: str) -> str:
    """``text`` with every run of whitespace one space (signatures wrap in the pages)."""
    return " ".join(text.split())


def quoted(message: str, quote: str) -> bool:
    """Whether a page's quote of an error, with ``...`` for elided parts, fits ``message``."""
    parts = [re.escape(prose(part)) for part in re.split(r"\(?\.\.\.\)?", quote)]
    return re.search(".*?".join(parts), prose(message)) is not None


# -- signatures written out in the pages' prose ---------------------------------------


@pytest.mark.parametrize(
    ("name", "call", "target", "complete"),
    [
        (
            "sinks/file-source.md",
            "monitor_continuously",
            "reference_sinks.files:FileSource.monitor_continuously",
            True,
        ),
        (
            "sinks/iceberg-source.md",
            "monitor_continuously",
            "reference_sinks.iceberg:IcebergSource.monitor_continuously",
            True,
        ),
        ("explanation/sources.md", "from_source", "sinkv2_spark:from_source", False),
    ],
)
def test_a_signature_in_the_prose_has_the_code_s_parameters_and_defaults(
    name, call, target, complete
):
    found = re.findall(rf"`{call}\(([^`]*)\)`", prose(page(name)))
    # `f(a, b=1)` is a signature; `f(..., b=True)` a call that shows one argument
    signatures = [a for a in found if "=" in a and not a.startswith("...")]
    assert signatures, f"{name} writes out no {call}(...) signature"
    function = load(target)
    for arguments in signatures:
        assert not wrong_arguments(function, arguments, signature=True), (
            f"{name}: `{call}({arguments})`: {wrong_arguments(function, arguments, signature=True)}"
        )
        if complete:
            named = {a.split("=")[0].strip() for a in arguments.split(",")} - {"*", "..."}
            assert named == set(parameters(function)), (
                f"{name}: `{call}({arguments})` names {sorted(named)}, the code takes "
                f"{sorted(parameters(function))}"
            )


def test_the_csv_row_of_the_file_source_page_gives_csv_options_defaults():
    from reference_sinks.files import CsvOptions

    [row] = [row for row in table(page("sinks/file-source.md"), "option") if row[0] == "`csv`"]
    stated: dict[str, str] = {}  # each option's first mention gives its default
    for option, default in re.findall(r"`(\w+)=([^`]+)`", row[2]):
        stated.setdefault(option, default)
    actual = parameters(CsvOptions)
    assert set(stated) == set(actual), f"the csv row names {sorted(stated)}, not {sorted(actual)}"
    for option, default in stated.items():
        value = ast.literal_eval(default)
        assert actual[option].default == value, f"CsvOptions {option} is not {default}"


# -- the read doors ----------------------------------------------------------------------


def test_the_stream_how_to_lists_the_door_s_own_options_and_their_defaults():
    from sinkv2.runtime import DEFAULT_BATCH_ROWS
    from sinkv2_spark._doors.source_options import SOURCE_DOOR_OPTIONS

    rows = table(page("howto/stream-a-source.md"), "Option")
    documented = {row[0].strip("`").lower(): row[1] for row in rows}
    # nativeRead is the door's too, only to refuse it: the native-reads page says so
    assert '.option("nativeRead", "true")` is refused' in page("howto/native-file-reads.md")
    assert set(documented) | {"nativeread"} == set(SOURCE_DOOR_OPTIONS)
    assert f"default {DEFAULT_BATCH_ROWS:,}" in documented["batch_rows"]

    explanation = prose(page("explanation/sources.md"))
    [paragraph] = re.findall(r"The door's own options are (.*?) Every other option", explanation)
    named = {n.lower() for n in re.findall(r"`(\w+)`", paragraph)}
    assert set(SOURCE_DOOR_OPTIONS) <= named, f"sources.md names {sorted(named)}"


def test_spark_s_spellings_of_the_limits_are_refused_with_the_door_s_names():
    from sinkv2_spark._doors.source_options import door_source

    text = prose(page("howto/stream-a-source.md"))
    pairs = re.findall(r"`(max\w+PerTrigger)` is `(max\w+PerTrigger)`", text)
    assert len(pairs) == 2, pairs
    for spark_name, door_name in pairs:
        message = raised(lambda: door_source({"source": "files", spark_name.lower(): "1"}))  # noqa: B023
        assert door_name in message, f"{spark_name} is not refused naming {door_name}"


# (page, the source's short name on it, its factory)
DOOR_PAGES = [
    ("sinks/file-source.md", "files"),
    ("sinks/iceberg-source.md", "iceberg"),
    ("sinks/postgres-source.md", "postgres"),
    ("sinks/redis-stream-source.md", "redis_stream"),
]


@pytest.mark.parametrize(("name", "short"), DOOR_PAGES)
def test_a_source_page_names_every_option_of_its_read_door(name, short):
    from sinkv2_spark._doors.source_options import SOURCE_SHORT_NAMES

    text = page(name)
    spans = " ".join(re.findall(r"`([^`\n]+)`", text))
    words = re.findall(r"\w+", spans) + re.findall(r'option\("(\w+)"', text)
    mentioned = {word.lower() for word in words}
    for option, parameter in parameters(load(SOURCE_SHORT_NAMES[short])).items():
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD:
            assert option in mentioned, f"{name}: the read door's {option!r} is not named"


@pytest.mark.parametrize("name", [name for name, _ in DOOR_PAGES])
def test_every_option_the_pages_code_passes_a_read_door_is_taken(name):
    from sinkv2_spark._doors.source_options import SOURCE_DOOR_OPTIONS, SOURCE_SHORT_NAMES

    blocks = re.findall(r"```python\n(.*?)```", page(name), re.S)
    reads = [
        read.split(".load()")[0]
        for block in blocks
        for read in re.split(r"(?=spark\.read)", block)
        if read.startswith("spark.read") and 'format("sinkv2")' in read
    ]
    assert reads, f"{name} shows no read through the door"
    for read in reads:
        options = dict(re.findall(r'\.option\("(\w+)",\s*("[^"]*"|\w+)\)', read))
        spec = options.pop("source").strip('"')
        factory = load(SOURCE_SHORT_NAMES.get(spec, spec))
        accepted = parameters(factory)
        takes_more = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        for option in options:
            key = option.lower()
            assert key in SOURCE_DOOR_OPTIONS or key in accepted or takes_more, (
                f"{name}: .option({option!r}, ...) is neither the door's nor {spec!r}'s"
            )


def test_the_redis_page_lists_the_field_types_the_door_parses():
    from reference_sinks.redis._source_options import FIELD_TYPES, parse_fields

    [paragraph] = [
        p for p in page("sinks/redis-stream-source.md").split("\n\n") if "Spark's type" in p
    ]
    listed = re.findall(r"`([a-z]+(?:\(p,s\))?)`", paragraph.split("declares a field")[0])
    assert set(listed) - {"fields"} == {*FIELD_TYPES, "decimal(p,s)"}
    assert parse_fields("a decimal(10,2), b string not null").field("b").nullable is False


def test_the_redis_page_s_rows_table_is_the_produced_type():
    import pyarrow as pa

    from reference_sinks.redis import RedisStreamSource
    from reference_sinks.redis._source_rows import produced_schema

    rows = table(page("sinks/redis-stream-source.md"), "column")
    defaults = parameters(RedisStreamSource.__init__)
    produced = produced_schema(pa.schema([]), "stream", "id")
    for row, field in zip(rows, produced, strict=False):
        option, default = re.fullmatch(r"`(\w+)` \(default `(\w+)`\)", row[0]).groups()
        assert defaults[option].default == default == field.name
        assert row[1] == "string, not null"
        assert field.type == pa.string()
        assert not field.nullable


def test_the_iceberg_page_s_start_table_is_the_code_s_starting_points():
    from reference_sinks.iceberg import IcebergSource
    from reference_sinks.iceberg._source import StartingPoint

    rows = table(page("sinks/iceberg-source.md"), "`start`")
    named = [re.match(r'`"(\w+)"`', row[0]) for row in rows]
    literals = set(typing.get_args(typing.get_args(StartingPoint)[0]))
    assert {m.group(1) for m in named if m} == literals
    [default] = [row[0] for row in rows if "(default)" in row[0]]
    start = parameters(IcebergSource.monitor_continuously)["start"].default
    assert default.startswith(f'`"{start}"`')


def test_the_cdc_page_s_rows_table_names_the_change_columns():
    from reference_sinks.postgres import _cdc_source

    rows = table(page("sinks/postgres-cdc.md"), "column")
    documented = [n for row in rows for n in names_in(row[0])]
    assert documented[:3] == [_cdc_source.OP, _cdc_source.LSN, _cdc_source.SEQ]
    assert documented[-1] == _cdc_source.BEFORE


# -- errors quoted on the pages ---------------------------------------------------------


def test_the_file_source_page_quotes_the_error_of_a_value_that_does_not_parse(tmp_path):
    import pyarrow as pa

    from reference_sinks.files import FileSource
    from sinkv2.testing import LocalSourceEngine

    text = page("sinks/file-source.md")
    [quote] = re.findall(r"```text\n(FileReadError: .*?)\n```", text, re.S)
    path = re.search(r"cannot read '([^']+)'", quote).group(1)
    line = int(re.search(r"line (\d+)", quote).group(1))
    record = re.search(r"\('([^']+)'\) does not parse", quote).group(1)
    folder = tmp_path / Path(path).parent.relative_to("/")
    folder.mkdir(parents=True)
    good = "\n".join(f"{n},c,3.5" for n in range(1, line - 1))
    (folder / Path(path).name).write_text(f"id,b,c\n{good}\n{record}\n")
    schema = pa.schema([("id", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    engine = LocalSourceEngine(FileSource(folder, "csv", schema=schema), 1)
    try:
        message = raised(engine.run)
    finally:
        engine.close()
    cause = message.split("FileReadError: ", 1)[1].replace(str(tmp_path), "")
    assert quoted(f"FileReadError: {cause}", quote), f"the page quotes {quote!r}, got {cause!r}"


def test_the_redis_page_quotes_the_entry_and_key_errors():
    import pyarrow as pa
    import redis

    from reference_sinks.redis._source_client import _check
    from reference_sinks.redis._source_rows import EntryRows, produced_schema

    text = prose(page("sinks/redis-stream-source.md"))
    quotes = re.findall(r"`((?:StreamEntryError|NotAStreamError|entry )[^`]*)`", text)
    assert len(quotes) == 3, quotes

    schema = pa.schema([("amount", pa.float64()), pa.field("n", pa.int64(), nullable=False)])
    rows = EntryRows(produced_schema(schema, "stream", "id"))
    entry_id = re.search(r"entry (\d+-\d+)", quotes[0]).group(1).encode()
    bad = raised(lambda: rows.batch("orders:eu", [(entry_id, {b"amount": b"lots", b"n": b"1"})]))
    missing = raised(lambda: rows.batch("orders:eu", [(entry_id, {b"amount": b"1"})]))
    wrong = redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")
    not_a_stream = raised(lambda: _check("orders", wrong, "XREVRANGE"))
    for quote, message in zip(quotes, [bad, missing, not_a_stream], strict=True):
        assert quoted(message, quote), f"the page quotes {quote!r}; the code says {message!r}"


# -- behaviours the pages describe, where they need neither Spark nor a server ------------


def test_the_postgres_source_page_says_what_becomes_of_a_query_s_trailing_semicolon():
    from reference_sinks.postgres._chunks import Relation

    [row] = [
        row for row in table(page("sinks/postgres-source.md"), "option") if row[0] == "`query`"
    ]
    dropped = Relation.of_query("SELECT id FROM orders;\n").query == "SELECT id FROM orders"
    assert ("trailing `;` is dropped" in row[2]) == dropped, row[2]


def test_the_tutorial_s_failed_reader_tip_shows_add_splits_back(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS / "examples"))
    import first_source

    from sinkv2.testing import LocalSourceEngine

    tip = prose(page("tutorial/first-source.md")).split("Fail a reader", 1)[1].split("- ", 1)[0]
    until = re.search(r"`engine\.run\(until=(lambda e: [^`]*)\)`", tip)
    assert until is not None, "the tip no longer says where to take the checkpoint"
    assert "engine.assigned_since_checkpoint()" in tip
    namespace = {"emitted": first_source.emitted}
    first_source.write_sample_files(tmp_path)
    source = first_source.JsonLinesSource(tmp_path, first_source.ORDERS, lines_per_fetch=3)
    engine = LocalSourceEngine(source, parallelism=2, seed=1)  # as main's engine
    try:
        engine.run(until=eval(until.group(1), namespace))  # the page's own code
        engine.checkpoint()
        engine.run(until=lambda e: bool(e.assigned_since_checkpoint()) or e.finished)
        engine.fail_reader(engine.assigned_since_checkpoint()[0])
        assert any("add_splits_back" in line for line in engine.log)
    finally:
        engine.close()


def test_the_cdc_page_says_when_a_missing_slot_s_error_names_an_lsn(monkeypatch):
    import types

    from reference_sinks.postgres import _cdc_server

    monkeypatch.setattr(_cdc_server, "slot_state", lambda connection, slot: None)
    connection = types.SimpleNamespace(info=types.SimpleNamespace(dbname="shop"))
    planning = raised(lambda: _cdc_server.check_slot(connection, "sinkv2_cdc_0"))  # type: ignore[arg-type]
    reading = raised(lambda: _cdc_server.check_slot(connection, "sinkv2_cdc_0", 0x1538480))  # type: ignore[arg-type]
    assert "LSN 0/1538480" in reading
    text = prose(page("sinks/postgres-cdc.md"))
    [claim] = re.findall(r"A `CommitStateError` names the slot[^:]*:[^:]*:", text)
    if "LSN" not in planning:  # the page must not say every such error names one
        assert "named without one" in claim, claim


def test_the_file_source_page_says_what_spark_makes_of_an_unsigned_parquet_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reference_sinks.files import FileSource
    from sinkv2_spark._doors.source_read import _spark_schema

    kinds = {"uint8": "short", "uint16": "int", "uint32": "long", "uint64": "decimal(20,0)"}
    pq.write_table(
        pa.table({k: pa.array([1], getattr(pa, k)()) for k in kinds}), tmp_path / "x.parquet"
    )
    text = prose(page("sinks/file-source.md"))
    for unsigned, spark in kinds.items():
        assert f"`{unsigned}` to `{spark}`" in text, unsigned
    assert _spark_schema(FileSource(tmp_path))[0].simpleString() == (
        "struct<uint8:smallint,uint16:int,uint32:bigint,uint64:decimal(20,0)>"
    )
