"""OpenAI response objects for one request: the whole completion, or the chunks of its stream.

Glossary:
- chat reply: `chat.completion` (text in choices[0].message) or, streamed,
  `chat.completion.chunk` (text in choices[0].delta); completion reply: `text_completion`
  (text in choices[0].text), the same object whole or streamed.
- id: "chatcmpl-<request id>" / "cmpl-<request id>"; the request id is the orchestrator's, so
  the gRPC API's GetRequest and Cancel work on it too.
- usage: prompt_tokens, completion_tokens, total_tokens; in a stream, a last chunk with no
  choices carries it when the client asked for it (stream_options.include_usage).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from orchestrator.driver import Chunk


@dataclass(frozen=True)
class Reply:
    chat: bool
    request_id: str
    model: str
    include_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return f"{'chatcmpl' if self.chat else 'cmpl'}-{self.request_id}"

    def complete(self, chunks: list[Chunk]) -> dict:
        """The whole completion: every chunk of the request, the last one with its finish reason and stats."""
        text, last = "".join(c.text for c in chunks), chunks[-1]
        content = {"message": {"role": "assistant", "content": text}} if self.chat else {"text": text}
        choice = {"index": 0, **content, "logprobs": None, "finish_reason": last.finish_reason}
        return self._object("chat.completion" if self.chat else "text_completion", [choice], usage=usage(last.stats))

    def opening(self) -> list[dict]:
        """What a stream starts with: the assistant's role, for chat."""
        return [self._chunk({"role": "assistant", "content": ""}, None)] if self.chat else []

    def events(self, chunk: Chunk) -> list[dict]:
        """The stream chunks for one driver chunk (none when it adds no text and does not finish)."""
        events = []
        if chunk.text or chunk.finish_reason:
            events.append(self._chunk({"content": chunk.text} if chunk.text else {}, chunk.finish_reason or None))
        if chunk.finish_reason and self.include_usage:
            events.append(self._stream_object([], usage=usage(chunk.stats)))
        return events

    def _chunk(self, delta: dict, finish_reason: str | None) -> dict:
        content = {"delta": delta} if self.chat else {"text": delta.get("content", "")}
        choice = {"index": 0, **content, "logprobs": None, "finish_reason": finish_reason}
        return self._stream_object([choice], **({"usage": None} if self.include_usage else {}))

    def _stream_object(self, choices: list[dict], **extra) -> dict:
        return self._object("chat.completion.chunk" if self.chat else "text_completion", choices, **extra)

    def _object(self, kind: str, choices: list[dict], **extra) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices, **extra}


def usage(stats: dict) -> dict:
    prompt, completion = stats["prompt_tokens"], stats["generated_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
