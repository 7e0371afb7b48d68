"""Comparison helpers shared by the runner tests."""
import json
import shutil

import torch

RTOL = 1e-4


def close(actual: torch.Tensor, expected: torch.Tensor, *, rtol: float = RTOL) -> None:
    """Max abs error relative to the largest expected logit: <= rtol (1e-4, fp32)."""
    err = rel_err(actual, expected)
    assert err <= rtol, f"relative error {err:.2e} > {rtol:.0e}"


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Max abs error relative to the largest expected value (compared on expected's device)."""
    diff = actual.to(expected.device, torch.float32) - expected.float()
    return diff.abs().max().item() / expected.abs().max().item()


def hf_logits(model, tokens) -> torch.Tensor:
    """[len(tokens), vocab] float32 from transformers' own forward."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def hf_greedy(model, prompt, n):
    """transformers' generate(do_sample=False): the n new tokens after ``prompt``."""
    from transformers import GenerationConfig

    # No eos: both sides must produce exactly n tokens. (eos_token_id=None would fall back
    # to the model's generation_config eos, 2; an empty list means none.)
    config = GenerationConfig(max_new_tokens=n, min_new_tokens=0, do_sample=False,
                              eos_token_id=[], pad_token_id=0, bos_token_id=None)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), generation_config=config,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


def prefill_then_decode_match(engine, hf, prompts, *, decode_steps: int, rtol: float = RTOL):
    """Prefill every prompt but its last ``decode_steps`` tokens as one batch, then decode
    those tokens one step at a time (all sequences together): every prefill row and every
    decode step's logits equal transformers' forward of the same prefix. Releases after."""
    cut = [len(p) - decode_steps for p in prompts]
    assert min(cut) >= 1, "every prompt needs more than decode_steps tokens"
    out = engine.prefill([p[:n] for p, n in zip(prompts, cut)])
    for prompt, n, logits in zip(prompts, cut, out):
        close(logits, hf_logits(hf, prompt[:n]), rtol=rtol)
    ids = engine.ids
    for step in range(decode_steps):
        rows = engine.decode([p[n + step] for p, n in zip(prompts, cut)], ids=ids)
        for row, prompt, n in zip(rows, prompts, cut):
            close(row, hf_logits(hf, prompt[:n + step + 1])[-1], rtol=rtol)
    engine.release()


def edit_config(path, tmp_path, **changes):
    """A copy of the checkpoint directory ``path`` whose config.json has ``changes``."""
    out = tmp_path / "edited"
    shutil.copytree(path, out)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, **changes}))
    return out


def save_tiny(path, config_cls: str, model_cls: str, config: dict, *, seed: int):
    """A random-weight transformers model (eager attention) saved to ``path``: (path, model).
    DeepSeek-V3's router bias starts at 0; it is randomised so that it matters."""
    import transformers

    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config)).eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        for key, buffer in model.named_buffers():
            if key.endswith("e_score_correction_bias"):
                buffer.uniform_(-0.25, 0.25)
    model.save_pretrained(path)
    return path, model


class FailOnce:
    """Make ``owner.<name>`` (default ``forward``) raise ``error`` (default RuntimeError) on
    its ``nth`` call, then behave again; ``calls`` counts every call. ``disarm()`` restores
    the original attribute."""

    def __init__(self, owner, nth: int, *, name: str = "forward", error: BaseException | None = None):
        self.owner, self.name, self.inner = owner, name, getattr(owner, name)
        self.calls, self.nth = 0, nth
        self.error = RuntimeError("injected failure") if error is None else error
        setattr(owner, name, self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.nth:
            raise self.error
        return self.inner(*args, **kwargs)

    def disarm(self) -> None:
        setattr(self.owner, self.name, self.inner)


def engine_state(engine) -> tuple:
    """Everything a failed call must leave as it was: the free page list (in hand-out order)
    and each live sequence's tokens, cached count and pages."""
    seqs = [engine.sequence(i) for i in engine.ids]
    return (engine.allocator.free_pages(),
            [(s.seq_id, s.tokens, s.computed, list(s.pages)) for s in seqs])
