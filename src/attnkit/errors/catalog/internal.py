"""9xx: internal errors (a bug in attnkit, not in the user's input)."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK900", "Internal error",
        meaning="attnkit reached a state its own checks say cannot happen. This is a bug in attnkit, "
                "not in your model, device or flags.",
        trigger="An unexpected exception inside attnkit, caught at the command-line boundary.",
        situations=["A model config shape attnkit has not seen before exercises an untested path."],
        solutions=["Re-run with --debug to see the full traceback.",
                   "Report it with the command line and the model's config.json."],
        before="attnkit plan ./my-model",
        after="attnkit plan ./my-model --debug   # then report the traceback",
        related=(),
    ),
]
