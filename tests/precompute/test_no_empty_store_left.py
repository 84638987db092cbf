"""A command that fails or has nothing to do leaves no new, empty store behind (a mistyped --store
must not become a file the next command trusts)."""

import json

from precompute.cli import main
from tests.stores import write_store


def _text_manifest(path, n=4):
    path.write_text("".join(json.dumps({"id": f"s{i}", "captions": [f"a dog runs {i}"]}) + "\n" for i in range(n)))
    return path


def test_papers_map_with_a_mistyped_store_creates_nothing(tmp_path, capsys):
    write_store(tmp_path / "store.duckdb")
    typo = tmp_path / "stroe.duckdb"
    assert main(["papers", "map", "--store", str(typo), "vis", "VideoMAEv2-H"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(typo) in err and "does not exist" in err
    assert not typo.exists()


def test_a_precompute_refused_at_model_load_leaves_no_store(tmp_path, capsys, monkeypatch):
    from precompute.batch import runner
    from precompute.synthetic import tiny_models

    tiny_models.build_bert(tmp_path / "bert", layers=1)

    def refuse(self, spec, modality):
        raise ValueError(f"{spec}: the weights cannot be loaded")

    monkeypatch.setattr(runner.Precompute, "load_model", refuse)
    store = tmp_path / "new.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(_text_manifest(tmp_path / "t.jsonl")),
                 "--dataset", "t", "--model", str(tmp_path / "bert"), "--captions", "1", "--quiet"]) == 2
    assert "the weights cannot be loaded" in capsys.readouterr().err
    assert not store.exists() and not list(tmp_path.glob("new.duckdb*"))


def test_a_refused_precompute_keeps_an_existing_store(tmp_path, capsys, monkeypatch):
    from precompute.batch import runner
    from precompute.synthetic import tiny_models

    tiny_models.build_bert(tmp_path / "bert", layers=1)
    store = tmp_path / "s.duckdb"
    write_store(store)
    before = store.stat().st_size

    def refuse(self, spec, modality):
        raise ValueError("no")

    monkeypatch.setattr(runner.Precompute, "load_model", refuse)
    assert main(["precompute", "--store", str(store), "--manifest", str(_text_manifest(tmp_path / "t.jsonl")),
                 "--dataset", "t", "--model", str(tmp_path / "bert"), "--captions", "1", "--quiet"]) == 2
    assert store.exists() and store.stat().st_size >= before
    assert main(["runs", "--store", str(store)]) == 0  # the store still opens, its runs listed


def test_reversed_videos_of_text_models_only_does_nothing_and_creates_no_store(tmp_path, capsys):
    from precompute.synthetic import tiny_models

    tiny_models.build_bert(tmp_path / "bert", layers=1)
    store = tmp_path / "new.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(_text_manifest(tmp_path / "t.jsonl")),
                 "--dataset", "t", "--model", str(tmp_path / "bert"), "--captions", "1", "--variant", "reversed",
                 "--quiet"]) == 0
    assert "text has no reversed variant, nothing to do" in capsys.readouterr().err
    assert not store.exists()
