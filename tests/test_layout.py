"""pytest puts tests/ on sys.path (rootdir conftest), so a test folder named like a package
shadows that package wherever it is not installed: a tests/triton folder made `import triton`
find the folder (a namespace package) in an environment without Triton, and transformers
then failed on `triton.language` while importing torch._dynamo."""
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
PACKAGES = ("triton", "torch", "transformers", "tokenizers", "numpy", "safetensors", "hypothesis")


def test_no_test_folder_shadows_a_package():
    assert not [name for name in PACKAGES if (TESTS / name).exists()]
