"""One Anthropic message being generated -> its SSE events or its whole message object: the Messages face's
:class:`~edgeopt.server.generation.respond.ReplyFormat` (the builder says what each event holds)."""

from __future__ import annotations

from typing import Any

from edgeopt.engine.api import RequestOutput
from edgeopt.server.anthropic.errors import anthropic_error_body
from edgeopt.server.anthropic.output import MessageBuilder, sse_event
from edgeopt.server.chat.reply import ReplyParser
from edgeopt.server.generation.respond import SSE_MEDIA_TYPE


class MessageReply:
    media_type = SSE_MEDIA_TYPE

    def __init__(self, builder: MessageBuilder, parser: ReplyParser) -> None:
        self._builder = builder
        self._parser = parser
        self._started = False

    def opening(self) -> bytes:
        return b""  # message_start waits for the first output: it reports the prompt tokens the cache served

    def frames(self, out: RequestOutput) -> bytes:
        events = []
        if not self._started:
            self._started = True
            events += self._builder.start(out)
        events += self._builder.step(self._parser.step(out.text, out.finished))
        if out.finished:
            events += self._builder.finish(out)
        return b"".join(sse_event(event) for event in events)

    def closing(self) -> bytes:
        return b""

    def failed(self, message: str) -> bytes:
        return sse_event(("error", anthropic_error_body(500, message)))

    def whole(self, last: RequestOutput) -> dict[str, Any]:
        self._builder.step(self._parser.step(last.text, finished=True))
        return self._builder.message(last)
