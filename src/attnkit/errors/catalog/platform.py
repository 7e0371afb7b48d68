"""AK210-AK299: a backend does not run on this platform (kind, compute capability, packages).

AK200-AK209 (unknown device, bad platform value) live in devices.py.
"""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK210", "Backend does not run on this platform",
        meaning="The backend declares the platform kinds it runs on (cuda, rocm, cpu, mps, xpu) and "
                "this platform's kind is not one of them.",
        trigger="A candidate whose `platforms` exclude the platform's kind.",
        situations=["A GPU-only backend (triton, triton_mla) named on a CPU box or for --device cpu.",
                    "Planning for mps/xpu/rocm where few backends are declared yet."],
        solutions=["Use a backend that runs here: `attnkit backends --device D` lists which are usable.",
                   "Plan for the device you will run on (--device h100)."],
        before="attnkit plan llama-3.1-8b --device cpu --attention-backend triton",
        after="attnkit plan llama-3.1-8b --device cpu --attention-backend sdpa",
        related=("AK121", "AK211", "AK212"),
    ),
    entry(
        "AK211", "Compute capability out of range",
        meaning="The backend needs a CUDA compute capability range (e.g. sm80+ for bf16 tensor-core "
                "tiles) and this GPU is outside it.",
        trigger="A candidate with `compute_capability` (min, max) that excludes the platform's; "
                "at run time, DualChunkBackend(impl='triton') on a GPU outside the triton "
                "backend's range (or a ROCm device).",
        situations=["A Triton kernel that needs Ampere (sm80) planned for a T4 (sm75).",
                    "A Qwen2.5-1M model on a V100 with the dual_chunk backend forced to its "
                    "Triton path."],
        solutions=["Use a backend without that limit (sdpa, torch_native), or plan for a newer GPU.",
                   "dual_chunk: leave impl at 'auto' (it takes the torch path there) or pass "
                   "impl='torch'."],
        before="attnkit plan deepseek-v3 --device t4 --attention-backend triton_mla",
        after="attnkit plan deepseek-v3 --device t4",
        related=("AK210", "AK121"),
    ),
    entry(
        "AK212", "Required package not installed",
        meaning="The backend imports packages (e.g. triton) that the platform does not have. attnkit "
                "reports installed, usable-here and supports-this-input separately: this is 'installed'.",
        trigger="A candidate whose `requires` names a package missing from Platform.packages.",
        situations=["A CUDA box without triton.", "A detected platform (--device auto) in a venv "
                    "without torch.", "attnkit generate or attnkit tune after a bare "
                    "`pip install attnkit` (planning needs no torch; running does)."],
        solutions=["Install the package named in the message (pip install triton; for torch: "
                   "pip install 'attnkit[torch]').",
                   "Use a backend whose requirements are installed."],
        before="attnkit plan llama-3.1-8b --device cpu --attention-backend triton   # the cpu preset assumes no triton",
        after="attnkit plan llama-3.1-8b --device h100 --attention-backend triton   # a preset that assumes triton",
        related=("AK210", "AK120"),
    ),
]
