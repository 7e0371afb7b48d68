"""Interface guard: what attnkit's SGLang plugin uses of SGLang is still there, in the tested version."""
from attnkit.integrations import sglang as plugin
from attnkit.integrations.sglang import interface
from guards import assert_interface_unchanged, assert_tested_version


def test_sglang_is_the_tested_version():
    assert_tested_version("SGLang", interface.version(), plugin.TESTED_VERSIONS["sglang"], "sglang")


def test_sglang_interface_the_plugin_uses_is_unchanged():
    assert_interface_unchanged("SGLang", interface.check())
