"""Text <-> tokens without torch or transformers (the orchestrator and the client use it).

Glossary:
- codec: the model's tokenizer (`tokenizer.json`, via the `tokenizers` library) and its chat
  template (`chat_template.jinja`, rendered with jinja2 the way transformers renders it).
- incremental decoding: streaming text as tokens arrive. A token can end in the middle of a
  UTF-8 character; such text (ending in U+FFFD) is held back until the next token completes it,
  so the deltas always concatenate to the decoding of all tokens.
- stop string: generation ends where the text first contains one; it is not part of the output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

REPLACEMENT = "\ufffd"


def _raise(message: str):
    raise ValueError(message)


@dataclass(frozen=True)
class TextCodec:
    tokenizer: Tokenizer
    chat_template: str
    special_tokens: dict[str, str]  # bos_token, eos_token, ... as in tokenizer_config.json

    @classmethod
    def from_dir(cls, path: str | Path) -> "TextCodec":
        path = Path(path)
        config_file = path / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.exists() else {}
        template_file = path / "chat_template.jinja"
        template = template_file.read_text() if template_file.exists() else config.get("chat_template", "")
        specials = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}
        return cls(Tokenizer.from_file(str(path / "tokenizer.json")), template, specials)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ValueError("this model has no chat template")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        template = env.from_string(self.chat_template)
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.special_tokens)

    def chat_token_ids(self, messages: list[dict]) -> list[int]:
        """The conversation (role + content messages) in the chat template, ready for the assistant's turn."""
        return self.encode(self.render_chat(messages))

    def chat_prompt(self, user_message: str) -> list[int]:
        """The user message in the chat template, ready for the assistant's turn."""
        return self.chat_token_ids([{"role": "user", "content": user_message}])


class IncrementalDecoder:
    """Text deltas for a growing token list. Each push decodes a window, not the whole list: the
    tokens already returned since the window's start (their text, the context the new tokens
    decode in) and the new ones; the delta is what the new ones add. So a push costs the same
    at the 10th token and the 10,000th (decoding everything each time made a request's
    detokenization quadratic in its length). Tokens whose bytes end inside a character wait for
    the next push."""

    def __init__(self, codec: TextCodec):
        self.codec = codec
        self.ids: list[int] = []
        self.start = 0  # where the window begins
        self.read = 0  # the tokens before this one have been returned as text

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        return self._delta(final=False)

    def flush(self) -> str:
        return self._delta(final=True)

    def _delta(self, final: bool) -> str:
        seen = self.codec.decode(self.ids[self.start : self.read])
        text = self.codec.decode(self.ids[self.start :])
        if len(text) <= len(seen) or (text.endswith(REPLACEMENT) and not final):  # an incomplete character
            return ""
        self.start, self.read = self.read, len(self.ids)
        return text[len(_common_prefix(text, seen)) :]  # (a token that changed earlier text: resend from there)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def find_stop(text: str, stops: tuple[str, ...] | list[str]) -> int | None:
    """Where the first stop string begins in `text`, or None."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None
