"""Issue #31: `layerscope merge` keeps the mapping of store names to the papers' names
(`layerscope papers map`); a name mapped to two different paper names is refused, naming it."""

from analysis.storage.published import paper_names, set_paper_name
from analysis.storage.store import connect
from precompute.cli import main
from tests.stores import write_store


def shard_stores(tmp_path):
    paths = [tmp_path / f"shard{i}.duckdb" for i in range(2)]
    for i, p in enumerate(paths):
        write_store(p, n=8, shard=(i, 2))
    return paths


def map_names(path, mapping):
    con = connect(path, read_only=False)
    try:
        for (kind, name), paper in mapping.items():
            set_paper_name(con, kind, name, paper)
    finally:
        con.close()


def names_of(path):
    con = connect(path, read_only=True)
    try:
        return paper_names(con)
    finally:
        con.close()


def test_the_mapping_of_every_source_survives_a_merge(tmp_path, capsys):
    a, b = shard_stores(tmp_path)
    map_names(a, {("model", "vis"): "VideoMAEv2-H", ("dataset", "toy"): "VATEX"})
    map_names(b, {("model", "txt"): "Gemma-2-9b-it", ("dataset", "toy"): "VATEX"})  # the same dataset mapping: kept
    merged = tmp_path / "merged.duckdb"
    assert main(["merge", "--store", str(merged), str(a), str(b)]) == 0
    assert names_of(merged) == {"model": {"vis": "VideoMAEv2-H", "txt": "Gemma-2-9b-it"},
                                "dataset": {"toy": "VATEX"}}
    # a rerun (every run already there) leaves the mapping as it is
    assert main(["merge", "--store", str(merged), str(a), str(b)]) == 0
    assert names_of(merged)["model"] == {"vis": "VideoMAEv2-H", "txt": "Gemma-2-9b-it"}


def test_a_model_mapped_to_two_paper_names_is_refused_naming_it(tmp_path, capsys):
    a, b = shard_stores(tmp_path)
    map_names(a, {("model", "vis"): "VideoMAEv2-H"})
    map_names(b, {("model", "vis"): "DINOv2-G"})
    merged = tmp_path / "merged.duckdb"
    assert main(["merge", "--store", str(merged), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "model 'vis'" in err and "'DINOv2-G'" in err and "'VideoMAEv2-H'" in err and str(b) in err
    # the first source's steps are whole; the conflicting one changed nothing
    assert names_of(merged)["model"] == {"vis": "VideoMAEv2-H"}
