"""``attn_implementation="attnkit"``: attnkit's backends inside transformers models.

    from attnkit.integrations.transformers import register; register()
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="attnkit")

``register(**flags)`` adds "attnkit" to transformers' ``AttentionInterface`` (the attention
function, ``attention_forward``) and ``AttentionMaskInterface`` (the mask it is handed:
transformers' boolean SDPA mask), and wraps ``PreTrainedModel.get_correct_attn_implementation``,
the method transformers calls to check a requested implementation while it builds a model
(and in ``set_attn_implementation``). So building a model with "attnkit" plans it there and
then: ``attnkit.plan`` for the model's config, dtype and device, with the flags (or the
``ATTNKIT_*`` environment) ``attnkit plan`` takes; a model nothing can serve raises the
planner's AttnkitError from ``from_pretrained``. Nothing falls back to another implementation.

While transformers builds a model its weights are not placed yet, so that plan is for the
device the model will most likely run on: the default torch device, else the current CUDA
device when there is one, else the CPU. A call on another device or in another dtype plans
for it on that first call (same flags; an error is raised there). ``attnkit_plan(model)`` is
the plan in use, ``explain(model)`` its text (as ``attnkit plan`` prints it), and
``plan_for_model(model, **flags)`` re-plans one model with other flags.

Each call runs the planned backend on the dense inputs transformers passes
(integrations/dense_step.py); every layer's softcap, sinks (``s_aux``), window and scaling
are taken from the call, and must be ones the plan was made for (integrations/hf_call.py;
AK491 otherwise, as for call arguments attnkit cannot apply, such as ``position_bias``).
"""
from __future__ import annotations

import functools
import inspect
from types import SimpleNamespace
from typing import Any

from attnkit.hardware import require_package

require_package("torch", "attnkit.integrations.transformers")     # AK212, not ModuleNotFoundError
require_package("transformers", "attnkit.integrations.transformers")

import torch  # noqa: E402 - after the check above

from attnkit.errors import fail
from attnkit.integrations import hf_plan
from attnkit.integrations.hf_call import call_layer, check_dense
from attnkit.planning.plan import Plan

NAME = "attnkit"
MIN_VERSION = "4.55"        # oldest transformers tested (docs/integrations.md)
_HOOK_MARK = "_attnkit_plans_models"
_mask_options: dict[str, Any] = {}


def register(**flags: Any) -> str:
    """Make ``attn_implementation="attnkit"`` available; returns the name.

    flags (all optional, as on ``attnkit plan``): attention_backend, prefill_attention_backend,
    decode_attention_backend, page_size, kv_cache_dtype, deny, backend_options (keyword options
    for the backend objects). They apply to every model planned from now on; the environment
    (ATTNKIT_ATTENTION_BACKEND, ATTNKIT_DENY_BACKENDS) is read at each plan, as by the CLI.
    """
    flags = hf_plan.check_flags(flags)
    tf = _transformers()
    hf_plan.DEFAULT_FLAGS.clear()
    hf_plan.DEFAULT_FLAGS.update(flags)
    tf.AttentionInterface.register(NAME, attention_forward)
    tf.AttentionMaskInterface.register(NAME, attention_mask)
    if "allow_torch_fix" in inspect.signature(tf.sdpa_mask).parameters:
        _mask_options["allow_torch_fix"] = False      # keep padding rows fully masked
    _install_build_hook(tf.PreTrainedModel)
    return NAME


def plan_for_model(model: Any, *, device: torch.device | str | None = None,
                   dtype: torch.dtype | str | None = None, **flags: Any) -> Plan:
    """Plan ``model`` (a transformers model, or its config) again with ``flags`` over the
    registered ones (None unsets one), for ``device`` / ``dtype`` (default: the model's).
    Raises the planner's AttnkitError and keeps the old plans if nothing can serve it."""
    flags = hf_plan.check_flags({**hf_plan.DEFAULT_FLAGS, **flags})
    config, dev, dt = _target(model, device, dtype)
    state = hf_plan.ModelState(flags)
    planned = state.planned(config, dev, dt)
    hf_plan.install(config, state)
    return planned.plan


def attnkit_plan(model: Any) -> Plan:
    """The Plan ``model`` (or its config) runs with: the one of its last call, else the one
    made when it was built, else one made now for its device and dtype."""
    config, dev, dt = _target(model, None, None)
    state = hf_plan.state_of(config)
    return (state.current or state.planned(config, dev, dt)).plan


def explain(model: Any) -> str:
    """``attnkit_plan(model)`` as text: backends and why, settings, rejected candidates."""
    from attnkit.planning.render import plan_text

    return plan_text(attnkit_plan(model))


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: torch.Tensor | None, *,
                      dropout: float = 0.0, scaling: float | None = None,
                      sliding_window: int | None = None, softcap: float | None = None,
                      s_aux: torch.Tensor | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The function transformers calls per attention layer.

    query: [B, H, Lq, D]; key: [B, H_kv, Lk, D]; value: [B, H_kv, Lk, D_v] (Lk includes the
    cached keys); attention_mask: [B or 1, 1, Lq, Lk] bool (True = attend) or additive float,
    or None; s_aux: [H] sink logits or None. Returns ([B, Lq, H, D_v] contiguous, None): no
    attention weights (a warning when output_attentions asks for them).
    """
    config = getattr(module, "config", None)
    if not callable(getattr(config, "to_dict", None)):
        fail("AK491", f"attention_forward is the attention function transformers calls with one "
                      f"of a model's attention modules; {type(module).__name__} has no "
                      "transformers config", field="module", expected="an attention module "
                      "of a transformers model", actual=type(module).__name__)
    check_dense(getattr(module, "layer_idx", "?"), query, key, value)   # before planning on them
    state = hf_plan.state_of(config)
    planned = state.planned(config, query.device, query.dtype)
    layer = call_layer(module, planned, query, key, value, dropout=dropout, scaling=scaling,
                       sliding_window=sliding_window, softcap=softcap, s_aux=s_aux, kwargs=kwargs)
    layout = state.layout(attention_mask, batch=query.shape[0], q_len=query.shape[2],
                          kv_len=key.shape[2], window=layer.spec.sliding_window, planned=planned,
                          device=query.device)
    out = layout.run(planned.backend, layer, query, key, value, kv_dtype=planned.kv_dtype)
    return out, None


def attention_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """The mask "attnkit" layers get: transformers' SDPA mask, [B, 1, Lq, Lk] bool, or None
    when it is plain causal without padding (transformers decides; see dense_step.py)."""
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **kwargs, **_mask_options)


def _target(model: Any, device, dtype) -> tuple[Any, torch.device, torch.dtype]:
    """(config, device, dtype) for planning ``model``: a model's own parameters where it has
    some, else the defaults ``_build_target`` uses."""
    config = getattr(model, "config", model)
    if not callable(getattr(config, "to_dict", None)):
        fail("AK306", f"expected a transformers model or config, got {type(model).__name__}",
             field="model", expected="PreTrainedModel or PretrainedConfig",
             actual=type(model).__name__)
    dev, dt = _build_target(model if isinstance(model, torch.nn.Module) else None)
    return config, dev if device is None else _device(device), dt if dtype is None else _dtype(dtype)


def _device(device: Any) -> torch.device:
    """A device to plan for: one this torch can run on (AK306 otherwise)."""
    from attnkit.errors import AttnkitError
    from attnkit.runner.engine.checks import device_of

    try:
        return device_of(device)   # unknown names, meta, CUDA without CUDA, index past count
    except AttnkitError as exc:
        fail("AK306", exc.message, field="device", expected=exc.expected, actual=exc.actual)


def _dtype(dtype: Any) -> torch.dtype:
    """A compute dtype: a torch dtype, or attnkit's name for one (fp32, fp16, bf16)."""
    from attnkit.kvcache.paged import TORCH_KV_DTYPES
    from attnkit.registry.capabilities import DTYPES

    if isinstance(dtype, torch.dtype):
        return dtype                        # hf_plan refuses those attnkit does not compute in
    if isinstance(dtype, str) and dtype in DTYPES:
        return TORCH_KV_DTYPES[dtype]
    fail("AK306", f"dtype must be a torch dtype or one of {', '.join(DTYPES)}, got "
                  f"{dtype!r}", field="dtype", expected=["torch.dtype", *DTYPES],
         actual=repr(dtype))


def _build_target(model: torch.nn.Module | None) -> tuple[torch.device, torch.dtype]:
    """Where a model being built will run: its weights' device and dtype once it has them;
    before that the default device (unless meta), else the current CUDA device, else CPU,
    in the default dtype (transformers sets it to the load dtype while building)."""
    param = next((p for p in model.parameters() if p.is_floating_point()), None) if model else None
    if param is not None and param.device.type != "meta":
        return param.device, param.dtype
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else torch.device("cpu")
    if device.type == "meta":
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return device, param.dtype if param is not None else torch.get_default_dtype()


def _plan_built(model: torch.nn.Module) -> None:
    """Plan a model built or switched to "attnkit" with the registered flags. The state is
    kept when it already has those flags (a CausalLM and its inner model share one config),
    and a new one replaces it only once it has planned."""
    config = model.config
    device, dtype = _build_target(model)
    state = hf_plan.state_of(config, create=False)
    if state is not None and state.flags == hf_plan.DEFAULT_FLAGS:
        state.planned(config, device, dtype)
        return
    fresh = hf_plan.ModelState(hf_plan.DEFAULT_FLAGS)
    fresh.planned(config, device, dtype)
    hf_plan.install(config, fresh)


def _install_build_hook(model_cls) -> None:
    """Plan each model built (or switched) to "attnkit", where transformers checks it."""
    current = model_cls.get_correct_attn_implementation
    if getattr(current, _HOOK_MARK, False):
        return

    @functools.wraps(current)
    def get_correct_attn_implementation(self, requested_attention, *args, **kwargs):
        chosen = current(self, requested_attention, *args, **kwargs)
        if chosen == NAME:
            _plan_built(self)
        return chosen

    setattr(get_correct_attn_implementation, _HOOK_MARK, True)
    model_cls.get_correct_attn_implementation = get_correct_attn_implementation


def _transformers() -> SimpleNamespace:
    """The transformers pieces the integration uses (imported here, version-checked: AK492)."""
    try:
        import transformers
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
        from transformers.modeling_utils import AttentionInterface, PreTrainedModel
    except ImportError as exc:
        fail("AK492", f"transformers >= {MIN_VERSION} is needed for attn_implementation="
                      f"'attnkit' ({exc})", field="transformers", expected=f">= {MIN_VERSION}",
             actual=None)
    from packaging.version import Version

    version = transformers.__version__
    if Version(version) < Version(MIN_VERSION) or not hasattr(
            PreTrainedModel, "get_correct_attn_implementation"):
        fail("AK492", f"transformers {version} is older than {MIN_VERSION}, the oldest the "
                      "attnkit integration supports", field="transformers",
             expected=f">= {MIN_VERSION}", actual=version)
    return SimpleNamespace(AttentionInterface=AttentionInterface, PreTrainedModel=PreTrainedModel,
                           AttentionMaskInterface=AttentionMaskInterface, sdpa_mask=sdpa_mask)


__all__ = ["NAME", "register", "plan_for_model", "attnkit_plan", "explain", "attention_forward",
           "attention_mask"]
