"""Tiny model configs and helpers shared by the transformers integration tests."""
import torch

RTOL = 1e-4      # fp32: max abs error relative to the largest eager logit


COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              # wide init: logits far from uniform, so greedy argmax has clear winners
              initializer_range=0.2)
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}

FAMILIES = {
    "llama": ("LlamaConfig", {}),
    # layer 1 slides (window 4), layer 0 is full; q/k/v biases
    "qwen2": ("Qwen2Config", {"use_sliding_window": True, "sliding_window": 4,
                              "max_window_layers": 1}),
    # sliding (6) / global layers, attention softcap, scaling by query_pre_attn_scalar
    "gemma2": ("Gemma2Config", {"head_dim": 16, "query_pre_attn_scalar": 12, "sliding_window": 6,
                                "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0}),
    # sinks (s_aux), sliding (5) / full layers, experts; plain RoPE instead of YaRN
    "gpt_oss": ("GptOssConfig", {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                                 "sliding_window": 5}),
}


def _version() -> tuple[int, int]:
    import transformers

    return tuple(int(x) for x in transformers.__version__.split(".")[:2])


def dtype_kw(dtype) -> dict:
    """from_pretrained / from_config's dtype argument (torch_dtype before 4.56)."""
    return {"dtype" if _version() >= (4, 56) else "torch_dtype": dtype}


def build_config(family: str, **extra):
    import transformers

    config_cls, own = FAMILIES[family]
    kwargs = {**COMMON, **own, **extra}
    if family == "gpt_oss":
        if _version() >= (5, 0):
            kwargs.setdefault("rope_parameters", DEFAULT_ROPE)
        else:
            kwargs.setdefault("rope_scaling", None)
    return getattr(transformers, config_cls)(**kwargs)


def load(path, **kwargs):
    """The model at ``path`` with attn_implementation="attnkit", in eval mode."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="attnkit", **kwargs).eval()


def close(actual: torch.Tensor, expected: torch.Tensor, *, rtol: float = RTOL) -> None:
    err = (actual - expected).abs().max().item() / expected.abs().max().item()
    assert err <= rtol, f"relative error {err:.2e} > {rtol:.0e}"
