"""``load_model``: any way a user names a model -> ``ModelAttention``."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from attnkit.errors import AttnkitError
from attnkit.model.config import parse_config
from attnkit.model.presets import (pipeline_names, preset_config, preset_for_repo, preset_names,
                                   unknown_preset)
from attnkit.model.spec import ModelAttention


def load_model(source: object, *, name: str | None = None) -> ModelAttention:
    """``source``: a preset name, a config.json path, a model directory, a parsed config dict,
    or a ModelAttention (returned as is, renamed if ``name`` is given)."""
    if isinstance(source, ModelAttention):
        return source if name is None else dataclasses.replace(source, name=name)
    if isinstance(source, dict):
        return parse_config(source, name=name, source="<dict>")
    if isinstance(source, (str, os.PathLike)):
        return _load_named(os.fsdecode(source), name=name)
    raise AttnkitError(
        "AK511", f"a model must be a preset name, a path, a config dict or a ModelAttention, "
        f"not {type(source).__name__}", field="model",
        expected="str | PathLike | dict | ModelAttention", actual=type(source).__name__)


MAX_CONFIG_BYTES = 16 << 20   # real config.json files are kilobytes; a GGUF is gigabytes


def _load_named(text: str, *, name: str | None) -> ModelAttention:
    looks_like_path = "/" in text or os.sep in text or text.endswith(".json")
    if not looks_like_path and text.strip().lower() in preset_names():
        key = text.strip().lower()
        cfg = preset_config(key)
        origin = cfg.get("_source", f"preset {key}")
        return parse_config(cfg, name=name or key, source=f"preset {key} ({origin})")
    path = Path(text).expanduser()
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except (OSError, ValueError) as exc:   # a name too long for the OS, a NUL byte ...
        raise AttnkitError("AK500", f"cannot use {_shown(text)} as a path: {_os_reason(exc)}",
                           field="model", expected="an existing config.json or model directory",
                           actual=_shown(text), details={"source": _shown(text)}) from None
    if is_dir:
        config = path / "config.json"
        if not config.is_file() and (path / "model_index.json").is_file():
            raise _a_pipeline(text, source=str(path))
        if not config.is_file():
            raise AttnkitError("AK500", f"model directory {str(path)!r} has no config.json",
                               field="model", expected=str(config), actual=None,
                               details={"source": str(path)})
        return parse_config(_read_json(config), name=name or path.resolve().name, source=str(config))
    if is_file:
        default = path.resolve().parent.name if path.name == "config.json" else path.stem
        return parse_config(_read_json(path), name=name or default, source=str(path))
    if not looks_like_path and text.strip().lower() in pipeline_names():
        raise _a_pipeline(text.strip().lower(), source=f"preset {text.strip().lower()}")
    if not looks_like_path:
        raise unknown_preset(text)
    preset = preset_for_repo(text)
    if preset is not None:   # a Hub repo id we ship the config of: no download needed
        model = _load_named(preset, name=name or preset)
        note = f"{text!r} is not a local path; used preset {preset!r}, its stored config.json"
        return dataclasses.replace(model, notes=(*model.notes, note))
    hint = ""
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        hint = (" It looks like a Hugging Face repo id; attnkit does not download, so pass the "
                "local directory holding its config.json.")
    raise AttnkitError("AK500", f"model config {_shown(text)} does not exist.{hint}", field="model",
                       expected="an existing config.json or model directory", actual=_shown(text),
                       details={"source": _shown(text)})


def _a_pipeline(text: str, *, source: str) -> AttnkitError:
    """AK525: ``text`` names a pipeline (several components), not a model of one part."""
    how = (f"from attnkit.model.pipeline import load_components; from attnkit.planning.components "
           f"import plan_components; plan_components(load_components({text!r}), platform)")
    return AttnkitError(
        "AK525", f"{_shown(text)} is a pipeline of several components, not one model; plan() plans "
        f"one model. Plan every component with `attnkit plan {text} --device DEVICE`, or in Python: "
        f"{how}", field="model", expected="a model of one part", actual=_shown(text),
        solutions=[f"attnkit plan {text} --device DEVICE", how], details={"source": source})


def _read_json(path: Path) -> object:
    shown = _shown(str(path))
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise AttnkitError("AK500", f"{shown} has {size} bytes; a config.json has kilobytes (is it a "
                               "weights file?)", field="model", expected=f"<= {MAX_CONFIG_BYTES} bytes",
                               actual=size, details={"source": shown})
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AttnkitError("AK500", f"cannot read {shown}: {_os_reason(exc)}", field="model",
                           actual=shown, details={"source": shown}) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AttnkitError("AK501", f"{shown} is not valid JSON: {exc.msg} at line "
                           f"{exc.lineno} column {exc.colno}", field="model", actual=shown,
                           details={"source": shown, "line": exc.lineno}) from None
    except RecursionError:
        raise AttnkitError("AK514", f"{shown} nests arrays or objects too deeply to read (thousands of "
                           "levels); a config.json nests a few", field="model", actual=shown,
                           details={"source": shown}) from None
    except ValueError as exc:    # an integer of more digits than Python converts (4300)
        raise AttnkitError("AK514", f"{shown} holds a number too long to read: {exc}", field="model",
                           actual=shown, details={"source": shown}) from None


def _shown(text: str, limit: int = 120) -> str:
    """A path as messages show it: quoted, and cut in the middle when very long."""
    return repr(text) if len(text) <= limit else repr(text[:limit // 2] + "..." + text[-limit // 2:])


def _os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
