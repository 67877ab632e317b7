"""A real local HTTP receiver for testing HTTP sinks: records batches, injects latency and faults.

It lives in the repository's tests, not in the wheel: copy it to test your own sink.

Run it in its own process, so its CPU does not share the sink's GIL::

    python -m tests.servers.http_server --port 0   # first stdout line: the port

or from Python, with `LocalServer` (starts that process, waits until it answers,
stops it by PID)::

    with LocalServer.start() as server:
        server.control(latency_ms=5, capacity=20_000)      # 5 ms per request, 20k records/s
        sink = HttpSink(server.ingest_url)
        ...
        assert len(server.records()) == n

It listens on 127.0.0.1 only. Endpoints (all JSON):

- ``POST /ingest``: a batch ``{"records": [...]}``, numbered 0, 1, 2... in arrival
  order since the last reset. The answer follows the sink's protocol: 200
  ``{"stored": n, "retry": [indices]}``, 429/503 with ``Retry-After``, or an error
  status with a message. Stored records are kept in arrival order.
- ``POST /control``: change the behaviour; the body's keys replace the current ones
  (see `Behaviour`). Answers the whole behaviour.
- ``GET /records``: ``{"records": [...]}``, in arrival order.
- ``GET /stats``: ``{"records": n, "requests": n, "batch_sizes": [n, ...],
  "statuses": {"200": n, ...}}`` (``batch_sizes``: records per request, in arrival order).
- ``POST /reset``: forget records and counters, back to the default behaviour.
  Requests still waiting out their latency store nothing (they get a 503), so a
  test's late requests never leak into the next one.

A request goes through, in order: its latency; the schedule (``schedule[n]`` for
request number ``n`` answers with that status, or retries those indices);
throttling (a token bucket of ``capacity`` records/s: a batch the bucket cannot pay
for gets 429 with ``Retry-After``, in whole seconds unless ``throttle_retry_after``
says otherwise); random failures (``fail_probability``); random per-record retries
(``retry_probability``); then its records are stored. A failed request stores nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Any, Final, final

import attrs

from sinkv2.text import missing_extra

try:
    from aiohttp import web
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("tests.servers.http_server", "aiohttp", "http") from error

__all__ = ["Behaviour", "LocalServer", "ScheduledAnswer", "main"]

HOST: Final = "127.0.0.1"


def _status(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 200 <= value <= 599:
        raise ValueError(f"{attribute.name} must be an HTTP status 200..599 (got {value!r})")


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{attribute.name} must be a number >= 0 (got {value!r})")


def _probability(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be a probability in [0, 1] (got {value!r})")


@final
@attrs.frozen(kw_only=True)
class ScheduledAnswer:
    """What the server answers to one numbered request.

    Attributes:
        status: The status; a 2xx stores the records not listed in ``retry``.
        retry: For a 2xx: indices of records not stored, listed under ``"retry"``.
        retry_after: The ``Retry-After`` header value, if any (e.g. ``"1"``).
        latency_ms: Replaces the behaviour's latency for this request.
        hold_until_stored: Answer only once the server has stored this many records
            (from other requests; at most 60 s): orders a slow request after others
            without racing a timer on a loaded machine.
        message: The error body of a non-2xx answer.
    """

    status: int = attrs.field(default=200, validator=_status)
    retry: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    retry_after: str | None = None
    latency_ms: float | None = attrs.field(default=None, validator=_non_negative)
    hold_until_stored: int | None = attrs.field(default=None, validator=_non_negative)
    message: str = "injected failure"


def _schedule(value: Any) -> dict[int, ScheduledAnswer]:
    if isinstance(value, dict) and all(isinstance(a, ScheduledAnswer) for a in value.values()):
        return {int(n): a for n, a in value.items()}
    if not isinstance(value, dict):
        raise ValueError(f"schedule must map request numbers to answers (got {value!r:.100})")
    return {int(n): ScheduledAnswer(**answer) for n, answer in value.items()}


@final
@attrs.frozen(kw_only=True)
class Behaviour:
    """How the server treats ``POST /ingest``; ``POST /control`` replaces fields by name.

    Attributes:
        latency_ms: Every request takes this long before it is answered.
        capacity: Records per second the token bucket admits; ``None``: unlimited.
        burst_s: The bucket holds ``capacity * burst_s`` records (at least one batch
            is admitted when the bucket is full, so a large batch is never starved).
        throttle_retry_after: ``Retry-After`` of a throttled answer; ``None``: the
            whole seconds until the bucket could pay for the batch (at least 1).
        fail_probability: Each request fails with ``fail_status`` with this probability.
        fail_status: The status of random failures.
        fail_retry_after: ``Retry-After`` sent with random failures, if any.
        retry_probability: Each record of a stored batch is listed under ``"retry"``
            (and not stored) with this probability.
        schedule: Request number -> `ScheduledAnswer` (JSON: ``{"3": {"status": 500}}``).
        seed: Seeds the random failures, for reproducible runs.
    """

    latency_ms: float = attrs.field(default=0, validator=_non_negative)
    capacity: float | None = attrs.field(default=None, validator=_non_negative)
    burst_s: float = attrs.field(default=0.1, validator=_non_negative)
    throttle_retry_after: str | None = None
    fail_probability: float = attrs.field(default=0.0, validator=_probability)
    fail_status: int = attrs.field(default=500, validator=_status)
    fail_retry_after: str | None = None
    retry_probability: float = attrs.field(default=0.0, validator=_probability)
    schedule: dict[int, ScheduledAnswer] = attrs.field(factory=dict, converter=_schedule)
    seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The behaviour as the JSON ``/control`` answers."""
        data = attrs.asdict(self, recurse=True)
        data["schedule"] = {str(n): answer for n, answer in data["schedule"].items()}
        return data


class _TokenBucket:
    def __init__(self, capacity: float, burst_s: float) -> None:
        self.rate = capacity
        self.size = max(1.0, capacity * burst_s)
        self.tokens = self.size
        self.updated = time.monotonic()

    def take(self, n: int) -> float:
        """0 if ``n`` records are admitted now, else the seconds until they could be."""
        now = time.monotonic()
        self.tokens = min(self.size, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= n or self.tokens >= self.size:  # a full bucket admits any batch
            self.tokens -= n
            return 0.0
        if self.rate == 0:
            return math.inf
        return (min(n, self.size) - self.tokens) / self.rate


class _Receiver:
    """The server's state; every handler runs on one event loop, so no locks."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.generation = getattr(self, "generation", 0) + 1
        self.records: list[Any] = []
        self.requests = 0
        self.batch_sizes: list[int] = []
        self.statuses: Counter[int] = Counter()
        self.configure(Behaviour())

    def configure(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.bucket = (
            _TokenBucket(behaviour.capacity, behaviour.burst_s)
            if behaviour.capacity is not None
            else None
        )
        self.rng = random.Random(behaviour.seed)

    def stats(self) -> dict[str, Any]:
        return {
            "records": len(self.records),
            "requests": self.requests,
            "batch_sizes": self.batch_sizes,
            "statuses": {str(s): n for s, n in sorted(self.statuses.items())},
        }


_TIMER_SLACK_S: Final = 0.0015
_HOLD_LIMIT_S: Final = 60.0


async def _sleep_precisely(seconds: float) -> None:
    """Wait ``seconds``, not the ~1 ms more that ``asyncio.sleep`` takes (epoll rounds up to ms).

    Sleeps coarsely until 1.5 ms before the deadline, then yields to the loop until
    it passes: other requests keep being served, and "5 ms of latency" means 5 ms.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    if seconds > _TIMER_SLACK_S:
        await asyncio.sleep(seconds - _TIMER_SLACK_S)
    while loop.time() < deadline:
        await asyncio.sleep(0)


async def _hold_until_stored(receiver: _Receiver, count: int, generation: int) -> None:
    deadline = asyncio.get_running_loop().time() + _HOLD_LIMIT_S
    while (
        len(receiver.records) < count
        and receiver.generation == generation
        and asyncio.get_running_loop().time() < deadline
    ):
        await asyncio.sleep(0.005)


def _answer(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


def _app(receiver: _Receiver) -> web.Application:
    async def ingest(request: web.Request) -> web.StreamResponse:
        number = receiver.requests
        receiver.requests += 1
        behaviour = receiver.behaviour
        scheduled = behaviour.schedule.get(number)
        latency = behaviour.latency_ms
        if scheduled is not None and scheduled.latency_ms is not None:
            latency = scheduled.latency_ms
        generation = receiver.generation
        raw = await request.read()
        if latency:
            await _sleep_precisely(latency / 1000)
        if scheduled is not None and scheduled.hold_until_stored is not None:
            await _hold_until_stored(receiver, scheduled.hold_until_stored, generation)
        if receiver.generation != generation:  # reset while it waited: store nothing
            return _answer(503, {"error": "the server was reset during this request"})
        response = _ingest(receiver, behaviour, scheduled, raw)
        receiver.statuses[response.status] += 1
        return response

    async def control(request: web.Request) -> web.StreamResponse:
        try:
            changes = json.loads(await request.read() or b"{}")
            if not isinstance(changes, dict):
                raise ValueError(f"expected a JSON object (got {changes!r:.100})")
            behaviour = attrs.evolve(receiver.behaviour, **changes)
        except (ValueError, TypeError) as error:
            return _answer(400, {"error": str(error)})
        receiver.configure(behaviour)
        return _answer(200, behaviour.to_json())

    async def records(request: web.Request) -> web.StreamResponse:
        return _answer(200, {"records": receiver.records})

    async def stats(request: web.Request) -> web.StreamResponse:
        return _answer(200, receiver.stats())

    async def reset(request: web.Request) -> web.StreamResponse:
        receiver.reset()
        return _answer(200, receiver.stats())

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/ingest", ingest)
    app.router.add_post("/control", control)
    app.router.add_get("/records", records)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    return app


def _ingest(
    receiver: _Receiver, behaviour: Behaviour, scheduled: ScheduledAnswer | None, raw: bytes
) -> web.Response:
    try:
        batch = json.loads(raw)
        records = batch["records"]
        if not isinstance(records, list):
            raise TypeError("'records' is not a list")
    except (ValueError, TypeError, KeyError) as error:
        return _answer(400, {"error": f'expected {{"records": [...]}} ({error})'})
    receiver.batch_sizes.append(len(records))
    retry: set[int] = set()
    if scheduled is not None:
        if not 200 <= scheduled.status < 300:
            headers = {"Retry-After": scheduled.retry_after} if scheduled.retry_after else None
            return _answer(scheduled.status, {"error": scheduled.message}, headers)
        retry = {i for i in scheduled.retry if 0 <= i < len(records)}
    elif receiver.bucket is not None and (wait := receiver.bucket.take(len(records))):
        after = behaviour.throttle_retry_after or str(max(1, math.ceil(min(wait, 3600.0))))
        message = {"error": f"over capacity ({behaviour.capacity} records/s)"}
        return _answer(429, message, {"Retry-After": after})
    elif behaviour.fail_probability and receiver.rng.random() < behaviour.fail_probability:
        given = behaviour.fail_retry_after
        headers = {"Retry-After": given} if given else None
        return _answer(behaviour.fail_status, {"error": "injected random failure"}, headers)
    elif behaviour.retry_probability:
        retry = {
            i for i in range(len(records)) if receiver.rng.random() < behaviour.retry_probability
        }
    if retry:
        receiver.records.extend(r for i, r in enumerate(records) if i not in retry)
    else:
        receiver.records.extend(records)
    return _answer(200, {"stored": len(records) - len(retry), "retry": sorted(retry)})


async def _serve(port: int) -> None:
    runner = web.AppRunner(_app(_Receiver()), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bound = runner.addresses[0][1]
    sys.stdout.write(f"{bound}\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    """Serve on 127.0.0.1 until SIGTERM/SIGINT; print the bound port as the first stdout line."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.servers.http_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port))


@final
class LocalServer:
    """A handle on a local server process: start it, steer it, read it, stop it by PID.

    The client side uses the standard library only; the server process needs
    aiohttp. Use `start` (or the class as a context manager after `start`).

    Attributes:
        process: The server's process.
        port: The port it listens on, on 127.0.0.1.
    """

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port

    @classmethod
    def start(cls, *, port: int = 0, timeout_s: float = 60.0) -> LocalServer:
        """Start ``python -m tests.servers.http_server`` and wait until it answers.

        Raises:
            RuntimeError: it did not print its port, or did not answer, in ``timeout_s``.
        """
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.servers.http_server", "--port", str(port)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert process.stdout is not None
        deadline = time.monotonic() + timeout_s
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        line = process.stdout.readline() if ready else b""
        process.stdout.close()
        if not line.strip().isdigit():
            cls._terminate(process)
            raise RuntimeError(
                f"the local HTTP server did not print its port within {timeout_s} s "
                f"(got {line!r}, exit code {process.poll()}); run "
                "'python -m tests.servers.http_server' to see why"
            )
        server = cls(process, int(line))
        while True:
            try:
                server.stats()
                return server
            except OSError as error:
                if time.monotonic() > deadline:
                    server.stop()
                    raise RuntimeError(
                        f"the local HTTP server on port {server.port} did not answer "
                        f"within {timeout_s} s: {error}"
                    ) from error
                time.sleep(0.05)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    @property
    def ingest_url(self) -> str:
        """Where a sink posts its batches."""
        return f"{self.base_url}/ingest"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ValueError(
                f"{method} {path} answered {error.code}: {error.read().decode(errors='replace')}"
            ) from error

    def control(self, **behaviour: Any) -> dict[str, Any]:
        """Replace the named `Behaviour` fields; returns the whole behaviour.

        Raises:
            ValueError: a field is unknown or its value invalid.
        """
        schedule = behaviour.get("schedule")
        if schedule is not None:
            behaviour["schedule"] = {
                str(n): attrs.asdict(a) if isinstance(a, ScheduledAnswer) else a
                for n, a in schedule.items()
            }
        answer: dict[str, Any] = self._call("POST", "/control", behaviour)
        return answer

    def reset(self) -> None:
        """Forget records and counters; back to the default behaviour."""
        self._call("POST", "/reset", {})

    def records(self) -> list[Any]:
        """Every stored record, in arrival order."""
        records: list[Any] = self._call("GET", "/records")["records"]
        return records

    def stats(self) -> dict[str, Any]:
        """Stored records, requests, and how many answers had each status."""
        stats: dict[str, Any] = self._call("GET", "/stats")
        return stats

    def stop(self) -> None:
        """Stop the process by its PID (SIGTERM, then SIGKILL after 10 s)."""
        self._terminate(self.process)

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(10)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    main()
