"""attn_implementation="attnkit" on CUDA: the plan made at load is for the GPU (triton for
head_dim 64), and logits / greedy generation match "eager" on the same GPU."""
import pytest
import torch

from attnkit.integrations.transformers import attnkit_plan
from hf_tiny import build_config, close, dtype_kw

pytestmark = pytest.mark.gpu
WIDE = dict(hidden_size=256, intermediate_size=256)          # head_dim 64: triton serves it


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    import transformers

    def make(family):
        extra = {"head_dim": 64} if family == "gpt_oss" else {}
        torch.manual_seed(1)
        model = transformers.AutoModelForCausalLM.from_config(build_config(family, **WIDE, **extra))
        path = tmp_path_factory.mktemp(family)
        model.save_pretrained(path)
        return path

    return make


@pytest.mark.parametrize("family", ["llama", "gpt_oss"])
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 5e-3), (torch.bfloat16, 5e-2)])
def test_cuda_matches_eager(wide, attnkit_tf, family, dtype, rtol):
    import transformers

    path = wide(family)
    attnkit_tf()
    auto = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(path, attn_implementation="attnkit", **dtype_kw(dtype))
    assert attnkit_plan(model).platform["kind"] == "cuda"       # planned at load, for the GPU
    model = model.cuda().eval()
    eager = auto.from_pretrained(path, attn_implementation="eager", **dtype_kw(dtype)).cuda().eval()
    ids = torch.randint(1, 128, (3, 24), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :9] = mask[2, :20] = 0
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask).logits.float()
        want = eager(input_ids=ids, attention_mask=mask).logits.float()
    close(got[mask.bool()], want[mask.bool()], rtol=rtol)
    # the H200 profile (or the cuda priority table) picks a GPU backend: triton or sdpa
    assert attnkit_plan(model).prefill_backend in ("triton", "sdpa")
    if dtype == torch.float32:
        kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                  pad_token_id=0)
        with torch.no_grad():
            assert torch.equal(model.generate(**kw), eager.generate(**kw))


def test_cuda_right_padding_and_bidirectional_blocks_match_sdpa(wide, attnkit_tf):
    """On the GPU backend: right padding (one-query requests sharing a row's pages) and a
    bidirectional block in a causal mask, at every position."""
    import transformers

    path = wide("llama")
    attnkit_tf()
    auto = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(path, attn_implementation="attnkit").cuda().eval()
    sdpa = auto.from_pretrained(path, attn_implementation="sdpa").cuda().eval()
    ids = torch.randint(1, 128, (2, 24), device="cuda")
    padded = torch.ones_like(ids)
    padded[1, 10:] = 0
    block = torch.ones(24, 24, dtype=torch.bool, device="cuda").tril().expand(2, 1, 24, 24).clone()
    block[:, :, 4:12, 4:12] = True
    with torch.no_grad():
        for mask in (padded, block):
            close(model(input_ids=ids, attention_mask=mask).logits,
                  sdpa(input_ids=ids, attention_mask=mask).logits, rtol=5e-3)
    assert attnkit_plan(model).prefill_backend == "triton"
