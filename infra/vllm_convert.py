"""``python -m infra.vllm_convert --gguf FILE --out DIR --architecture NAME``: GGUF to safetensors.

vLLM 0.32 loads no GGUF file, so each catalog model is converted once, at install
(:mod:`infra.vllm_install`), into a Hugging Face folder vLLM can serve. This module runs inside
the vLLM virtualenv (``transformers``, ``gguf``, ``accelerate``, ``torch``, ``safetensors``), not
ragstream's, so it imports nothing of ragstream: only the standard library and those packages.

Steps (shared/MODELS.md, "vLLM on these CPUs"):

1. ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`` dequantises the Q4_K_M
   weights into ``torch_dtype`` tensors (Gemma 3 270M: ~40 s on 2 cores).
2. The state dict is written with ``safetensors.torch.save_file`` as ``model.safetensors`` (the
   model refuses ``save_pretrained`` while it is marked GGUF-quantised); tied weights are stored
   once (``lm_head`` shares ``embed_tokens``).
3. The config and the tokenizer (read from the same GGUF) are saved beside it; the config's
   ``architectures`` is set to the causal-LM class (without it vLLM picks an embedding model) and
   its GGUF quantisation marker is dropped. Where the GGUF says ``tokenizer.ggml.add_bos_token``
   (Gemma), the tokenizer is made to prepend BOS, as llama.cpp does: transformers' conversion
   drops it, and Gemma prompted without ``<bos>`` degenerates.
4. ``ragstream-vllm.json`` records the source GGUF's name and sha256 and the sha256 of every
   file written (the install step compares them on a later run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

#: Name of the manifest written beside the converted model.
MANIFEST = "ragstream-vllm.json"

#: Bytes hashed at a time.
_BLOCK = 4 * 1024 * 1024


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _gguf_flag(gguf: Path, key: str) -> bool:
    """A boolean of the GGUF's metadata (``False`` when absent)."""
    from gguf import GGUFReader

    field = GGUFReader(str(gguf)).fields.get(key)
    return bool(field is not None and field.data and field.parts[field.data[0]][0])


def _prepend_bos(tokenizer: Any) -> None:
    """Make ``tokenizer`` add its BOS token to every encoded text, as llama.cpp does.

    transformers' GGUF tokenizer conversion leaves the post-processor empty, so vLLM would
    prompt Gemma without ``<bos>``; Gemma then degenerates (``"The capital of France is"`` ->
    ``" France of France of ..."`` here, against llama.cpp's sensible continuation).
    """
    from tokenizers.processors import TemplateProcessing

    bos = tokenizer.bos_token
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A",
        pair=f"{bos} $A {bos} $B",
        special_tokens=[(bos, tokenizer.bos_token_id)],
    )
    tokenizer.add_bos_token = True


def convert(gguf: Path, out: Path, architecture: str, dtype: str = "bfloat16") -> dict[str, Any]:
    """Dequantise ``gguf`` into a safetensors folder ``out`` that vLLM serves.

    Args:
        gguf: The GGUF file (catalog model, e.g. ``.local/models/gemma3-270m-q4_k_m.gguf``).
        out: The folder to write (created; files in it are replaced).
        architecture: ``architectures[0]`` of the config (``Gemma3ForCausalLM``).
        dtype: Torch dtype of the stored weights (``bfloat16``: half the bytes of float32 and
            what the server computes in).

    Returns:
        The manifest written to ``out / MANIFEST``: source name and sha256, architecture,
        dtype, seconds taken, and ``files`` (name -> sha256).
    """
    import torch
    from safetensors.torch import save_file  # type: ignore[import-not-found,unused-ignore]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:  # a tied weight (lm_head = embed_tokens): stored once
            continue
        seen.add(tensor.data_ptr())
        state[name] = tensor.detach().to(torch_dtype).contiguous()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    config.architectures = [architecture]
    config_dict = config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict["torch_dtype"] = dtype
    config_dict["dtype"] = dtype
    (out / "config.json").write_text(json.dumps(config_dict, indent=2, sort_keys=True) + "\n")
    if model.generation_config is not None:
        model.generation_config.save_pretrained(str(out))
    adds_bos = _gguf_flag(gguf, "tokenizer.ggml.add_bos_token")
    if adds_bos:
        _prepend_bos(tokenizer)
    tokenizer.save_pretrained(str(out))
    saved = AutoTokenizer.from_pretrained(str(out))
    if adds_bos and saved("a")["input_ids"][:1] != [saved.bos_token_id]:
        raise RuntimeError(f"{out}: the saved tokenizer does not add {saved.bos_token!r}")
    files = {
        p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.is_file() and p.name != MANIFEST
    }
    manifest = {
        "source": gguf.name,
        "source_sha256": sha256_file(gguf),
        "architecture": architecture,
        "dtype": dtype,
        "adds_bos": adds_bos,
        "seconds": round(time.monotonic() - started, 1),
        "files": files,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> None:
    """Entry point; prints the manifest as JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m infra.vllm_convert")
    parser.add_argument("--gguf", type=Path, required=True, help="source GGUF file")
    parser.add_argument("--out", type=Path, required=True, help="folder to write")
    parser.add_argument("--architecture", required=True, help="e.g. Gemma3ForCausalLM")
    parser.add_argument("--dtype", default="bfloat16", help="weights dtype (default bfloat16)")
    args = parser.parse_args(argv)
    print(json.dumps(convert(args.gguf, args.out, args.architecture, args.dtype), indent=2))


if __name__ == "__main__":
    main()
