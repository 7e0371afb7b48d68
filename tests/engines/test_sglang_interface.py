"""Interface guard: what attnkit's SGLang plugin uses of SGLang is still there, in the tested version."""
from attnkit.integrations import sglang as plugin
from attnkit.integrations.sglang import interface


def test_sglang_is_the_tested_version():
    assert interface.version() == plugin.TESTED_VERSIONS["sglang"], (
        f"SGLang {interface.version()} is installed; attnkit's plugin is tested with "
        f"{plugin.TESTED_VERSIONS['sglang']} (pyproject's sglang extra): run the SGLang tier and "
        "update both")


def test_sglang_interface_the_plugin_uses_is_unchanged():
    found = interface.check()
    assert not found, "SGLang's attention interface changed:\n" + "\n".join(found)
