"""DeepSeek-V2, DeepSeek-V3, Kimi-K2 (V3's architecture under Moonshot's name) and DeepSeek-V3.2
(V3 with DeepSeek sparse attention: each MLA layer's indexer, layers/indexer.py, docs/dsa.md):
Llama-like norms around multi-head latent attention (layers/mla.py) with interleaved rotary
pairs (V3 configs may turn that off: ``rope_interleave`` false gives neox halves); dense MLPs
for the first ``first_k_dense_replace`` layers, routed plus shared experts after
(layers/moe.py). V2 routes by softmax scores (greedy or group-limited), V3 by the sigmoid
``noaux_tc`` router with renormalised weights (layers/routing.py).
"""
from __future__ import annotations

from attnkit.errors import fail
from attnkit.model._fields import ConfigReader
from attnkit.runner.layers.indexer import indexer_problem
from attnkit.runner.layers.mla import MLAAttention
from attnkit.runner.layers.moe import DeepseekMoEConfig, feed_forward
from attnkit.runner.models.blocks import Block, norms

V2 = ("deepseek_v2",)
V3 = ("deepseek_v3", "kimi_k2", "deepseek_v32")
MODEL_TYPES = V2 + V3
KIND = "mla"
DEFAULTS: dict = {}
# What transformers computes per DeepSeek generation: the router's scoring_func and
# topk_method it runs, and its config defaults for routing fields a config.json leaves out
# (V2 ignores norm_topk_prob, as transformers does).
DEEPSEEK_ROUTING = {
    "v2": {"scoring_func": ("softmax",), "topk_method": ("greedy", "group_limited_greedy")},
    "v3": {"scoring_func": ("sigmoid",), "topk_method": ("noaux_tc",)},
}
DEEPSEEK_DEFAULTS = {
    "v2": {"first_k_dense_replace": 0, "routed_scaling_factor": 1.0, "n_shared_experts": 2,
           "norm_topk_prob": False},
    "v3": {"first_k_dense_replace": 3, "routed_scaling_factor": 2.5, "n_shared_experts": 1,
           "norm_topk_prob": True, "n_group": 8, "topk_group": 4},
}


def recipe(r: ConfigReader, model_type: str, *, hidden: int) -> dict:
    v3 = model_type in V3
    moe = _deepseek_moe(r, "v3" if v3 else "v2")
    if model_type == "deepseek_v32":
        _check_mlp_layer_types(r, moe)
    if r.has("index_topk") or model_type == "deepseek_v32":       # DSA layers: their indexer
        problem = indexer_problem(q_lora_rank=r.cfg.get("q_lora_rank"),
                                  index_head_dim=r.int("index_head_dim"),
                                  rope_dim=r.int("qk_rope_head_dim"))
        if problem:
            fail("AK480", f"DeepSeek sparse attention: {problem[1]}", field=problem[0],
                 actual=r.cfg.get(problem[0]))
    # rotary pairs interleaved unless a V3 config says otherwise (null counts as false, as
    # transformers tests it); V3.2's MLA always interleaves (its config has no such key)
    flag = v3 and model_type != "deepseek_v32"
    return dict(rope_interleaved=r.flag("rope_interleave", default=True) if flag else True, moe=moe)


def _check_mlp_layer_types(r: ConfigReader, moe) -> None:
    """DeepSeek-V3.2 may list its MLPs (mlp_layer_types: dense / sparse per layer); the runner
    builds them from first_k_dense_replace, so a list that says otherwise is AK480."""
    if not r.has("mlp_layer_types"):
        return
    n = r.int("num_hidden_layers")
    first = n if moe is None else moe.first_dense
    expected = ["dense"] * first + ["sparse"] * (n - first)
    if r.cfg["mlp_layer_types"] != expected:
        fail("AK480", "mlp_layer_types must be dense for the first first_k_dense_replace layers "
                      "and sparse (experts) after, as the runner builds them",
             field="mlp_layer_types", expected=expected, actual=r.cfg["mlp_layer_types"][:20])


def block(model, w, spec) -> Block:
    arch, p = model.arch, f"model.layers.{spec.layer_id}."
    attention = MLAAttention(w, f"{p}self_attn.", spec, hidden=arch.hidden_size, norm=arch.norm,
                             rotary=model.rotary, tp=model.tp)
    mlp = feed_forward(arch.moe, w, f"{p}mlp.", layer_id=spec.layer_id, hidden=arch.hidden_size,
                       inter=arch.intermediate_size, act=arch.activation, tp=model.tp)
    return Block(attention, mlp, *norms(arch, w, p))


def _deepseek_moe(top: ConfigReader, gen: str) -> DeepseekMoEConfig | None:
    """DeepSeek's experts (``gen``: "v2" or "v3"); AK480 for a routing the runner does not
    compute."""
    r = ConfigReader(top.cfg, source=top.source, defaults=DEEPSEEK_DEFAULTS[gen])
    first_dense = r.int("first_k_dense_replace", minimum=0)
    if first_dense >= r.int("num_hidden_layers"):
        return None                             # every layer dense: expert fields may be unset
    experts, top_k = r.int("n_routed_experts"), r.int("num_experts_per_tok")
    routing = DEEPSEEK_ROUTING[gen]
    scoring = r.str("scoring_func", default=None) or routing["scoring_func"][0]
    method = r.str("topk_method", default=None) or routing["topk_method"][0]
    if scoring not in routing["scoring_func"] or method not in routing["topk_method"] \
            or top_k > experts:
        fail("AK480", f"DeepSeek-{gen.upper()} routing scoring_func={scoring!r}, "
                      f"topk_method={method!r} with {top_k} of {experts} experts is not one the "
                      f"runner computes (scoring_func {' / '.join(routing['scoring_func'])}, "
                      f"topk_method {' / '.join(routing['topk_method'])}, top_k <= "
                      "n_routed_experts)", field="topk_method",
             expected=list(routing["topk_method"]), actual=method)
    groups = topk_groups = None
    if method != "greedy":
        groups, topk_groups = r.int("n_group"), r.int("topk_group")
        per_group = 2 if method == "noaux_tc" else 1     # noaux_tc sums each group's best two
        if experts % groups or experts // groups < per_group or topk_groups > groups \
                or top_k > topk_groups * (experts // groups):
            fail("AK480", f"{method} needs n_group ({groups}) to divide n_routed_experts "
                          f"({experts}) into groups of {per_group}+ experts, topk_group "
                          f"({topk_groups}) <= n_group, and num_experts_per_tok ({top_k}) "
                          "experts in the kept groups",
                 field="n_group", expected=f"a divisor of {experts}", actual=groups)
    return DeepseekMoEConfig(
        num_experts=experts, top_k=top_k, inter=r.int("moe_intermediate_size"),
        num_shared=r.int("n_shared_experts", minimum=0),
        scaling=r.float("routed_scaling_factor"), first_dense=first_dense,
        topk_method=method, num_groups=groups, topk_groups=topk_groups, scoring=scoring,
        norm_topk_prob=gen == "v3" and r.flag("norm_topk_prob", default=True))
