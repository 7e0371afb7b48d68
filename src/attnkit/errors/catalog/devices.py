"""2xx (AK200-AK209): choosing the device to plan for."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK200", "Unknown device preset",
        meaning="The device named with --device (or passed as platform=) is neither 'auto' nor "
                "one of attnkit's platform presets, so there is no hardware to plan for.",
        trigger="A --device value that matches no preset name (case-insensitive).",
        situations=["A typo such as 'h10' or 'a10O'.",
                    "A marketing name ('H100 SXM') instead of the preset name ('h100').",
                    "A device attnkit has no preset for yet."],
        solutions=["Use the suggested preset name from the message.",
                   "Use --device auto to detect this machine.",
                   "List the presets with `attnkit devices`."],
        before="attnkit plan llama-3.1-8b --device h10",
        after="attnkit plan llama-3.1-8b --device h100",
        related=("AK201",),
    ),
    entry(
        "AK201", "Invalid platform value",
        meaning="The platform given to the planning API is not 'auto', a preset name or a "
                "Platform object, or it is a Platform with a field attnkit cannot plan for (an "
                "unknown kind, a capability that is not two non-negative integers, a memory size "
                "that is not a positive number, packages that are not name -> version strings).",
        trigger="Calling attnkit.plan(..., platform=X) or resolve_platform(X) with another type, "
                "or with Platform(kind='gpu', ...) / Platform(..., capability=(9,)) and the like.",
        situations=["Passing a dict or a torch.device instead of a Platform.",
                    "Passing the result of torch.cuda.get_device_name()'s tuple by mistake."],
        solutions=["Pass 'auto', a preset name such as 'h100', or attnkit.hardware.Platform(...).",
                   "Build a Platform from a dict with Platform(**d) (capability as a tuple)."],
        before="attnkit.plan('llama-3.1-8b', platform={'kind': 'cuda'})",
        after="attnkit.plan('llama-3.1-8b', platform='h100')",
        related=("AK200",),
    ),
]
