"""triton_dsa in the runner: a tiny DeepSeek-V3.2 at the kernels' toy sizes (latent 64 + 16,
indexer 4 heads x 32, top-k 4 of prompts up to 13 tokens) gives the logits of the float64
reference path (test_runner_deepseek_v32.ReferenceDSA) at every prefill row and decode step,
and its greedy tokens; by the Triton interpreter on the CPU, and on CUDA (marked gpu). With 4
indexer heads, exact-zero scores tie often, so the reference path (ties to the lower
position, docs/dsa.md) is the oracle here, not transformers' torch.topk."""
import pytest
import torch

from attnkit.registry import load_backend
from attnkit.runner import Engine
from runner_helpers import close
from test_runner_deepseek_v32 import PROMPTS, ReferenceDSA, steps



def _engines(tiny_model, page_size, device):
    path, _ = tiny_model("deepseek_v32_triton")
    # a backend object skips the planner, which keeps triton_dsa to CUDA
    ours = Engine.from_pretrained(path, backend=load_backend("triton_dsa"), page_size=page_size,
                                  device=device, dtype="fp32")
    ref = Engine.from_pretrained(path, backend=ReferenceDSA(), page_size=page_size, device=device,
                                 dtype="fp32")
    return ours, ref


def _match(tiny_model, page_size, device, rtol):
    ours, ref = _engines(tiny_model, page_size, device)
    for got, want in zip(steps(ours, PROMPTS), steps(ref, PROMPTS)):
        close(got, want, rtol=rtol)
    assert ours.generate(PROMPTS, max_new_tokens=6) == ref.generate(PROMPTS, max_new_tokens=6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter run; the GPU test covers CUDA")
@pytest.mark.parametrize("page_size", [1, 16])
def test_interpreter_matches_the_reference_path(tiny_model, page_size):
    _match(tiny_model, page_size, "cpu", 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [1, 16])
def test_cuda_matches_the_reference_path(tiny_model, page_size):
    _match(tiny_model, page_size, "cuda", 5e-3)      # fp32 dots may run in TF32 on the GPU


def _static_engine(tiny_model, device, **kw):
    """triton_dsa decoding through the graph runner's static steps (StaticDecode buckets 1, 2,
    4): captured on CUDA, run eagerly with graph_capture=False (any device)."""
    path, _ = tiny_model("deepseek_v32_triton")
    return Engine.from_pretrained(path, backend=load_backend("triton_dsa"), page_size=16,
                                  device=device, dtype="fp32", max_num_seqs=4, cuda_graph=True, **kw)


def _plain_engine(tiny_model, device):
    """The same backend, every step prepared from the step's own metadata (no static step)."""
    path, _ = tiny_model("deepseek_v32_triton")
    return Engine.from_pretrained(path, backend=load_backend("triton_dsa"), page_size=16,
                                  device=device, dtype="fp32", cuda_graph=False, graph_capture=False)


def _static_matches_plain(tiny_model, device, **kw):
    static, plain = _static_engine(tiny_model, device, **kw), _plain_engine(tiny_model, device)
    assert static.graphs is not None and plain.graphs is None
    got, want = steps(static, PROMPTS), steps(plain, PROMPTS)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-5)
    runner = static.graphs
    assert runner.stats["replays" if runner.capture else "eager_decodes"] >= 3
    assert static.generate(PROMPTS, max_new_tokens=6) == plain.generate(PROMPTS, max_new_tokens=6)
    assert static.generate(PROMPTS[:1], max_new_tokens=6)[0] == plain.generate(PROMPTS[:1], max_new_tokens=6)[0]
    assert static.allocator.num_free == static.allocator.num_pages
    # greedy steps several at a time on the device (StaticDecode.advance moves the positions
    # the static step's scores read in place): the same tokens as one step at a time
    from attnkit.runner import SamplingParams, Scheduler

    calls, original = [], static.decode_ahead
    static.decode_ahead = lambda seqs, k, **kw: calls.append(k) or original(seqs, k, **kw)
    sched = Scheduler(static, max_num_batched_tokens=None, max_num_seqs=4, decode_ahead=4)
    reqs = [sched.add(p, SamplingParams(max_new_tokens=9)) for p in PROMPTS]
    list(sched.run())
    assert calls == [4, 4] and [r.output for r in reqs] == plain.generate(PROMPTS, max_new_tokens=9)
    assert static.allocator.num_free == static.allocator.num_pages


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter run; the GPU test covers CUDA")
def test_interpreter_static_decode_steps_match_the_plain_steps(tiny_model):
    """The static (graph) decode path of the runner, run eagerly: its padded buckets, its
    scores over the tables' whole reach, the index keys written through the static slots."""
    _static_matches_plain(tiny_model, "cpu", graph_capture=False)


@pytest.mark.gpu
def test_cuda_graph_decode_matches_eager_decode(tiny_model):
    """deepseek_v32 with triton_dsa decodes with captured graphs (buckets 1, 2, 4): the logits
    of every step equal the eager (unstatic) engine's to 1e-5, and its greedy tokens exactly."""
    _static_matches_plain(tiny_model, "cuda")
