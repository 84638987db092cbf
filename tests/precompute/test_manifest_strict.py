"""Manifests that used to be misread silently or with an unclear error: strict CSV, BOM, encoding, folders."""

import json

import pytest

from precompute.cli import main
from precompute.inputs.manifest import ManifestError, load_manifest
from tests.precompute.helpers import make_dataset


def cli(*args):
    return main([str(a) for a in args])


@pytest.fixture
def videos(tmp_path):
    make_dataset(tmp_path, n=3)  # v0.mkv .. v2.mkv next to the manifests written below
    return tmp_path


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return path


def test_unquoted_comma_in_a_caption_is_an_error_with_its_line(videos):
    path = write(videos / "m.csv", "id,video,captions\n"
                                   "a,v0.mkv,a dog runs\n"
                                   "b,v1.mkv,a cat, then a dog\n")
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert f"{path}:3: 4 fields where the header has 3" in str(err.value)


def test_unterminated_quote_does_not_swallow_the_next_row(videos):
    path = write(videos / "m.csv", "id,video,captions\n"
                                   "a,v0.mkv,\"a dog runs\n"
                                   "b,v1.mkv,a cat\n"
                                   "c,v2.mkv,a bird\n")
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert f"{path}:2:" in str(err.value)


def test_quote_closed_on_a_later_line_is_an_error_too(videos):
    path = write(videos / "m.csv", "id,video,captions\n"
                                   "a,v0.mkv,\"a dog runs\n"
                                   "b,v1.mkv,a cat\"\n"
                                   "c,v2.mkv,a bird\n")
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert f"{path}:2: one record spans lines 2-3" in str(err.value)


def test_quoted_comma_and_a_bom_are_fine(videos):
    path = write(videos / "m.csv", "id,video,captions\n"
                                   "a,v0.mkv,\"a cat, then a dog | a pet\"\n"
                                   "b,v1.mkv,a cat\n", encoding="utf-8-sig")
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    m = load_manifest(path)
    assert [it.item_id for it in m.items] == ["a", "b"]
    assert m.items[0].captions == ["a cat, then a dog", "a pet"]
    jl = write(videos / "m.jsonl", json.dumps({"id": "a", "video": "v0.mkv", "captions": ["x"]}) + "\n",
               encoding="utf-8-sig")
    assert [it.item_id for it in load_manifest(jl).items] == ["a"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_non_utf8_manifest_names_the_line(videos, capsys, suffix):
    text = ("id,video,captions\na,v0.mkv,caf\u00e9\n" if suffix == ".csv"
            else json.dumps({"id": "a", "video": "v0.mkv", "captions": ["caf\u00e9"]}, ensure_ascii=False) + "\n")
    path = write(videos / f"m{suffix}", text, encoding="latin-1")
    line = 2 if suffix == ".csv" else 1
    assert cli("precompute", "--store", videos / "s.duckdb", "--manifest", path, "--dataset", "d",
               "--model", "unused", "--quiet") == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: not UTF-8 text (byte 0xe9" in err and "Traceback" not in err
    assert not (videos / "s.duckdb").exists()


def test_manifest_path_that_is_a_directory(tmp_path, capsys):
    assert cli("precompute", "--store", tmp_path / "s.duckdb", "--manifest", tmp_path, "--dataset", "d",
               "--model", "unused", "--quiet") == 2
    err = capsys.readouterr().err
    assert "is a directory, not a manifest file" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2  # "has 1 problem(s):" and the problem
