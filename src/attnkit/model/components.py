"""A model of several parts (a diffusers pipeline, a VLM) as components, each with its attention.

``Component`` is one part: its attention (a ``ModelAttention``, planned on its own), or why it
has none (a VAE, a scheduler, a tokenizer), or the coded error that refuses it (T5's relative
position bias, a class attnkit does not know). ``Workload`` is what one call of the component
attends over, counted from the ``Inputs`` (resolution, frames, text length) by a formula the
component states. ``SupportedSet`` restricts a component to some backends (planning reads it).
Torch-free data; model/pipeline.py builds them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from attnkit.errors import AttnkitError, preview
from attnkit.model.spec import ModelAttention

# Roles of the components attnkit knows: which attend, and which are listed but not planned.
ATTENDING_ROLES = ("denoiser", "text_encoder", "vision_tower", "language_model", "image_encoder")
PLAIN_ROLES = ("vae", "scheduler", "tokenizer", "processor", "feature_extractor", "image_processor")


@dataclass(frozen=True)
class Inputs:
    """What a pipeline is asked to make: each None means the model's own default."""
    height: int | None = None        # pixels
    width: int | None = None         # pixels
    frames: int | None = None        # video frames (video models only)
    text_tokens: int | None = None   # prompt length the text encoder is padded or cut to

    @classmethod
    def parse(cls, value: Any) -> "Inputs":
        """From an Inputs, a mapping ``{height, width, frames, text_tokens}`` or None (AK306)."""
        if value is None:
            return cls()
        if isinstance(value, Inputs):
            return value
        names = [f.name for f in fields(cls)]
        if not isinstance(value, Mapping) or set(value) - set(names):
            raise AttnkitError("AK524", f"invalid inputs: {preview(value)}; expected a mapping with keys "
                               f"{', '.join(names)}", field="inputs", expected=names, actual=preview(value))
        for key, v in value.items():
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20):
                raise AttnkitError("AK524", f"invalid {key}: {preview(v)}; expected an integer 1 .. {1 << 20}",
                                   field=key, expected=f"1 .. {1 << 20}", actual=preview(v))
        return cls(**dict(value))

    def given(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Workload:
    """One call of a component: ``tokens`` queries (and keys) in its self or joint attention,
    ``context`` keys of its cross-attention (None without one), ``sequence`` the tokens of one
    packed sequence where the layers attend within pieces (Qwen2.5-VL's windows), ``formula``
    how the numbers were counted, ``inputs`` the values used (defaults filled in)."""
    tokens: int
    formula: str
    inputs: dict[str, int] = field(default_factory=dict)
    context: int | None = None
    sequence: dict[str, int] = field(default_factory=dict)   # layer group -> tokens per sequence

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "context": self.context, "sequence": dict(self.sequence),
                "formula": self.formula, "inputs": dict(self.inputs)}


@dataclass(frozen=True)
class SupportedSet:
    """The backends a component's attention layers can run on, and why only those."""
    backends: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Component:
    """One part of a pipeline or VLM. Exactly one of ``attention`` (planned), ``plain`` (why it
    has no attention: listed, not planned) and ``error`` (refused, with its code) is set."""
    name: str                       # model_index.json key ("transformer", "text_encoder_2") or VLM part
    library: str                    # "diffusers", "transformers"
    class_name: str
    role: str
    attention: ModelAttention | None = None
    plain: str | None = None
    error: AttnkitError | None = None
    workload: Workload | None = None
    supported: SupportedSet | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "library": self.library, "class": self.class_name, "role": self.role,
                "attention": self.attention is not None or self.error is not None,
                "workload": self.workload.to_dict() if self.workload else None, "notes": list(self.notes)}


@dataclass(frozen=True)
class Pipeline:
    """A model of several components: a diffusers pipeline (``model_index.json``) or a VLM."""
    name: str
    class_name: str
    source: str
    components: tuple[Component, ...]
    inputs: Inputs = Inputs()
    notes: tuple[str, ...] = ()
