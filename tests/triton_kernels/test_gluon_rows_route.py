"""Which keys the Gluon rows variants read (tma_path.gluon_rows_route) and what runs where they
cannot: the route logic on the host with the kernel's device check stubbed to "runs here"
(the kernel itself: test_prefill_gluon_rows_gpu.py), and on this machine, where the Gluon
kernel cannot run, the variant's step running the paged kernel, right (interpreter)."""
import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton import tma_path
from attnkit.backends.triton.configs import launch_config
from attnkit.planning.profile import Shape


def _route(monkeypatch, *, prefix_lens, new_lens, ready=True, kv_dtype=None, **layer_opts):
    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **k: ready)
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16", **layer_opts)
    case = make_case(layer, prefix_lens=prefix_lens, new_lens=new_lens, page_size=8, dtype="fp16",
                     kv_dtype=kv_dtype)
    return tma_path.gluon_rows_route(case.q, case.k, case.v, layer, case.cache, case.meta)


def test_fresh_steps_read_the_step_keys_in_place(monkeypatch):
    assert _route(monkeypatch, prefix_lens=[0, 0, 0], new_lens=[5, 40, 1]) == "packed"
    assert _route(monkeypatch, prefix_lens=[0], new_lens=[33]) == "packed"


def test_a_cached_prefix_reads_the_gathered_rows(monkeypatch):
    assert _route(monkeypatch, prefix_lens=[17, 0], new_lens=[5, 40]) == "rows"


@pytest.mark.parametrize("opts", [dict(role="encoder"), dict(ready=False),
                                  dict(kv_dtype="fp8_e4m3"), dict(attention_chunk=16)],
                         ids=["non-causal", "kernel-not-here", "fp8-cache", "chunked"])
def test_what_it_does_not_serve_has_no_route(monkeypatch, opts):
    assert _route(monkeypatch, prefix_lens=[17, 0], new_lens=[5, 40], **opts) is None
    assert _route(monkeypatch, prefix_lens=[0, 0], new_lens=[5, 40], **opts) is None


def test_launch_config_names_the_tiles_and_the_grid():
    shape = Shape("mha", 32, 8, 128, 128, "bf16", "bf16")
    one = launch_config("gluon_rows", role="extend", shape=shape, dtype="bf16", platform=None)
    persistent = launch_config("gluon_rows_persistent", role="prefill", shape=shape, dtype="bf16", platform=None)
    assert one == dict(BLOCK_M=128, BLOCK_N=128, K_SLOTS=4, V_SLOTS=2, num_warps=12)
    assert persistent == one | dict(PROGRAMS_PER_SM=1)
    assert launch_config("gluon_rows", role="extend", shape=Shape("mha", 32, 8, 96, 96, "bf16", "bf16"),
                         dtype="bf16", platform=None) is None


@pytest.mark.interpreter
@pytest.mark.parametrize("variant", ["gluon_rows", "gluon_rows_persistent"])
def test_without_the_kernel_the_step_runs_paged(variant, run_triton):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[21, 0], new_lens=[19, 34], page_size=16, dtype="fp16")
    assert tma_path.gluon_rows_route(case.q, case.k, case.v, layer, case.cache, case.meta) is None
    assert_close(run_triton(case, extend_variant=variant), case.reference(), dtype="fp16", what=variant)
