"""The plain-text view of a pipeline or VLM plan: one block per component. Torch-free."""
from __future__ import annotations

from typing import Any

from attnkit.hardware.platform import arch_label
from attnkit.planning.render import _wrap, kernel_line


def components_text(d: dict[str, Any]) -> str:
    """``PipelinePlan.to_dict()`` as ``attnkit plan`` prints it."""
    p = d["platform"]
    arch = arch_label(p["kind"], p.get("capability"), p.get("arch"))
    attending = [c for c in d["components"] if c["attention"]]
    state = "planned" if d["ok"] else "NOT EVERY COMPONENT PLANNED"
    out = [f"{d['model']} ({d['class']}) on {p['name']} ({p['kind']}{', ' + arch if arch else ''}): {state}",
           f"  {len(d['components'])} components, {len(attending)} with attention"]
    if d["inputs"]:
        out.append("  inputs: " + "  ".join(f"{k}={v}" for k, v in d["inputs"].items()))
    out += _wrap("; ".join(d["notes"]), indent=2) if d["notes"] else []
    for c in attending:
        out += [""] + _component_lines(c)
    plain = [c for c in d["components"] if not c["attention"]]
    if plain:
        out += ["", "not planned (no attention)"]
        width = max(len(c["name"]) for c in plain)
        out += [f"  {c['name']:<{width}}  {c['class']}: {c['why_not']}" for c in plain]
    out += ["", "Every component's plan, reasons and rejected backends: add --json."]
    return "\n".join(out) + "\n"


def _component_lines(c: dict[str, Any]) -> list[str]:
    plan, err = c["plan"], c["error"]
    head = f"{c['name']}  {c['class']} ({c['role'].replace('_', ' ')})"
    if err is not None:
        out = [f"{head}: REFUSED", f"  error {err['code']}: {err['title']}"]
        out += _wrap(err["message"], indent=4)
        out += [f"    fix: {s}" for s in err.get("solutions", [])[:2]]
        return out + [f"    more: attnkit explain {err['code']}"]
    if not plan["ok"]:
        e = plan["error"]
        out = [f"{head}: NO VALID PLAN", f"  error {e['code']}: {e['title']}"]
        return out + _wrap(e["message"], indent=4) + [f"    more: attnkit explain {e['code']}"]
    info = plan["model_info"]
    groups = info["layer_groups"]
    shapes = sorted({(g["num_heads"], g["num_kv_heads"], g["head_dim"]) for g in groups})
    shape = ", ".join(f"{h} heads" + (f" ({kv} KV)" if kv != h else "") + f" x d{dim}" for h, kv, dim in shapes)
    out = [f"{head}: {plan['prefill_backend']}",
           f"  {info['num_layers']} attention layers, {shape}; {', '.join(info['features']) or 'causal'}"]
    if c["workload"]:
        w = c["workload"]
        out += _wrap(f"{w['tokens']} tokens per call"
                     + (f", cross-attention to {w['context']} keys" if w["context"] else "")
                     + f": {w['formula']}", indent=4, first="  ")
    why = plan["why"].get("prefill", "")
    out += _wrap(why.split(". ")[0].rstrip("."), indent=4, first="  why: ")     # the rest: --json
    if "varlen" in plan["kernel_why"]:
        out += _wrap(kernel_line(plan["kernel_why"], "varlen"), indent=4, first="  ")
    if "decode" in info["phases"]:
        out.append(f"  decode: {plan['decode_backend']}")
    for note in [*c["notes"], *info["notes"]][:6]:
        out += _wrap(note, indent=4, first="  - ")
    return out
