"""Names a user gives (models, datasets, tags) are checked before anything is stored: no control
characters, no side syntax in a model name, a bounded length, no two models under one name; and
two models shown as one paper name are pointed out."""

import json

import pytest

from analysis.storage.names import MAX_NAME, MAX_TAG
from analysis.storage.store import list_runs
from precompute.cli import main
from tests.helpers import one_line_error as _one_line
from tests.stores import write_store


def _manifest(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": f"s{i}", "captions": [f"a dog runs {i}"]}) + "\n" for i in range(4)))
    return path


@pytest.mark.parametrize("flags, needle", [
    (["--dataset", "", "--name", "m"], "--dataset '' is not a dataset name"),
    (["--dataset", "d\nx", "--name", "m"], "control character"),
    (["--dataset", "d", "--name", "two\nlines"], "--name 'two\\nlines' is not a model name"),
    (["--dataset", "d", "--name", "l [text]"], "how LayerScope names a dual encoder's sides"),
    (["--dataset", "d", "--name", "x" * (MAX_NAME + 1)], f"at most {MAX_NAME}"),
])
def test_a_bad_name_is_refused_before_a_store_is_made(tmp_path, capsys, flags, needle):
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(_manifest(tmp_path)), "--model",
                 str(tmp_path / "no-model-needed"), "--captions", "1", "--quiet", *flags]) == 2
    _one_line(capsys, needle)
    assert not store.exists()


def test_importing_embeddings_under_a_side_like_name_is_refused_and_the_store_keeps_its_runs(tmp_path, capsys):
    """A one-sided model stored as ``alpha [text]`` would be read as the caption side of ``alpha``."""
    import numpy as np

    store = tmp_path / "s.duckdb"
    write_store(store)
    before = sorted((r["run_id"], r["model"]) for r in list_runs(store))
    np.save(tmp_path / "x.npy", np.ones((2, 4, 3), dtype=np.float32))
    assert main(["import-embeddings", "--store", str(store), "--manifest", str(_manifest(tmp_path)), "--dataset", "d",
                 "--name", "alpha [text]", "--modality", "text", "--manifest-order", str(tmp_path / "x.npy")]) == 2
    _one_line(capsys, "--name 'alpha [text]' is not a model name", "how LayerScope names a dual encoder's sides",
              "'alpha-text'")
    assert sorted((r["run_id"], r["model"]) for r in list_runs(store)) == before


def test_merging_a_store_with_a_side_like_model_name_is_refused_before_the_target_is_touched(tmp_path, capsys):
    """A store written before names were checked may hold ``alpha [text]``: merge names it and the rename."""
    src, target = tmp_path / "old.duckdb", tmp_path / "t.duckdb"
    write_store(src, names={"txt": "alpha [text]"})
    write_store(target, dataset="other")
    before = sorted((r["run_id"], r["model"], r["dataset"]) for r in list_runs(target))
    assert main(["merge", "--store", str(target), str(src)]) == 2
    _one_line(capsys, "model 'alpha [text]' cannot be merged", "how LayerScope names a dual encoder's sides",
              f"layerscope runs rename --store {src} 'alpha [text]' NEW")
    assert sorted((r["run_id"], r["model"], r["dataset"]) for r in list_runs(target)) == before
    assert main(["merge", "--store", str(tmp_path / "new.duckdb"), str(src)]) == 2
    assert not (tmp_path / "new.duckdb").exists()


def test_two_models_under_one_name_are_refused_before_either_runs(tmp_path, capsys):
    from precompute.synthetic import tiny_models

    tiny_models.build_bert(tmp_path / "a", layers=1, seed=1)
    tiny_models.build_bert(tmp_path / "b", layers=1, seed=2)
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(_manifest(tmp_path)), "--dataset", "d",
                 "--model", str(tmp_path / "a"), "--name", "same", "--model", str(tmp_path / "b"), "--name", "same",
                 "--captions", "1", "--quiet"]) == 2
    _one_line(capsys, "two models would be stored as 'same'")
    assert not store.exists()


def test_a_tag_longer_than_a_word_of_the_listing_is_refused(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)
    assert main(["runs", "tag", "--store", str(store), ids["vis"], "x" * 10_000]) == 2
    _one_line(capsys, f"at most {MAX_TAG}")
    assert all(not r["tags"] for r in list_runs(store))
    assert main(["runs", "tag", "--store", str(store), ids["vis"], "x" * MAX_TAG]) == 0


def test_renaming_to_a_name_with_a_newline_is_refused(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store)
    assert main(["runs", "rename", "--store", str(store), "vis", "a\nb"]) == 2
    _one_line(capsys, "control character")
    assert {r["model"] for r in list_runs(store)} == {"vis", "txt"}


def test_a_second_model_shown_as_the_same_paper_name_is_pointed_out(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store)
    assert main(["papers", "map", "--store", str(store), "vis", "VideoMAEv2-H"]) == 0
    assert "note:" not in capsys.readouterr().err
    assert main(["papers", "map", "--store", str(store), "txt", "VideoMAEv2-H"]) == 0
    _one_line(capsys, "note:", "vis", "VideoMAEv2-H too")
