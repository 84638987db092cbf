import pytest

from precompute.synthetic import tiny_models


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Every tiny random model, saved with save_pretrained; dict name -> folder path (str)."""
    root = tmp_path_factory.mktemp("models")
    return {name: str(build(root / name)) for name, build in tiny_models.BUILDERS.items()}
