"""When a sequence stops: the end-of-sequence token or max_new_tokens (stop strings are text
and are handled where the text is: the engine and the orchestrator)."""

from __future__ import annotations


def cut_tokens(tokens: list[int], generated: int, max_new_tokens: int, eos_token_ids: tuple[int, ...]) -> tuple[list[int], str | None]:
    """The part of a step's `tokens` to keep after `generated` earlier tokens, and the finish
    reason if the sequence ends with them ("stop" for EOS, "length" for max_new_tokens)."""
    tokens = tokens[: max(0, max_new_tokens - generated)]
    eos = next((i for i, t in enumerate(tokens) if t in eos_token_ids), None)
    if eos is not None:
        return tokens[: eos + 1], "stop"
    if generated + len(tokens) >= max_new_tokens:
        return tokens, "length"
    return tokens, None
