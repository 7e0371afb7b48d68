"""Backend names as users type them: canonical names, deprecated aliases, typos, other engines' names.

An alias resolves with a deprecation warning; a typo gets AK300 with "did you mean"; a name
that another engine uses (SGLang, vLLM ...) but attnkit does not have gets AK301.
"""
from __future__ import annotations

import difflib
from typing import Mapping

from attnkit.errors import AttnkitError
from attnkit.registry.capabilities import BackendDeclaration

# Names other engines accept that attnkit has no backend for, with what they are.
FOREIGN_BACKENDS: dict[str, str] = {
    "flashinfer": "FlashInfer's paged kernels",
    "fa3": "FlashAttention-3 (Hopper)",
    "fa4": "FlashAttention-4 (Blackwell)",
    "flash_attn": "the flash-attn package",
    "flashattention": "the flash-attn package",
    "flashmla": "DeepSeek's FlashMLA kernels",
    "flash_mla": "DeepSeek's FlashMLA kernels",
    "trtllm_mha": "TensorRT-LLM's MHA kernels",
    "trtllm_mla": "TensorRT-LLM's MLA kernels",
    "cutlass_mla": "CUTLASS MLA kernels",
    "aiter": "AMD's AITER kernels",
    "wave": "AMD's Wave kernels",
    "intel_xpu": "Intel's XPU kernels",
    "intel_amx": "Intel's AMX CPU kernels",
    "ascend": "Huawei Ascend NPU kernels",
    "torch_flex": "PyTorch FlexAttention",
    "flex_attention": "PyTorch FlexAttention",
    "flex": "PyTorch FlexAttention",
    "xformers": "the xformers package",
    "nsa": "native sparse attention kernels",
    "hybrid_linear_attn": "hybrid linear-attention kernels",
    "double_sparsity": "double-sparsity attention",
    "flash_attn_vllm": "vLLM's flash-attn fork",
    "rocm_flash": "ROCm flash-attention",
    "pallas": "JAX Pallas kernels (TPU)",
}


def normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def resolve(name: str, registry: Mapping[str, BackendDeclaration]) -> tuple[str, str | None]:
    """(canonical name, deprecation warning or None); raises AK300 / AK301 for names attnkit lacks."""
    if name in registry:
        return name, None
    key = normalise(name)
    for decl in registry.values():
        if normalise(decl.name) == key:
            return decl.name, None
    for decl in registry.values():
        for old, note in decl.aliases.items():
            if normalise(old) == key:
                return decl.name, (f"backend name '{name}' is deprecated; use '{decl.name}'"
                                   + (f" ({note})" if note else ""))
    valid = sorted(registry)
    if key in FOREIGN_BACKENDS:
        raise AttnkitError(
            "AK301", f"attnkit has no '{name}' backend ('{name}' names {FOREIGN_BACKENDS[key]}, which "
                     f"other engines run); attnkit's backends are: {', '.join(valid) or 'none registered'}",
            field="attention_backend", actual=name, expected=valid, details={"foreign": key})
    choices = valid + [old for d in registry.values() for old in d.aliases]
    close = difflib.get_close_matches(key, choices, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    raise AttnkitError(
        "AK300", f"unknown attention backend '{name}'{hint}. Valid names: {', '.join(valid) or 'none registered'}",
        field="attention_backend", actual=name, expected=valid, details={"did_you_mean": close})
