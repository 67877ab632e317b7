import functools
import json
from typing import Any

import aiohttp

from sinkv2 import WriterInitContext
from sinkv2.asyncsink import (
    AsyncSinkBase,
    AsyncSinkWriter,
    AsyncSinkWriterConfiguration,
    ErrorVerdict,
)
from sinkv2.errors import FatalDestinationError, RetryableError, ThrottledError

Row = dict[str, Any]
encode = functools.partial(json.dumps, default=str)  # dates and decimals become strings


class WebhookWriter(AsyncSinkWriter[Row, Row]):
    def __init__(self, sink: "WebhookSink", context: WriterInitContext, states: Any) -> None:
        super().__init__(sink.element_converter, context, sink.configuration, states)
        self.url = sink.url

    async def open_client(self) -> None:  # runs on the writer's event loop
        self.session = aiohttp.ClientSession(json_serialize=encode)

    async def close_client(self) -> None:
        await self.session.close()

    async def submit_request_entries(self, request_entries: list[Row]) -> list[Row]:
        async with self.session.post(self.url, json={"records": request_entries}) as response:
            if response.status < 300:
                return []  # all landed: nothing to retry
            text, s = await response.text(), response.headers.get("Retry-After", "")
            if response.status in (429, 503):  # Retry-After s: seconds, or a date (back off)
                raise ThrottledError(text, retry_after_ms=int(s) * 1000 if s.isdigit() else None)
            if response.status >= 500:
                raise RetryableError(f"HTTP {response.status}: {text}")
            raise FatalDestinationError(f"{self.url} refused a batch: {response.status} {text}")

    def classify_error(self, error: BaseException) -> ErrorVerdict:
        if isinstance(error, aiohttp.ClientConnectionError):  # e.g. a dropped connection
            return ErrorVerdict.RETRYABLE
        return super().classify_error(error)

    def get_size_in_bytes(self, request_entry: Row) -> int:
        return len(encode(request_entry))


class WebhookSink(AsyncSinkBase[Row, Row]):
    def __init__(self, url: str, configuration: AsyncSinkWriterConfiguration | None = None) -> None:
        super().__init__(lambda row, context: row, configuration)
        self.url = url

    def restore_writer(self, context: WriterInitContext, recovered_state: Any) -> WebhookWriter:
        return WebhookWriter(self, context, recovered_state)
