"""The interface guards' two assertions, shared by the vLLM and SGLang tiers."""


def assert_tested_version(engine: str, installed: str, tested: str, extra: str) -> None:
    assert installed == tested, (
        f"{engine} {installed} is installed; attnkit's plugin is tested with {tested} "
        f"(pyproject's {extra} extra): run the {engine} tier and update both")


def assert_interface_unchanged(engine: str, found: list[str]) -> None:
    assert not found, f"{engine}'s interface that attnkit's plugin uses changed:\n" + "\n".join(found)
