"""AK230-AK239: device profiles (`attnkit tune` writes them, `attnkit plan` reads them)."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK230", "Device profile cannot be read",
        meaning="A device profile was named (--profile FILE or ATTNKIT_PROFILE) but the file "
                "cannot be opened, so the planner has no measurement to rank backends by.",
        trigger="attnkit plan --profile FILE (or ATTNKIT_PROFILE=FILE) where FILE is missing or "
                "unreadable; attnkit tune --out FILE where FILE exists but cannot be read.",
        situations=["A typo in the path.", "A profile written on another machine and not copied.",
                    "ATTNKIT_PROFILE left set in a shell after the file was deleted."],
        solutions=["Pass the path of a profile written by `attnkit tune` (it prints where it wrote it).",
                   "Unset ATTNKIT_PROFILE / drop --profile to use the cached or shipped profile."],
        before="attnkit plan llama-3.1-8b --device h200 --profile h200.jsn",
        after="attnkit plan llama-3.1-8b --device h200 --profile h200.json",
        related=("AK231",),
    ),
    entry(
        "AK231", "Device profile is malformed",
        meaning="The profile file is not JSON, or not the profile schema this attnkit reads "
                "(docs/profile.md): a missing or wrongly typed field, an unknown status, a bucket "
                "without its sizes. The message names the first wrong field.",
        trigger="Reading a profile named by --profile / ATTNKIT_PROFILE, or resuming "
                "`attnkit tune` into such a file. A malformed file in the profile cache is skipped "
                "with a warning instead.",
        situations=["A profile edited by hand.", "A file from a newer attnkit (another schema version).",
                    "A truncated file (a copy that was cut off)."],
        solutions=["Re-measure: `attnkit tune --out FILE` writes a valid profile (resumable).",
                   "Use the attnkit version that wrote the file."],
        before="attnkit plan llama-3.1-8b --device h200 --profile edited.json",
        after="attnkit plan llama-3.1-8b --device h200 --profile h200.json   # re-measured: attnkit tune --out h200.json",
        related=("AK230", "AK232"),
    ),
    entry(
        "AK232", "Profile was measured elsewhere",
        meaning="`attnkit tune` resumes into an existing profile only when it was measured on the "
                "same device with the same software (torch, triton, attnkit) and the same timing "
                "method; mixing two environments in one file would compare numbers that were "
                "never measured together.",
        trigger="attnkit tune --out FILE where FILE holds a profile of another device, software "
                "version or timing method.",
        situations=["Re-running tune after upgrading torch or triton.",
                    "Copying a profile between machines and tuning into it."],
        solutions=["Write to a new file (--out NEW.json), or delete the old one to re-measure.",
                   "Run with the software the file names (its `software` field)."],
        before="attnkit tune --out h200.json        # h200.json measured with torch 2.10",
        after="attnkit tune --out h200-torch2.11.json",
        related=("AK231",),
    ),
    entry(
        "AK233", "Cannot tune on this device",
        meaning="`attnkit tune` measures backends on a real device: CUDA (the CUDA-graph method) "
                "or, for a smoke run that tests the code path, the CPU. The device asked for is "
                "not available here, or no backend to time is usable on it.",
        trigger="attnkit tune --device cuda without a CUDA GPU (or torch without CUDA); a device "
                "other than cuda or cpu; --backends naming only backends that do not run here.",
        situations=["Running tune on a laptop without a GPU.", "A CPU-only torch build on a GPU machine."],
        solutions=["Run it on the GPU machine the profile is for.",
                   "Use --device cpu --quick for a smoke run (tiny shapes; a CPU profile)."],
        before="attnkit tune --device cuda      # on a CPU-only machine",
        after="attnkit tune --device cpu --quick --out /tmp/cpu-profile.json",
        related=("AK212",),
    ),
]
