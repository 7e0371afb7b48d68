"""Plain-text views of plans, plan matrices and backend lists: the CLI's non-JSON output, and the
plan the transformers integration quotes when a model cannot be served. Torch-free."""
from __future__ import annotations

import textwrap
from typing import Any

from attnkit.hardware.platform import arch_label
# render takes Plans as arguments and imports no Plan: Plan.render imports this module
from attnkit.model.summary import layer_ranges

SHARED = "all rejected"


def plan_text(plan, *, short: bool = False) -> str:
    """The plan as ``attnkit plan`` prints it; ``short``: backends, settings and warnings only
    (no reasons, alternatives, adjustments or rejections)."""
    d = plan.to_dict()
    p = d["platform"]
    arch = arch_label(p["kind"], p.get("capability"), p.get("arch"))
    cc = f", {arch}" if arch else ""
    out = [f"{d['model']} on {p['name']} ({p['kind']}{cc}): {'planned' if d['ok'] else 'NO VALID PLAN'}", ""]
    if not short and d["model_info"]:
        out += model_lines(d["model_info"]) + [""]
    if d["ok"]:
        out += ["backends"]
        same = d["prefill_backend"] == d["decode_backend"] and d["why"]["prefill"] == d["why"]["decode"]
        split = "extend" in d["why"]           # a separate backend runs steps over a cached prefix
        for phase in (("prefill+decode",) if same else ("prefill", "extend", "decode") if split
                      else ("prefill", "decode")):
            key = phase.split("+")[0]
            out.append(f"  {phase:<15} {d[f'{key}_backend'] or 'none'}")
            out += [] if short else _wrap(d["why"].get(key, ""), indent=4)
            roles = {"prefill+decode": ("prefill", "extend", "decode"), "extend": ("extend",),
                     "decode": ("decode",),
                     "prefill": ("prefill", "varlen") if split else ("prefill", "extend", "varlen")}[phase]
            for role in roles if not short else ():
                if role in d["kernel_why"]:
                    out += _wrap(kernel_line(d["kernel_why"], role), indent=4)
        alts = {k: v for k, v in d["alternatives"].items() if v}
        if alts and not short:
            seen = list(alts.values())
            out.append("  also serve: " + (", ".join(seen[0]) if same and seen.count(seen[0]) == len(seen) else
                                           "; ".join(f"{k} {', '.join(v)}" for k, v in alts.items())))
        out += ["", "settings"] + _wrap("  ".join(f"{k}={_short(v)}" for k, v in d["settings"].items()
                                                 if v is not None), indent=2) + [""]
    if short:
        out += ["warnings"] + [f"  - {w}" for w in d["warnings"]] if d["warnings"] else []
        return "\n".join(out).rstrip() + "\n"
    if d["adjustments"]:
        out.append("adjustments (filled in, with the rule that chose them)")
        width = max(len(a["field"]) for a in d["adjustments"])
        change = [f"{_short(a['from'])} -> {_short(a['to'])}" for a in d["adjustments"]]
        cw = max(map(len, change))
        for a, c in zip(d["adjustments"], change):
            out.append(f"  {a['field']:<{width}}  {c:<{cw}}  [{a['rule']}] {a['reason']}")
        out.append("")
    if d["rejected"]:
        out += ["rejected"] + rejected_lines(d) + [""]
    if d["warnings"]:
        out += ["warnings"] + [f"  - {w}" for w in d["warnings"]] + [""]
    if d["error"]:
        out += error_lines(d["error"])
    return "\n".join(out).rstrip() + "\n"


def model_lines(info: dict[str, Any]) -> list[str]:
    """Which layers attend and how they differ; layers that are not attention; notes."""
    ids, other = info["attention_layers"], info["other_layers"]
    total = len(ids) + len({i for v in other.values() for i in v} - set(ids))
    dtype = info["dtype"] or "none named"
    head = (f"{len(ids)} of {total} layers: {layer_ranges(ids)}" if other and len(ids) < total
            else f"{len(ids)} layers")
    out = ["model", f"  attention   {head} ({info['kind'].upper()}); config dtype {dtype}"]
    if other:
        beside = " (beside attention)" if set(ids) & {i for v in other.values() for i in v} else ""
        out += _wrap("; ".join(f"{len(v)} {k}{beside}: {layer_ranges(v)}" for k, v in other.items()),
                     indent=14, first="  not planned ")
    groups = info["layer_groups"]
    if len(groups) > 1:
        out += _wrap("; ".join(f"{len(g['layers'])} {_group_label(g)}: {layer_ranges(g['layers'])}"
                               for g in groups), indent=14, first="  layers      ")
    if info["features"]:
        out.append(f"  features    {', '.join(info['features'])}")
    if info["phases"] == ["prefill"]:
        out.append("  phases      prefill only (encoder: no decode phase)")
    for note in info["notes"]:
        out += _wrap(note, indent=14, first="  note        ")
    return out


def _group_label(g: dict[str, Any]) -> str:
    parts = [g["role"]]
    if g["sliding_window"]:
        parts.append(f"sliding_window {g['sliding_window']}")
    if g["attention_chunk"]:
        parts.append(f"attention_chunk {g['attention_chunk']}")
    parts += [f for f in g["features"] if f not in ("sliding_window", "chunked_local", "non_causal",
                                                     "cross_attention")]
    return ", ".join(parts)


def rejected_lines(d: dict[str, Any]) -> list[str]:
    """One line per reason; causes every candidate shares are printed once, first."""
    out = []
    names = list(d["rejected"])
    if d["shared_reasons"] and len(names) > 1:
        out.append(f"  {SHARED} ({', '.join(names)}):")
        for r in d["shared_reasons"]:
            out.append(f"  {'':<14} {r['code']} {r['field']}: {r['message']}")
    for name, reasons in d["rejected"].items():
        own = [r for r in reasons if not r["shared"]]
        if not own:
            continue
        for i, r in enumerate(own):
            phases = "" if len(r["phases"]) != 1 else f" ({r['phases'][0]} only)"
            out.append(f"  {name if i == 0 else '':<14} {r['code']} {r['field']}: {r['message']}{phases}")
    return out


def error_lines(e: dict[str, Any]) -> list[str]:
    out = [f"error {e['code']}: {e['title']}", f"  {e['message']}"]
    if e.get("solutions"):
        out += ["  fix:"] + [f"    - {s}" for s in e["solutions"]]
    fix = e.get("example_fix")
    if fix:
        out += ["  example:", f"    before: {fix['before']}", f"    after:  {fix['after']}"]
    out.append(f"  more: attnkit explain {e['code']}")
    return out


# what a matrix cell's shape means, printed under the matrix for the shapes it shows
LEGEND = (
    (lambda c: c.split(" ")[0].count("/") == 2,
     "a/b/c = prefill/extend (steps over a cached prefix)/decode backends."),
    (lambda c: c.split(" ")[0].count("/") == 1 and not c.split(" ")[0].endswith("/-"),
     "a/b = prefill/decode backends (one backend where they are the same)."),
    (lambda c: c.split(" ")[0].endswith("/-"), "a/- = prefill only: the model has no decode phase (an encoder)."),
    (lambda c: c.endswith("(no plan)"), "AKnnn (no plan) = no valid plan, or the entry could not be read: "
                                         "see errors; attnkit explain AKnnn."),
)


def matrix_text(plans: list, models: list[str], devices: list[str]) -> str:
    """Models down, devices across; a cell is the backend (prefill/decode if they differ,
    prefill/extend/decode with a separate extend backend) or the error code."""
    cells = {}
    for plan, (m, dev) in zip(plans, [(m, dv) for m in models for dv in devices]):
        if plan.ok:
            cell = plan.prefill_backend if plan.prefill_backend == plan.decode_backend else \
                f"{plan.prefill_backend}/{plan.decode_backend or '-'}"
            if plan.extend_backend not in (None, plan.prefill_backend):
                cell = f"{plan.prefill_backend}/{plan.extend_backend}/{plan.decode_backend or '-'}"
            cell += f" p{plan.run.page_size}"
        else:
            cell = f"{plan.error['code']} (no plan)"
        cells[m, dev] = cell
    w0 = max(len("model"), *(len(m) for m in models))
    widths = {dv: max(len(dv), *(len(cells[m, dv]) for m in models)) for dv in devices}
    out = ["  ".join([f"{'model':<{w0}}"] + [f"{dv:<{widths[dv]}}" for dv in devices]).rstrip()]
    out += ["  ".join([f"{m:<{w0}}"] + [f"{cells[m, dv]:<{widths[dv]}}" for dv in devices]).rstrip() for m in models]
    notes = [(m, dv, p) for p, (m, dv) in zip(plans, [(m, dv) for m in models for dv in devices]) if not p.ok]
    if notes:
        out += ["", "errors"] + [f"  {m} @ {dv}: {p.error['code']} {p.error['message']}" for m, dv, p in notes]
    warned = [(m, dv, w) for p, (m, dv) in zip(plans, [(m, dv) for m in models for dv in devices])
              for w in p.warnings]
    if warned:
        out += ["", "warnings"] + [f"  {m} @ {dv}: {w}" for m, dv, w in warned]
    shown = list(cells.values())
    out += [""] + [text for mark, text in LEGEND if any(mark(c) for c in shown)]
    out += ["pN = KV page size. Details: attnkit plan MODEL --device D (add --json for every field)."]
    return "\n".join(out) + "\n"


def backends_text(data: dict[str, Any]) -> str:
    p = data["platform"]
    out = [f"backends on {p['name']} ({p['kind']})"]
    packages = ", ".join(f"{k} {v}" for k, v in (p.get("packages") or {}).items()) or "none"
    if data.get("packages_source") == "preset":
        out += [f"packages: what the {p.get('preset')} preset assumes ({packages}), not this machine's; "
                "--device auto reads this machine"]
    else:
        out += [f"packages: installed on this machine ({packages})"]
    out.append("")
    width = max([len(b["name"]) for b in data["backends"]] + [4])
    out.append(f"  {'name':<{width}}  installed  usable  aliases / why not")
    for b in data["backends"]:
        note = "; ".join(r["message"] for r in b["why_not"]) or ", ".join(b["aliases"])
        out.append(f"  {b['name']:<{width}}  {'yes' if b['installed'] else 'no':<9}  "
                   f"{'yes' if b['usable'] else 'no':<6}  {note}")
    out += ["", "installed = required packages present; usable = also runs on this platform kind and "
                "compute capability. Whether it serves a model: attnkit plan MODEL --device D."]
    return "\n".join(out) + "\n"


def _wrap(text: str, *, indent: int, width: int = 100, first: str | None = None) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=" " * indent if first is None else first,
                         subsequent_indent=" " * indent, break_on_hyphens=False)


def _short(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(str, value)) + "]"
    return "-" if value is None else str(value)


def kernel_line(kernel_why: dict[str, str], role: str) -> str:
    """A role's kernel reason as the plan prints it: ``kernels for prefill steps: ...``
    (the varlen role: ``kernels for varlen calls: ...``)."""
    what = "calls" if role == "varlen" else "steps"
    return kernel_why[role].replace("kernels:", f"kernels for {role} {what}:", 1)
