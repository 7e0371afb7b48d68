"""Tiny random-weight models built with transformers, saved to a temp dir once per session.

``tiny_model(family)`` -> (model directory, the transformers model in eval mode, fp32, eager
attention). transformers is imported lazily so collecting the suite stays cheap.
"""
import pytest

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              # wide init: logits far from uniform, so greedy argmax has clear winners
              initializer_range=0.2)

DEEPSEEK = dict(num_hidden_layers=3, num_key_value_heads=None, kv_lora_rank=16, q_lora_rank=24,
                qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12, n_routed_experts=4,
                num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32,
                first_k_dense_replace=1)

# DeepSeek-V3 (test_runner_deepseek_v3.py): 8 experts in 4 groups, 2 groups kept, 2 per token
DEEPSEEK_V3 = {**DEEPSEEK, "n_routed_experts": 8, "n_group": 4, "topk_group": 2}

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),                 # q/k/v biases
    # one KV head (replicated on every tensor-parallel rank); a vocabulary and an MLP width
    # that 2 ranks split unevenly (test_runner_tp.py)
    "qwen2_mqa": ("Qwen2Config", "Qwen2ForCausalLM",
                  {"num_key_value_heads": 1, "vocab_size": 125, "intermediate_size": 95}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 5}),
    # Qwen's window: only layers from max_window_layers on slide
    "qwen2_swa": ("Qwen2Config", "Qwen2ForCausalLM",
                  {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),  # per-head q/k norms
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 6,
                "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0}),
    # sinks, biases everywhere, experts; alternating sliding/full layers; plain RoPE (not YaRN)
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                 "sliding_window": 5, "rope_parameters": {"rope_type": "default",
                                                          "rope_theta": 10000.0}}),
    # cs = 16, ls = 4: chunk length 12 (page sizes dividing 12: 1, 2, 3, 4, 6, 12)
    "qwen2_dca": ("Qwen2Config", "Qwen2ForCausalLM",
                  {"dual_chunk_attention_config": {"chunk_size": 16, "local_size": 4,
                                                   "original_max_position_embeddings": 0}}),
    # Scaled RoPE (test_runner_rope_scaling.py). original_max_position_embeddings 64 puts
    # the short test prompts' frequencies in every regime (kept, blended, scaled).
    "llama_llama3": ("LlamaConfig", "LlamaForCausalLM",
                     {"rope_parameters": {"rope_type": "llama3", "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "rope_theta": 10000.0,
                                          "original_max_position_embeddings": 64}}),
    "llama_yarn": ("LlamaConfig", "LlamaForCausalLM",
                   {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                        "original_max_position_embeddings": 64}}),
    # gpt-oss's own YaRN recipe (no truncation), at a small original length
    "gpt_oss_yarn": ("GptOssConfig", "GptOssForCausalLM",
                     {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                      "sliding_window": 5,
                      "rope_parameters": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0,
                                          "beta_slow": 1.0, "truncate": False,
                                          "rope_theta": 150000.0,
                                          "original_max_position_embeddings": 32}}),
    "qwen2_linear": ("Qwen2Config", "Qwen2ForCausalLM",
                     {"rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                          "rope_theta": 10000.0}}),
    # MLA (test_runner_deepseek.py): layer 0 dense, layers 1-2 experts. kv heads = heads.
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", DEEPSEEK),
    # plain q_proj, group-limited routing, YaRN with DeepSeek's mscale pair
    "deepseek_v2_yarn": ("DeepseekV2Config", "DeepseekV2ForCausalLM",
                         {**DEEPSEEK, "q_lora_rank": None, "n_routed_experts": 8,
                          "num_experts_per_tok": 3, "n_shared_experts": 2,
                          "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2,
                          "routed_scaling_factor": 1.5,
                          "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "mscale": 0.707,
                                              "mscale_all_dim": 1.0, "rope_theta": 10000.0,
                                              "beta_fast": 32, "beta_slow": 1,
                                              "original_max_position_embeddings": 64}}),
    "deepseek_v2_dense": ("DeepseekV2Config", "DeepseekV2ForCausalLM",
                          {**DEEPSEEK, "first_k_dense_replace": 3}),     # no expert layer
    # kv_lora_rank 64 and rope 16: a size triton_mla declares (run by the interpreter on CPU)
    "deepseek_v2_triton": ("DeepseekV2Config", "DeepseekV2ForCausalLM",
                           {**DEEPSEEK, "kv_lora_rank": 64, "qk_rope_head_dim": 16}),
    # sigmoid noaux_tc router (random e_score_correction_bias, see tiny_model), q_lora,
    # interleaved rope, renormalised weights times the default routed_scaling_factor 2.5
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", DEEPSEEK_V3),
    # plain q_proj, neox rope (rope_interleave false), YaRN with the mscale pair, weights not
    # renormalised, 3 experts per token, 2 shared experts
    "deepseek_v3_yarn": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                         {**DEEPSEEK_V3, "q_lora_rank": None, "rope_interleave": False,
                          "norm_topk_prob": False, "num_experts_per_tok": 3,
                          "n_shared_experts": 2, "routed_scaling_factor": 1.5,
                          "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "mscale": 0.707,
                                              "mscale_all_dim": 1.0, "rope_theta": 10000.0,
                                              "beta_fast": 32, "beta_slow": 1,
                                              "original_max_position_embeddings": 64}}),
    # Kimi-K2's routing shape: one group (group selection keeps everything)
    "deepseek_v3_kimi": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                         {**DEEPSEEK_V3, "n_group": 1, "topk_group": 1,
                          "routed_scaling_factor": 2.827}),
    # DeepSeek-V3.2 (test_runner_deepseek_v32.py): V3 plus the DSA indexer; top-k 4 of prompts
    # up to 13 tokens, so the selection matters
    "deepseek_v32": ("DeepseekV32Config", "DeepseekV32ForCausalLM",
                     {**DEEPSEEK_V3, "num_key_value_heads": 4, "index_topk": 4, "index_n_heads": 16,
                      "index_head_dim": 16}),
    # triton_dsa's toy sizes (latent 64 + 16, indexer 4 x 32; test_runner_dsa_triton.py)
    "deepseek_v32_triton": ("DeepseekV32Config", "DeepseekV32ForCausalLM",
                            {**DEEPSEEK_V3, "num_key_value_heads": 4, "kv_lora_rank": 64,
                             "qk_rope_head_dim": 16, "rope_interleave": False, "index_topk": 4,
                             "index_n_heads": 4, "index_head_dim": 32}),
    # triton_mla's (64, 16) latent (interpreter on CPU), neox rope
    "deepseek_v3_triton": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                           {**DEEPSEEK_V3, "kv_lora_rank": 64, "qk_rope_head_dim": 16,
                            "rope_interleave": False}),
    # DeepSeek-V3.2 at the latent (64, 16) and indexer (64 x 128) the sparse Triton kernels
    # declare (test_runner_deepseek_v32_gpu.py)
    "deepseek_v32_wide": ("DeepseekV32Config", "DeepseekV32ForCausalLM",
                          {**DEEPSEEK_V3, "num_key_value_heads": 4, "kv_lora_rank": 64,
                           "qk_rope_head_dim": 16, "index_topk": 4, "index_n_heads": 64,
                           "index_head_dim": 128}),
}


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny matrices: extra intra-op threads only spin against the other xdist worker (seen
    here: 0.1 s per test with one thread, several seconds with the default on a busy box)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    built = {}

    def get(family: str):
        if family not in built:
            from runner_helpers import save_tiny

            config_cls, model_cls, extra = FAMILIES[family]
            built[family] = save_tiny(tmp_path_factory.mktemp(family), config_cls, model_cls,
                                      {**COMMON, **extra}, seed=sum(map(ord, family)))
        return built[family]

    return get


@pytest.fixture(scope="session")
def hf_logits():
    """hf_logits(model, tokens) -> [len(tokens), vocab] float32 from transformers' forward."""
    from runner_helpers import hf_logits as run

    return run
