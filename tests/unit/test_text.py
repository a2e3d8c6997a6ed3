"""The torch-free codec against transformers' tokenizer (the oracle) on the real SmolLM2."""

import subprocess
import sys

import pytest

from specmesh.text import IncrementalDecoder, TextCodec, find_stop

MESSAGES = ["Hi!", "Ça va? naïve café 😀 漢字テスト", "  leading spaces\n\nand newlines\t", "def f(x):\n    return x"]


@pytest.fixture(scope="module")
def codecs(default_model_dir):
    from transformers import AutoTokenizer

    return TextCodec.from_dir(default_model_dir), AutoTokenizer.from_pretrained(default_model_dir)


@pytest.mark.parametrize("message", MESSAGES)
def test_encode_decode_and_chat_prompt_match_transformers(codecs, message):
    ours, theirs = codecs
    assert ours.encode(message) == theirs.encode(message, add_special_tokens=False)
    ids = ours.encode(message)
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    chat = theirs.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True, tokenize=False)
    assert ours.chat_prompt(message) == theirs.encode(chat, add_special_tokens=False)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_incremental_deltas_add_up_to_the_whole_text(codecs, size):
    codec, _ = codecs
    ids = codec.encode(" ".join(MESSAGES))
    decoder = IncrementalDecoder(codec)
    deltas = [decoder.push(ids[i : i + size]) for i in range(0, len(ids), size)] + [decoder.flush()]
    assert "".join(deltas) == codec.decode(ids)
    assert not any("\ufffd" in d for d in deltas)  # a split character is held back, never streamed


def test_incremental_decoding_decodes_a_window_not_the_whole_text(codecs):
    """A long reply token by token: the deltas still add up, and no push decodes more than a
    few tokens (decoding the whole list each time is quadratic in the reply's length)."""
    codec, _ = codecs
    ids = codec.encode(" ".join(MESSAGES * 40))
    decoded: list[int] = []

    class Counting(TextCodec):
        def decode(self, ids, skip_special_tokens=True):
            decoded.append(len(ids))
            return super().decode(ids, skip_special_tokens)

    counting = Counting(codec.tokenizer, codec.chat_template, codec.special_tokens)
    decoder = IncrementalDecoder(counting)
    deltas = [decoder.push([token]) for token in ids] + [decoder.flush()]
    assert "".join(deltas) == codec.decode(ids)
    assert len(ids) > 500 and max(decoded) <= 8


def test_find_stop():
    assert find_stop("abc\n\nUser: hi", ["User:", "\n\n"]) == 3
    assert find_stop("nothing here", ["STOP"]) is None


def test_text_and_client_import_no_torch():
    code = "import sys, specmesh.text, specmesh.client; print('torch' in sys.modules or 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
