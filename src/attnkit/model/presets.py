"""Model presets: real public config.json files (their attention-relevant fields) as data.

Each ``presets/<name>.json`` keeps the Hugging Face field names and values of the repo named
in its ``"_source"`` key, so parsing a preset exercises exactly the path a downloaded
config.json takes. Keys starting with ``_`` are attnkit's own annotations.
"""
from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path

from attnkit.errors import AttnkitError

PRESET_DIR = Path(__file__).parent / "presets"
PIPELINE_DIR = PRESET_DIR / "pipelines"     # model/pipeline.py: a pipeline's files as data


def preset_names() -> list[str]:
    """Every model preset name, sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def preset_config(name: str) -> dict:
    """The stored config dict of preset ``name`` (case-insensitive); AK507 if unknown."""
    key = name.strip().lower()
    if key not in preset_names():
        raise unknown_preset(name)
    return json.loads(_preset_text(key))   # a fresh dict each call: callers may edit it


@lru_cache(maxsize=None)
def _preset_text(key: str) -> str:
    return (PRESET_DIR / f"{key}.json").read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def preset_model_types() -> frozenset[str]:
    """Every model_type a shipped preset holds (models, their sub-configs, pipeline components):
    the families attnkit ships a config of."""
    types: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("model_type"), str):
                types.add(value["model_type"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in sorted(PRESET_DIR.rglob("*.json")):
        walk(json.loads(path.read_text(encoding="utf-8")))
    return frozenset(types)


def preset_for_repo(repo_id: str) -> str | None:
    """The preset whose ``_source`` is the Hugging Face repo ``repo_id`` (case-insensitive)."""
    key = repo_id.strip().strip("/").lower()
    for name in preset_names():
        repo = str(preset_config(name).get("_source", "")).split(" ")[0]
        if repo.lower() == key:
            return name
    return None


def pipeline_names() -> list[str]:
    """Every pipeline preset name (model/pipeline.py reads them), sorted."""
    return sorted(p.stem for p in PIPELINE_DIR.glob("*.json"))


def unknown_preset(name: str) -> AttnkitError:
    names = preset_names() + pipeline_names()
    close = difflib.get_close_matches(name.strip().lower(), names, n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return AttnkitError(
        "AK507",
        f"{name!r} is not a model preset, a config.json path or a model directory.{hint} "
        f"Presets: {', '.join(names)}.",
        field="model", expected=names, actual=name,
        solutions=[f"use the preset {close[0]!r}" if close else "use one of the listed presets",
                   "pass the path of a model directory or its config.json"],
        details={"did_you_mean": close},
    )
