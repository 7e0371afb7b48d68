"""Model weights by Hugging Face name, from a directory of safetensors or an in-memory model.

    cfg, tensors = read_checkpoint("/models/tiny-llama")       # config.json + *.safetensors
    cfg, tensors = read_checkpoint(hf_model)                   # a transformers PreTrainedModel
    w = Weights(tensors, dtype=torch.float32, device="cpu")
    w.get("model.layers.0.self_attn.q_proj.weight", shape=(H_q * D, hidden))

No Hub access: a string that is not a local directory is an error (AK481).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import torch

from attnkit.errors import fail


def read_checkpoint(source: Any) -> tuple[dict, Mapping[str, torch.Tensor]]:
    """(parsed config.json, name -> tensor) of a model directory or a transformers model."""
    if isinstance(source, (str, os.PathLike)):
        return _read_directory(Path(source).expanduser())
    config = getattr(source, "config", None)
    if config is not None and hasattr(config, "to_dict") and hasattr(source, "state_dict"):
        return config.to_dict(), source.state_dict()
    fail("AK481", f"a model source must be a local model directory or a transformers model, "
                  f"not {type(source).__name__}", field="source",
         expected="path | PreTrainedModel", actual=type(source).__name__)


def _read_directory(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    config = path / "config.json"
    if not path.is_dir() or not config.is_file():
        fail("AK481", f"{str(path)!r} is not a local model directory with a config.json "
                      "(the runner never downloads)", field="source",
             expected="a directory holding config.json and *.safetensors", actual=str(path))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        fail("AK481", f"{str(path)!r} holds no *.safetensors weights (the runner reads only "
                      "safetensors; re-save with save_pretrained(..., safe_serialization=True))",
             field="source", expected="*.safetensors", actual=sorted(p.name for p in path.iterdir()))
    cfg = read_json(config)
    tensors: dict[str, torch.Tensor] = {}
    for f in files:                  # sharded checkpoints: every shard holds distinct names
        try:
            tensors.update(load_file(str(f)))
        except Exception as exc:     # noqa: BLE001 - safetensors' own error type, or OSError
            fail("AK481", f"{str(f)!r} is not a readable safetensors file ({exc})",
                 field="source", expected="a safetensors file", actual=str(f))
    return cfg, tensors


def read_json(path: Path) -> dict:
    """A checkpoint's JSON file (config.json, generation_config.json) as a dict, else AK481."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        fail("AK481", f"{str(path)!r} is not readable JSON ({exc})", field="source",
             expected="a JSON object", actual=str(path))
    if not isinstance(data, dict):
        fail("AK481", f"{str(path)!r} holds a JSON {type(data).__name__}, not an object",
             field="source", expected="a JSON object", actual=type(data).__name__)
    return data


class Weights:
    """Named tensors cast to the compute dtype and device on first use."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], *, dtype: torch.dtype,
                 device: torch.device | str):
        self.tensors = tensors
        self.dtype = dtype
        self.device = torch.device(device)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str, *, shape: tuple[int, ...] | None = None,
            dtype: torch.dtype | None = None) -> torch.Tensor:
        """The tensor ``name`` in the compute dtype (or ``dtype``), on the device; AK481 if it
        is missing or its shape is not ``shape``."""
        if name not in self.tensors:
            near = sorted(n for n in self.tensors if n.rsplit(".", 2)[0] == name.rsplit(".", 2)[0])
            fail("AK481", f"weight {name!r} is missing from the checkpoint"
                          + (f"; next to it: {', '.join(near[:5])}" if near else ""),
                 field=name, expected=list(shape) if shape else "a tensor", actual=None)
        t = self.tensors[name]
        if shape is not None and tuple(t.shape) != tuple(shape):
            fail("AK481", f"weight {name!r} has shape {list(t.shape)}, the config implies "
                          f"{list(shape)}", field=name, expected=list(shape), actual=list(t.shape))
        if not t.is_floating_point():
            # integer or bool values are packed / quantized data, not weights to cast
            fail("AK481", f"weight {name!r} holds {t.dtype} values; the runner reads floating-"
                          "point weights (a quantized checkpoint must be dequantized first)",
                 field=name, expected="a floating-point tensor", actual=str(t.dtype))
        return t.detach().to(device=self.device, dtype=dtype or self.dtype)

    def maybe(self, name: str, *, shape: tuple[int, ...] | None = None) -> torch.Tensor | None:
        return self.get(name, shape=shape) if self.has(name) else None
