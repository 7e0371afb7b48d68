"""One request's NaN never reaches another: a prompt whose K/V are NaN (a poisoned embedding
row) leaves NaN in pages that are freed and handed out again, or padded over; a later,
independent ``generate`` on the same ``LLM`` must still equal transformers' greedy output.
(Issue 13: sdpa padded ragged batches by reading page 0, so one NaN prompt turned every later
batch's logits into NaN and greedy emitted token 0 forever.)"""
import shutil

import pytest

from attnkit.runner import LLM
from runner_helpers import hf_greedy

POISON = 127                      # the token whose embedding row is NaN in the copy
PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22], [4, 6], [3, 3, 3, 3, 3, 9, 17]]


def _poisoned_copy(path, tmp_path):
    from safetensors.torch import load_file, save_file

    out = tmp_path / "poisoned"
    shutil.copytree(path, out)
    for f in out.glob("*.safetensors"):
        tensors = load_file(f)
        for name, t in tensors.items():
            if name.endswith("embed_tokens.weight"):
                t[POISON] = float("nan")
        save_file(tensors, f, metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("backend", ["sdpa", "torch_native"])
def test_a_nan_prompt_does_not_poison_later_batches(tiny_model, tmp_path, backend):
    path, hf = tiny_model("llama")
    model = LLM(_poisoned_copy(path, tmp_path), device="cpu", attention_backend=backend, page_size=4)
    bad = model.generate([[POISON, 3, 5, 7, 2]], max_new_tokens=6, ignore_eos=True)[0]
    assert bad.token_ids                                        # it ran (on NaN logits)
    free = model.engine.allocator
    assert free.num_free == free.num_pages                      # its pages went back, NaN inside
    outs = model.generate(PROMPTS, max_new_tokens=6, ignore_eos=True)
    assert [o.token_ids for o in outs] == [hf_greedy(hf, p, 6) for p in PROMPTS]
    # the poisoned prompt beside healthy ones in one batch: theirs are unaffected too
    mixed = model.generate([PROMPTS[0], [POISON, 1, 2], PROMPTS[1]], max_new_tokens=4, ignore_eos=True)
    assert [mixed[0].token_ids, mixed[2].token_ids] == [hf_greedy(hf, p, 4) for p in PROMPTS[:2]]
