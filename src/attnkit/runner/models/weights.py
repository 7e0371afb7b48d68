"""Model weights by Hugging Face name, from a directory of safetensors or an in-memory model.

    cfg, tensors = read_checkpoint("/models/tiny-llama")       # config.json + *.safetensors
    cfg, tensors = read_checkpoint(hf_model)                   # a transformers PreTrainedModel
    w = Weights(tensors, dtype=torch.float32, device="cpu")
    w.get("model.layers.0.self_attn.q_proj.weight", shape=(H_q * D, hidden))
    w.get("model.layers.0.self_attn.q_proj.weight", shape=(H_q * D, hidden), span=(0, 512))

A directory's tensors are read lazily through safetensors' ``safe_open``: a tensor when a
layer asks for it, and with ``span`` only the rows (or, with ``dim``, the slice of another
axis) asked for, through ``get_slice``: a tensor-parallel rank reads its shard, never the
whole tensor. No Hub access: a string that is not a local directory is an error (AK481).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Mapping
from typing import Any

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


def _read_directory(path: Path) -> tuple[dict, "SafetensorsFiles"]:
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
    return cfg, SafetensorsFiles(files)


class SafetensorsFiles(Mapping):
    """name -> tensor over the *.safetensors files of a checkpoint, read on access (headers
    now, data when asked). ``part`` reads a slice through ``get_slice``; ``shape`` reads the
    header only. Sharded checkpoints: every shard holds distinct names."""

    def __init__(self, files: list[Path]):
        from safetensors import safe_open

        self._where: dict[str, Any] = {}
        for f in files:
            try:
                handle = safe_open(str(f), framework="pt")
                names = list(handle.keys())
            except Exception as exc:  # noqa: BLE001 - safetensors' own error type, or OSError
                fail("AK481", f"{str(f)!r} is not a readable safetensors file ({exc})",
                     field="source", expected="a safetensors file", actual=str(f))
            self._where.update(dict.fromkeys(names, handle))

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._where[name].get_tensor(name)

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._where[name].get_slice(name).get_shape())

    def part(self, name: str, dim: int, start: int, stop: int) -> torch.Tensor:
        """Rows start..stop of axis ``dim``, read alone."""
        index = (slice(None),) * dim + (slice(start, stop),)
        return self._where[name].get_slice(name)[index].contiguous()


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
            dtype: torch.dtype | None = None, span: tuple[int, int] | None = None,
            dim: int = 0) -> torch.Tensor:
        """The tensor ``name`` in the compute dtype (or ``dtype``), on the device; AK481 if it
        is missing or its shape is not ``shape`` (the whole tensor's). span: only indices
        [start, stop) of axis ``dim`` (a tensor-parallel shard), read alone."""
        if name not in self.tensors:
            near = sorted(n for n in self.tensors if n.rsplit(".", 2)[0] == name.rsplit(".", 2)[0])
            fail("AK481", f"weight {name!r} is missing from the checkpoint"
                          + (f"; next to it: {', '.join(near[:5])}" if near else ""),
                 field=name, expected=list(shape) if shape else "a tensor", actual=None)
        source = self.tensors
        lazy = isinstance(source, SafetensorsFiles)
        full = source.shape(name) if lazy else tuple(source[name].shape)
        if shape is not None and full != tuple(shape):
            fail("AK481", f"weight {name!r} has shape {list(full)}, the config implies "
                          f"{list(shape)}", field=name, expected=list(shape), actual=list(full))
        if span is None or tuple(span) == (0, full[dim]):
            t = source[name]
        elif lazy:
            t = source.part(name, dim, *span)
        else:
            t = source[name].narrow(dim, span[0], span[1] - span[0]).contiguous()
        if not t.is_floating_point():
            # integer or bool values are packed / quantized data, not weights to cast
            fail("AK481", f"weight {name!r} holds {t.dtype} values; the runner reads floating-"
                          "point weights (a quantized checkpoint must be dequantized first)",
                 field=name, expected="a floating-point tensor", actual=str(t.dtype))
        return t.detach().to(device=self.device, dtype=dtype or self.dtype)

    def maybe(self, name: str, *, shape: tuple[int, ...] | None = None,
              span: tuple[int, int] | None = None, dim: int = 0) -> torch.Tensor | None:
        return self.get(name, shape=shape, span=span, dim=dim) if self.has(name) else None
