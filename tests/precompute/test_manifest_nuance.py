"""The optional nuanced-retrieval manifest fields: validated, kept in the items' metadata in the
store (no schema change), and old manifests unaffected."""

import json

import duckdb
import pytest

from precompute.inputs.manifest import ManifestError, load_manifest
from precompute.batch.writer import StoreWriter
from tests.precompute.helpers import make_dataset


@pytest.fixture
def videos(tmp_path):
    make_dataset(tmp_path, n=3)
    return tmp_path


def jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_fields_reach_the_items_metadata_in_the_store(videos, tmp_path):
    rows = [{"id": "a", "video": "v0.mkv", "captions": ["opening a door"], "negatives": ["closing a door"],
             "chiral_group": "door", "chiral_action": "opening"},
            {"id": "b", "video": "v1.mkv", "captions": ["a dog"], "negatives": ["a dog, not on grass"],
             "negatives_kind": "negated"},
            {"id": "c", "video": "v2.mkv", "captions": ["closing a door"], "chiral_group": "door",
             "chiral_action": "closing"}]
    man = load_manifest(jsonl(videos / "m.jsonl", rows))
    w = StoreWriter(tmp_path / "s.duckdb")
    w.put_dataset("d", man)
    w.close()
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    md = [json.loads(m) for (m,) in con.execute("SELECT metadata FROM items ORDER BY idx").fetchall()]
    con.close()
    assert (md[0]["chiral_group"], md[0]["chiral_action"], md[1]["negatives_kind"]) == ("door", "opening", "negated")
    assert "negatives_kind" not in md[0]


def test_csv_with_the_fields_and_empty_cells(videos):
    path = videos / "m.csv"
    path.write_text("id,video,captions,chiral_group,chiral_action\n"
                    "a,v0.mkv,opening a door,door,opening\n"
                    "b,v1.mkv,a dog,,\n")
    man = load_manifest(path)
    assert man.items[0].metadata["chiral_group"] == "door" and man.items[1].metadata["chiral_group"] == ""


@pytest.mark.parametrize("extra,message", [
    ({"negatives_kind": "opposite"}, "must be one of temporal, negated"),
    ({"chiral_group": "door"}, "needs 'chiral_action' too"),
    ({"chiral_action": "opening"}, "needs 'chiral_group' too"),
    ({"chiral_group": ["door"], "chiral_action": "x"}, "must be a non-empty string"),
])
def test_bad_fields_are_named_with_their_line(videos, extra, message):
    path = jsonl(videos / "m.jsonl", [{"id": "a", "video": "v0.mkv", "captions": ["x"], "negatives": ["y"]},
                                      {"id": "b", "video": "v1.mkv", "captions": ["x"], **extra}])
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert f"{path}:2: field" in str(err.value) and message in str(err.value)


def test_negated_kind_needs_negatives(videos):
    path = jsonl(videos / "m.jsonl", [{"id": "a", "video": "v0.mkv", "captions": ["x"], "negatives_kind": "negated"}])
    with pytest.raises(ManifestError, match="'negated' but the item has no negatives"):
        load_manifest(path)


def test_old_manifests_load_as_before(videos):
    man = load_manifest(make_dataset(videos / "old", n=2))
    assert man.items[0].metadata == {"source": "test"}
