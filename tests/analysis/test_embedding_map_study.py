"""The embedding-map study in analyze: which maps it computes (last layer, recommended layer, named
layers, shared-space pairs), caching (a second analyze reuses), degenerate layers stored with a
reason, the cap, and `layerscope map` for another layer."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.methods.embedding_map import umap_coords
from analysis.storage.store import load_run
from analysis.studies import analyze_store
from analysis.studies import embedding_map as EM
from precompute.cli import main
from precompute.synthetic.store import write_run

N, D = 30, 8


def quiet(_msg):
    pass


def _stack(seed, layers=3, d=D):
    rng = np.random.default_rng(seed)
    z = np.random.default_rng(99).normal(size=(N, 4))  # one latent: the runs agree
    return np.stack([z @ rng.normal(size=(4, d)) + 0.3 * rng.normal(size=(N, d)) for _ in range(layers)])


def _set_config(path, run_id, **fields):
    """Add fields to a run's config as precompute writes them for named layers."""
    con = duckdb.connect(str(path))
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][0])
    cfg.update(fields)
    con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(cfg), run_id])
    con.close()


def _maps(path):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {r["subject"]: r for r in R.read_studies(con, study="embedding_map")}
    finally:
        con.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """vid (video, 3 layers, last layer collapsed), txt (text), mllm (video + text, 3 layers each,
    one width: a shared space), clip (video 4 layers of width 8 + text 3 layers of width 6, the last
    layer of each named 'joint', the video one 6 wide and zero-padded: a dual encoder)."""
    path = tmp_path_factory.mktemp("maps") / "s.duckdb"
    V = _stack(1)
    V[2] = V[2][0]  # collapsed last layer: every item on one point
    write_run(path, "vid", V, model="vid", modality="video", n_frames=2)
    write_run(path, "txt", _stack(2), model="txt", modality="text", n_captions=1)
    write_run(path, "mllm-v", _stack(3), model="mllm", modality="video", n_frames=2)
    write_run(path, "mllm-t", _stack(4), model="mllm", modality="text", n_captions=1)
    C = _stack(5, layers=4)
    C[3, :, 6:] = 0  # the joint layer is 6 wide, zero-padded to the run's 8
    write_run(path, "clip-v", C, model="clip", modality="video", n_frames=1)
    write_run(path, "clip-t", _stack(6, layers=3, d=6), model="clip", modality="text", n_captions=1)
    _set_config(path, "clip-v", layer_names={"3": "joint"}, layer_dims={"3": 6})
    _set_config(path, "clip-t", layer_names={"2": "joint"})
    first = analyze_store(path, k=3, n_boot=0, log=quiet)
    second = analyze_store(path, k=3, n_boot=0, log=quiet)
    return path, first, second


def test_analyze_computes_the_default_maps_once_and_reuses_them(store):
    path, first, second = store
    maps = _maps(path)
    n = len(maps)
    assert first["computed_by_study"]["embedding_map"] == n
    assert "embedding_map" not in second["computed_by_study"] and second["reused_by_study"]["embedding_map"] == n
    # every single run at its last numbered layer
    for subject in ("vid · video L2", "txt · text L2", "mllm · video L2", "mllm · text L2", "clip · video L2",
                    "clip · text L1"):
        assert maps[subject]["payload"]["why"] == "last numbered layer", subject
    # named layers, and the shared spaces: the MLLM's last layer on both sides, the dual encoder's joint layers
    assert maps["clip · video L3"]["payload"]["why"] == "named layer 'joint'"
    assert maps["clip · video L3 + text L2"]["payload"]["kind"] == "pair"
    assert maps["mllm · video L2 + text L2"]["payload"]["kind"] == "pair"


def test_a_stored_map_is_the_umap_of_that_layer_with_the_seed(store):
    path, _, _ = store
    p = _maps(path)["txt · text L2"]["payload"]
    con = duckdb.connect(str(path), read_only=True)
    X = load_run(con, "txt")[2]
    con.close()
    want = umap_coords(X, seed=0).coords
    np.testing.assert_allclose(np.c_[p["x"], p["y"]], want, atol=1e-4)  # stored rounded to 5 decimals
    assert p["items"] == list(range(N)) and p["sampled"] is False and p["n_neighbors"] == 15


def test_a_pair_map_holds_both_sides_of_every_item(store):
    path, _, _ = store
    p = _maps(path)["mllm · video L2 + text L2"]["payload"]
    assert len(p["x"]) == 2 * N and p["side"] == [0] * N + [1] * N
    assert p["sides"] == ["video", "text"] and p["run_ids"] == ["mllm-v", "mllm-t"]
    assert _maps(path)["clip · video L3 + text L2"]["payload"]["layer_names"] == ["joint", "joint"]


def test_a_collapsed_layer_is_stored_with_the_reason_not_a_picture(store):
    path, _, _ = store
    p = _maps(path)["vid · video L2"]["payload"]
    assert "x" not in p
    assert "collapsed" in p["reason"] and "vid video layer 2" in p["reason"]


def test_default_maps_are_capped_with_a_note(tmp_path):
    path = tmp_path / "s.duckdb"
    write_run(path, "a", _stack(1), model="a", modality="video", n_frames=1)
    write_run(path, "b", _stack(2), model="b", modality="text", n_captions=1)
    out = analyze_store(path, k=3, n_boot=0, maps=1, log=quiet)
    assert out["computed_by_study"]["embedding_map"] == 1
    assert any("left out past the cap of 1" in n and "layerscope map" in n for n in out["notes"])
    # the cap is a stored setting: the next analyze keeps it; --maps 0 computes no default map
    assert analyze_store(path, log=quiet)["settings"]["maps"] == 1
    path0 = tmp_path / "none.duckdb"
    write_run(path0, "a", _stack(1), model="a", modality="video", n_frames=1)
    out = analyze_store(path0, k=3, n_boot=0, maps=0, log=quiet)
    assert out["computed_by_study"].get("embedding_map", 0) == 0


def test_layerscope_map_adds_a_layer_and_analyze_keeps_it(store, tmp_path, capsys):
    import shutil

    path = tmp_path / "copy.duckdb"
    shutil.copy(store[0], path)
    assert main(["map", "--store", str(path), "--dataset", "synthetic", "--model", "txt", "--layer", "0"]) == 0
    assert "map: txt · text L0 computed" in capsys.readouterr().out
    assert _maps(path)["txt · text L0"]["payload"]["requested"] is True
    assert main(["map", "--store", str(path), "--dataset", "synthetic", "--model", "clip", "--layer", "joint",
                 "--side", "both"]) == 0
    assert "clip · video L3 + text L2 already stored" in capsys.readouterr().out
    out = analyze_store(path, k=3, n_boot=0, log=quiet)
    assert "embedding_map" not in out["computed_by_study"]
    assert out["reused_by_study"]["embedding_map"] == len(_maps(path))


@pytest.mark.parametrize("args, message", [
    (["--model", "nope", "--layer", "1"], "no done run of model 'nope'"),
    (["--model", "txt", "--layer", "7"], "txt (text) has layers 0..2, not 7"),
    (["--model", "txt", "--layer", "joint"], "layer 'joint' of txt is neither a number nor one of its named layers"),
    (["--model", "txt", "--layer", "1", "--side", "video"], "model 'txt' has no video run"),
    (["--model", "clip", "--layer", "1", "--side", "both"], "clip's video layer 1 and text layer 1 have widths 8 and 6"),
])
def test_layerscope_map_names_what_is_wrong(store, args, message, capsys):
    assert main(["map", "--store", str(store[0]), "--dataset", "synthetic", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_demo_store_has_maps(demo_like):
    con = duckdb.connect(str(demo_like), read_only=True)
    rows = R.read_studies(con, study="embedding_map")
    con.close()
    drawn = [r for r in rows if not r["payload"]["reason"]]
    assert {r["dataset"] for r in drawn} == {"moving_shapes", "test_of_time"}
    for r in drawn:
        assert len(r["payload"]["x"]) == r["payload"]["n_items"] * len(r["payload"]["run_ids"])


def test_large_datasets_are_mapped_on_a_seeded_sample_of_items(tmp_path, monkeypatch):
    path = tmp_path / "s.duckdb"
    write_run(path, "a", _stack(1), model="a", modality="video", n_frames=1)
    monkeypatch.setattr(EM, "MAX_POINTS", 12)
    analyze_store(path, k=3, n_boot=0, log=quiet)
    p = _maps(path)["a · video L2"]["payload"]
    assert p["sampled"] is True and p["n_items"] == N and len(p["items"]) == len(p["x"]) == 12
    assert p["items"] == sorted(set(p["items"])) and max(p["items"]) < N
    con = duckdb.connect(str(path), read_only=True)
    X = load_run(con, "a")[2][p["items"]]
    con.close()
    np.testing.assert_allclose(np.c_[p["x"], p["y"]], umap_coords(X, seed=0).coords, atol=1e-4)


def test_map_of_a_text_only_store_needs_no_video_run(tmp_path, capsys):
    from tests.stores import write_store

    store = tmp_path / "t.duckdb"
    write_store(store, models=("txt",))  # no analyze first: `map` is what a newcomer tries
    for side in ("text", "auto"):
        assert main(["map", "--store", str(store), "--dataset", "toy", "--model", "txt", "--layer", "1",
                     "--side", side]) == 0
        out = capsys.readouterr()
        assert "txt · text L1" in out.out and "video" not in out.out + out.err
    assert main(["map", "--store", str(store), "--dataset", "toy", "--model", "txt", "--layer", "1",
                 "--side", "video"]) == 2
    assert "has no video run on dataset 'toy'; it has a text run: pass --side text" in capsys.readouterr().err


def test_every_pair_map_is_also_drawn_by_pca_and_tsne(store):
    from analysis.methods.embedding_map import pca_coords, tsne_coords

    path, _, _ = store
    maps = _maps(path)
    umap_pairs = [s for s, r in maps.items() if r["payload"]["kind"] == "pair" and r["payload"].get("method") == "umap"]
    assert umap_pairs
    for s in umap_pairs:
        for method in ("pca", "tsne"):
            p = maps[f"{s} · {method}"]["payload"]
            assert p["method"] == method and p["kind"] == "pair" and len(p["x"]) == 2 * N
    # the stored PCA map is the PCA of both sides' layers stacked (video side first)
    p = maps["mllm · video L2 + text L2 · pca"]["payload"]
    con = duckdb.connect(str(path), read_only=True)
    V, T = load_run(con, "mllm-v")[2], load_run(con, "mllm-t")[2]
    con.close()
    np.testing.assert_allclose(np.c_[p["x"], p["y"]], pca_coords(np.vstack([V, T])).coords, atol=1e-4)
    p = maps["mllm · video L2 + text L2 · tsne"]["payload"]
    np.testing.assert_allclose(np.c_[p["x"], p["y"]], tsne_coords(np.vstack([V, T]), seed=0).coords, atol=1e-4)
    # single-run maps stay UMAP only
    assert "txt · text L2 · pca" not in maps


def test_layerscope_map_takes_a_method(store, tmp_path, capsys):
    import shutil

    path = tmp_path / "copy.duckdb"
    shutil.copy(store[0], path)
    assert main(["map", "--store", str(path), "--dataset", "synthetic", "--model", "txt", "--layer", "1",
                 "--method", "pca"]) == 0
    assert "map: txt · text L1 · pca computed" in capsys.readouterr().out
    p = _maps(path)["txt · text L1 · pca"]["payload"]
    assert p["method"] == "pca" and p["requested"] is True
    out = analyze_store(path, k=3, n_boot=0, log=quiet)  # kept current, not recomputed
    assert "embedding_map" not in out["computed_by_study"]


def test_large_datasets_get_no_default_tsne_but_a_note(monkeypatch):
    from analysis.studies.context import DatasetRuns

    run = {"run_id": "v", "model": "m", "modality": "video", "n_frames": 1, "n_captions": None, "variant": "original",
           "dim": 8, "n_layers": 3, "config": {}, "n_items": N}
    text = {**run, "run_id": "t", "modality": "text", "n_frames": None, "n_captions": 1}
    d = DatasetRuns("synthetic", [run, text], N)
    specs, notes = EM.default_maps(d, {})
    assert {s.method for s in specs if len(s.run_ids) == 2} == {"umap", "pca", "tsne"} and not notes
    monkeypatch.setattr(EM, "TSNE_DEFAULT_ITEMS", N - 1)
    specs, notes = EM.default_maps(d, {})
    assert {s.method for s in specs if len(s.run_ids) == 2} == {"umap", "pca"}
    assert any("--method tsne" in n for n in notes)
