"""runner.rotary: ordinary RoPE (against transformers' Qwen2 rotary) and the DCA rotation."""
import math

import pytest
import torch

from attnkit.backends.batch import Request, build_batch
from attnkit.errors import AttnkitError
from attnkit.model.spec import DualChunkConfig
from attnkit.runner.layers.rotary import (DualChunkRotary, apply_rope, dca_length_scale,
                                   step_length_scales)

TOY = DualChunkConfig(chunk_size=8, local_size=2)                 # cl = 6
QWEN = DualChunkConfig(chunk_size=262144, local_size=8192, original_max_position_embeddings=262144)


def test_apply_rope_matches_transformers_qwen2():
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding, apply_rotary_pos_emb

    cfg = Qwen2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      rope_theta=1e6, max_position_embeddings=4096)
    pos = torch.tensor([0, 1, 7, 300, 4000])
    x = torch.randn(5, 4, 16, generator=torch.Generator().manual_seed(0))
    cos, sin = Qwen2RotaryEmbedding(cfg)(x, pos[None])
    want, _ = apply_rotary_pos_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], cos, sin)
    got = apply_rope(x, pos, base=1e6)
    torch.testing.assert_close(got, want[0].transpose(0, 1), atol=2e-5, rtol=1e-5)


def test_rope_scores_depend_on_distance_only_and_tail_passes_through():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 12, generator=gen), torch.randn(1, 2, 12, generator=gen)

    def score(a, b):
        qa = apply_rope(q, torch.tensor([a]), base=100.0, rotary_dim=8)
        kb = apply_rope(k, torch.tensor([b]), base=100.0, rotary_dim=8)
        return (qa * kb).sum()

    torch.testing.assert_close(score(9, 4), score(105, 100))
    assert torch.equal(apply_rope(q, torch.tensor([5]), base=100.0, rotary_dim=8)[..., 8:], q[..., 8:])


@pytest.mark.parametrize("config,p,want", [
    (TOY, 13, dict(key=1, intra=1, successor=7, inter=8)),            # DUAL_CHUNK.md example
    (TOY, 16, dict(key=4, intra=4, successor=8, inter=8)),            # successor clamped to cs
    (QWEN, 300000, dict(key=46048, intra=46048, successor=262144, inter=262144)),  # clamped
    (QWEN, 253951 + 5000, dict(key=4999, intra=4999, successor=258951, inter=262144)),
])
def test_dca_positions(config, p, want):
    got = DualChunkRotary(config, base=1e4).positions(torch.tensor([p]))
    assert {name: int(t[0]) for name, t in got.items()} == want


def test_dca_queries_and_keys_are_rope_at_variant_positions_times_scale():
    rot = DualChunkRotary(TOY, base=500.0)
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(20, 4, 8, generator=gen), torch.randn(20, 2, 8, generator=gen)
    pos = torch.arange(20)
    s = torch.linspace(1.0, 1.3, 20)
    q3, kr = rot(q, k, pos, length_scale=s)
    assert q3.shape == (20, 3, 4, 8) and kr.shape == (20, 2, 8)
    where = rot.positions(pos)
    for i, name in enumerate(("intra", "successor", "inter")):
        torch.testing.assert_close(q3[:, i], apply_rope(q, where[name], base=500.0) * s[:, None, None])
    torch.testing.assert_close(kr, apply_rope(k, pos % 6, base=500.0) * s[:, None, None])


def test_length_scale():
    assert dca_length_scale(10, 0) == 1.0                       # scale off
    assert dca_length_scale(262144, 262144) == 1.0
    assert dca_length_scale(1000, 262144) == 1.0                # never below 1
    assert dca_length_scale(round(262144 * math.e ** 2), 262144) == pytest.approx(1.2, abs=1e-6)
    with pytest.raises(AttnkitError) as err:
        dca_length_scale(0, 4)
    assert err.value.code == "AK474"


def test_step_length_scales_per_token():
    cfg = DualChunkConfig(8, 2, original_max_position_embeddings=10)
    meta = build_batch([Request(0, 3, [0, 1, 2]), Request(20, 1, [3, 4, 5])], page_size=8)
    s = step_length_scales(meta, cfg)                           # KV lengths after the step: 3, 21
    want = [1.0] * 3 + [0.1 * math.log(21 / 10) + 1]
    torch.testing.assert_close(s, torch.tensor(want))
    s = step_length_scales(meta, cfg, lengths=[30, 21])         # whole prompt length for request 0
    torch.testing.assert_close(s[:3], torch.full((3,), 0.1 * math.log(3.0) + 1))
    with pytest.raises(AttnkitError) as err:
        step_length_scales(meta, cfg, lengths=[30])
    assert err.value.code == "AK474"


@pytest.mark.parametrize("config", [DualChunkConfig(8, 8), DualChunkConfig(4, 6),
                                    DualChunkConfig(8, 2, original_max_position_embeddings=-1)])
def test_invalid_config_is_ak473(config):
    with pytest.raises(AttnkitError) as err:
        DualChunkRotary(config, base=1e4)
    assert err.value.code == "AK473"


def test_positions_must_match_tokens():
    rot = DualChunkRotary(TOY, base=1e4)
    with pytest.raises(AttnkitError) as err:
        rot(torch.zeros(3, 2, 4), torch.zeros(3, 1, 4), torch.arange(2))
    assert err.value.code == "AK474" and err.value.field == "positions"
    with pytest.raises(AttnkitError) as err:
        rot(torch.zeros(3, 2, 4), torch.zeros(3, 1, 4), torch.arange(3), length_scale=torch.ones(2))
    assert err.value.code == "AK474"
