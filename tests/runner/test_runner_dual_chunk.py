"""Qwen2 with dual_chunk_attention_config through the dual_chunk backend.

transformers ignores the DCA config (plain RoPE), so it is the reference only while a
sequence fits one chunk_size (16 here; chunk length cl = 12, so lengths 13..16 already use
the successor variant). Past that, the runner is checked against itself: pieces vs one go,
decode vs prefill.
"""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import Engine
from runner_helpers import close

SHORT = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64, 2, 90, 91], [4, 6, 8], list(range(30, 43))]
LONG = [list(range(2, 40)), [7] * 5 + list(range(60, 90))]     # 38 and 35 tokens: 3+ chunks


@pytest.fixture(scope="module")
def dca(tiny_model):
    return tiny_model("qwen2_dca")


def test_within_chunk_size_equals_transformers(dca, hf_logits):
    path, hf = dca
    engine = Engine.from_pretrained(path, backend="dual_chunk", page_size=4)
    assert all(b.attn.spec.dual_chunk is not None for b in engine.model.blocks)
    for prompt, logits in zip(SHORT, engine.prefill([p[:-1] for p in SHORT])):
        close(logits, hf_logits(hf, prompt[:-1]))
    for row, prompt in zip(engine.decode([p[-1] for p in SHORT]), SHORT):
        close(row, hf_logits(hf, prompt)[-1])


def test_past_chunk_size_differs_from_plain_rope(dca, hf_logits):
    path, hf = dca
    logits = Engine.from_pretrained(path, backend="dual_chunk", page_size=4).prefill(LONG[:1])[0]
    ref = hf_logits(hf, LONG[0])
    close(logits[:16], ref[:16])
    assert (logits[16:] - ref[16:]).abs().max() > 1e-2


def test_pieces_and_decode_equal_one_go_past_chunk_size(dca):
    path, _ = dca
    whole = Engine.from_pretrained(path, backend="dual_chunk", page_size=4).prefill(LONG)
    engine = Engine.from_pretrained(path, backend="dual_chunk", page_size=6)
    parts = [[], []]
    for start, stop in ((0, 7), (7, 20), (20, 33)):
        for i, out in enumerate(engine.prefill([p[start:stop] for p in LONG], ids=[0, 1])):
            parts[i].append(out)
    for k in range(33, 35):
        for i, row in enumerate(engine.decode([p[k] for p in LONG], ids=[0, 1])):
            parts[i].append(row[None])
    for full, got in zip(whole, parts):
        torch.testing.assert_close(torch.cat(got), full[:35], rtol=1e-5, atol=1e-5)


def test_other_backends_refuse_dca_unless_turned_off(dca, hf_logits):
    path, hf = dca
    with pytest.raises(AttnkitError) as info:
        Engine.from_pretrained(path, backend="torch_native")
    assert info.value.code == "AK302"                        # the planner's DCA conflict
    assert Engine.from_pretrained(path).backend.name == "dual_chunk"       # chosen by the plan
    with pytest.warns(UserWarning, match="dual chunk attention is off"):
        plain = Engine.from_pretrained(path, backend="sdpa", dual_chunk=False)
    close(plain.prefill(LONG[:1])[0], hf_logits(hf, LONG[0]))


def test_length_scale_of_the_whole_prompt_in_pieces(dca, tmp_path):
    """With original_max_position_embeddings 8 the length scale grows past 8 tokens; pieces
    given the whole prompt length scale like one go, pieces without it do not."""
    import json
    import shutil

    path, _ = dca
    cfg = json.loads((path / "config.json").read_text())
    cfg["dual_chunk_attention_config"]["original_max_position_embeddings"] = 8
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shutil.copy(path / "model.safetensors", tmp_path / "model.safetensors")
    prompt = LONG[0]
    whole = Engine.from_pretrained(tmp_path, page_size=4).prefill([prompt])[0]

    def in_pieces(**kwargs):
        engine = Engine.from_pretrained(tmp_path, page_size=4)
        return torch.cat([engine.prefill([prompt[a:b]], ids=["p"], **kwargs)[0]
                          for a, b in ((0, 10), (10, 25), (25, len(prompt)))])

    torch.testing.assert_close(in_pieces(prompt_lens=[len(prompt)]), whole, rtol=1e-5, atol=1e-5)
    assert (in_pieces() - whole).abs().max() > 1e-3
