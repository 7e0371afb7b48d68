"""triton_mla's launch configurations have one owner (configs.py): the plan names them per role
and variant, and the backend launches what the plan names; change a tile there and both move.

The kernel launch is replaced by a spy (the tiles are what is checked, not the numerics, which
tests/triton_mla/test_absorbed.py covers), so this runs on the CPU at DeepSeek-V3's shape."""
import pytest
from factories import make_case, make_layer

from attnkit import plan
from attnkit.backends.triton_mla import backend as mla_backend
from attnkit.backends.triton_mla import configs
from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.model.spec import MLAConfig

V3 = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
TILE_KEYS = {"block_h": "BLOCK_H", "block_t": "BLOCK_T", "block_n": "BLOCK_N",
             "num_warps": "num_warps", "num_stages": "num_stages", "v_split": "V_SPLIT",
             "merge_splits": "MERGE_SPLITS"}      # the last: column_split's alone
CODE = {"whole_rows": "v1", "column_split": "v2", "column_split_tma": "tma", "ws": "ws"}


@pytest.fixture
def launched(monkeypatch):
    """Every absorbed launch's keyword arguments, in order (the kernel does not run)."""
    calls = []

    def spy(q_lat, q_pe, *args, **kw):
        calls.append(kw)
        return q_lat.new_zeros(q_lat.shape[1], q_lat.shape[0], q_lat.shape[2])
    monkeypatch.setattr(mla_backend, "absorbed_attention", spy)
    return calls


def _decode(backend):
    layer = make_layer(kind="mla", num_heads=128, mla=V3, dtype="fp16")
    case = make_case(layer, prefix_lens=[40, 7], new_lens=[1, 1], page_size=64, dtype="fp16", seed=1)
    step = backend.prepare(case.meta, case.cache)
    backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)


def _first_runnable_here(table) -> str:
    """The plan's first decode variant at this step's bucket that a CPU launch can take (ws needs
    a compiled sm_90 launch: the backend moves on to the next one the plan lists)."""
    return next(v for v in table.candidates(2, 1, 24) if v != "ws")


def test_the_backend_launches_the_tiles_the_plan_names(launched):
    p = plan("deepseek-v3", "h200", {"dtype": "fp16"})
    table = p.run.role("decode").kernels
    _decode(TritonMLABackend(**p.run.backend_options("triton_mla")))
    variant = _first_runnable_here(table)
    named = table.configs[variant]
    assert launched[0]["variant"] == CODE[variant]
    assert {TILE_KEYS[k]: launched[0][k] for k in TILE_KEYS if k in launched[0]} == \
        {k: v for k, v in named.items() if k != "num_splits"}
    assert named["num_splits"] == configs.SPLITS_AT_RUN_TIME       # the plan leaves it to run time


def test_a_tile_changed_in_configs_moves_the_plan_and_the_launch(launched, monkeypatch):
    before = plan("deepseek-v3", "h200", {"dtype": "fp16"}).run.role("decode").kernels
    variant = _first_runnable_here(before)
    monkeypatch.setattr(configs, "V1_WIDE_TILE_SM90", dict(block_n=16, num_warps=4, num_stages=2,
                                                           programs_per_sm=1))
    monkeypatch.setattr(configs, "absorbed_config_v2", lambda *a, **k: None)   # v2 takes v1's tile
    p = plan("deepseek-v3", "h200", {"dtype": "fp16"})
    after = p.run.role("decode").kernels.configs[variant]
    assert after != before.configs[variant] and after["BLOCK_N"] == 16 and after["num_stages"] == 2
    assert p.to_dict()["run"]["roles"]["decode"]["kernels"]["configs"][variant]["BLOCK_N"] == 16
    _decode(TritonMLABackend(**p.run.backend_options("triton_mla")))
    assert (launched[0]["block_n"], launched[0]["num_warps"], launched[0]["num_stages"]) == (16, 4, 2)


def test_a_forced_variant_that_cannot_run_here_runs_its_general_kernel(launched):
    """ws needs a compiled sm_90 launch; on the CPU the forced option runs v1 (whole_rows), with
    whole_rows' tile, and says so (an explicit choice is never changed silently)."""
    with pytest.warns(UserWarning, match="variant 'ws' cannot run this call.*running 'whole_rows'"):
        _decode(TritonMLABackend(variant="ws"))
    tile = configs.absorbed_tiles("whole_rows", heads=128, latent_width=512, new_tokens=1,
                                  fp32=False, smem_kb=227)
    assert launched[0]["variant"] == "v1" and launched[0]["block_n"] == tile["block_n"]


def test_overrides_apply_over_the_configured_tile(launched):
    _decode(TritonMLABackend(variant="column_split", block_n=16, num_stages=2, num_splits=3))
    kw = launched[0]
    assert (kw["variant"], kw["block_h"], kw["block_n"], kw["num_stages"], kw["num_splits"]) == \
        ("v2", 128, 16, 2, 3)


def test_mha_form_tiles_have_one_owner(monkeypatch):
    """The MHA-form kernel's tile is configs.mha_form_tiles' for the plan and for the launch."""
    seen = []
    monkeypatch.setattr(configs, "mha_form_tiles",
                        lambda **kw: seen.append(kw) or dict(block_m=16, block_n=16, num_warps=2, num_stages=1))
    p = plan("deepseek-v3", "h200", {"dtype": "fp16"})
    assert p.run.role("extend").kernels.configs["mha_form"] == \
        dict(BLOCK_M=16, BLOCK_N=16, num_warps=2, num_stages=1)
    got = {}
    monkeypatch.setattr(mla_backend, "mha_form_attention",
                        lambda q_nope, *a, **kw: got.update(kw) or q_nope.new_zeros(
                            q_nope.shape[0], q_nope.shape[1], 128))
    layer = make_layer(kind="mla", num_heads=8, mla=V3, dtype="fp16")
    case = make_case(layer, prefix_lens=[0], new_lens=[5], page_size=16, dtype="fp16", seed=2)
    backend = TritonMLABackend(mha_form_min_query=1)
    backend.forward(case.q, case.k, case.v, case.layer, case.cache, backend.prepare(case.meta, case.cache))
    assert (got["block_m"], got["block_n"], got["num_warps"], got["num_stages"]) == (16, 16, 2, 1)
    assert seen[-1]["interpret"] is True and "interpret" not in seen[0]   # the launch, the plan


@pytest.mark.gpu
def test_on_this_gpu_the_backend_tiles_are_the_plans_for_the_detected_device():
    """The plan made for the detected GPU (its shared memory from the device) names the tiles the
    backend computes there, for every absorbed variant of the decode table."""
    import torch

    from attnkit.hardware import detect
    from attnkit.hardware.presets import PRESETS
    here = detect()
    preset = next((p for p in PRESETS.values() if p.name == here.name), None)
    if preset is not None:
        assert here.shared_memory_kb == preset.shared_memory_kb      # the preset states the part's figure
    table = plan("deepseek-v3", here, {"dtype": "bf16"}).run.role("decode").kernels
    backend = TritonMLABackend(kernels={"decode": table})
    for variant, named in table.configs.items():
        if variant not in CODE or variant == "ws":
            continue
        tiles = backend.absorbed_tiles(CODE[variant], heads=128, latent_width=512, new_tokens=1,
                                       fp32=False, device=torch.device("cuda"))
        assert {TILE_KEYS[k]: tiles[k] for k in TILE_KEYS if k in tiles} == \
            {k: v for k, v in named.items() if k != "num_splits"}, variant


def test_sixteen_head_decode_column_split_tile_on_sm90():
    """column_split's tile for a decode token of <= 16 heads on a >= 200 KB part: 32 keys,
    6 stages, two programs an SM (NOTES-mla.md, version 8); whole_rows keeps version 1's."""
    kw = dict(heads=16, latent_width=512, new_tokens=1, fp32=False, smem_kb=227)
    cs = configs.absorbed_tiles("column_split", **kw)
    assert (cs["block_h"], cs["block_n"], cs["num_stages"], cs["programs_per_sm"], cs["v_split"]) == \
        (16, 32, 6, 2, 1)
    wr = configs.absorbed_tiles("whole_rows", **kw)
    assert (wr["block_n"], wr["num_stages"]) == (64, 3)
    # verify steps of 4 tokens are 64-row programs: their tile is unchanged
    assert configs.absorbed_tiles("column_split", **dict(kw, new_tokens=4))["block_n"] == 32
    assert configs.absorbed_tiles("column_split", **dict(kw, new_tokens=4))["num_stages"] == 3
    # parts with ~99 KB a block keep the small-part tile
    assert configs.absorbed_tiles("column_split", **dict(kw, smem_kb=99))["num_stages"] != 6


def test_reduce_tile():
    """The split reduce's tile: every split of a step below 33 in one round, <= 4096 fp32 a
    tile, <= 256 columns, and narrower columns where the (token, head) pairs are few, so a
    one-request step still has >= 256 programs."""
    reduce_tile = configs.reduce_tile
    assert reduce_tile(32 * 16, 512, 8) == (8, 256)          # B 32, 16 heads: 1,024 programs
    assert reduce_tile(16, 512, 231) == (32, 32)             # B 1: 256 programs, 8 rounds
    assert reduce_tile(128, 512, 60) == (32, 128)
    for rows, splits in ((1, 3), (16, 29), (512, 8), (4096, 300)):
        block_s, block_l = reduce_tile(rows, 512, splits)
        assert block_s * block_l <= 4096 and 512 % block_l == 0
        assert block_s >= min(32, splits)


@pytest.mark.parametrize("bad", [{"BLOCK_K": 32}, {"BLOCK_N": 128}, {"BLOCK_N": 48},
                                 {"AHEAD": True}, {"AHEAD": 1, "NUM_STAGES": 4},
                                 {"NUM_STAGES": 3}, {"OUT16": "yes"}, {"NUM_STAGES": True},
                                 {"BLOCK_N": 16, "NUM_STAGES": 10}])
def test_ws_config_refuses_what_the_kernel_cannot_run(bad):
    """A key that is not a knob, a tile outside 16-64 keys, Q.K ahead on a two-stage ring (it
    would wait for the stage it holds), buffers past a block's shared memory (64 x 3 stages,
    16 x 10), non-bool switches: AK407 when the backend is made, not a compile error later."""
    from attnkit.errors import AttnkitError
    with pytest.raises(AttnkitError, match="AK407"):
        TritonMLABackend(variant="ws", ws_config=bad)
    with pytest.raises(AttnkitError, match="AK407"):
        TritonMLABackend(variant="ws", ws_config=[("BLOCK_N", 32)])


def test_ws_config_forms_the_tile_the_kernel_gets():
    be = TritonMLABackend(variant="ws", ws_config=dict(BLOCK_N=32, NUM_STAGES=4, AHEAD=True))
    assert be.ws_tile == dict(configs.WS, BLOCK_N=32, NUM_STAGES=4, AHEAD=True)
    assert TritonMLABackend().ws_tile == configs.WS
    for n, stages in ((64, 2), (32, 4), (16, 8)):
        assert configs.ws_smem_bytes(n, stages) <= configs.WS_SMEM_BYTES - 1024
