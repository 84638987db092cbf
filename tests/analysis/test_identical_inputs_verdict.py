"""A run whose every layer, the first included, puts all items at one point received one input for
every item (the demo's ImageNet CNN on Test of Time: one frame per video, ``round(linspace(0, T−1, 1))``
is frame 0, and every video opens on the same black frame). Its verdict line says so, with the item
count and the run's n_f or n_c from the store, and what to check; a class-token model whose layer 0
alone is one point, or a model whose later layers collapse, keeps its own wording."""

import duckdb
import numpy as np
import pytest

from analysis.studies import analyze_store
from analysis.views.verdicts import verdicts
from precompute.synthetic.store import write_run

N, D, L = 40, 12, 4


def quiet(_msg):
    pass


def _latent_layers(rng, z, n_layers):
    """``(n_layers, N, D)`` layers that each carry the shared latent ``z`` with noise."""
    return np.stack([z @ rng.normal(size=(z.shape[1], D)) + 0.3 * rng.normal(size=(N, D))
                     for _ in range(n_layers)])


def _one_point_per_layer(rng, n_layers):
    """``(n_layers, N, D)``: every item at the same (non-zero) point of each layer, another point per
    layer, as a model gives for identical inputs."""
    return np.broadcast_to(rng.normal(size=(n_layers, 1, D)), (n_layers, N, D)).copy()


def _store(tmp_path, vid, txt, *, vid_modality="video", n_frames=1, n_captions=1, image_mode=None):
    """A store with the vision run ``vid`` and the text run ``txt`` (trained models, so their signals
    vote), analysed as ``layerscope analyze`` does."""
    path = tmp_path / "s.duckdb"
    if vid is not None:
        write_run(path, "v", vid.astype(np.float32), model="vid", modality=vid_modality, n_frames=n_frames)
    write_run(path, "t", txt.astype(np.float32), model="txt", modality="text", n_captions=n_captions)
    con = duckdb.connect(str(path))
    con.execute("UPDATE models SET random_init = false")
    if image_mode is not None:
        con.execute("UPDATE runs SET image_mode = ? WHERE run_id = 'v'", [image_mode])
    con.close()
    analyze_store(path, metrics=("mutual_knn",), n_boot=10, k=5, seed=0, log=quiet)
    return path


def _lines(path) -> dict:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {v["model"]: (v["verdict"], v["sentence"]) for v in verdicts(con, "synthetic")}
    finally:
        con.close()


@pytest.mark.parametrize("modality", ["video", "image"])
def test_one_frame_per_video_on_a_constant_first_frame_names_the_sampling_and_the_fix(tmp_path, modality):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(N, 6))
    path = _store(tmp_path, _one_point_per_layer(rng, L), _latent_layers(rng, z, 3), vid_modality=modality)
    v, line = _lines(path)["vid"]
    assert v.status == "none" and v.layer is None
    assert line.startswith("vid: no layer can be recommended — ")
    assert f"every layer, the first included, maps all {N} items to one point" in line
    assert "the model received the same input for every item" in line
    # n_f = 1 from the run's settings: round(linspace(0, T−1, 1)) = [0], the first frame
    assert "1 frame per video" in line and "round(linspace(0, T−1, n_f))" in line
    assert "the first frame" in line and "--frames" in line
    assert v.undefined  # the stored fields still list every curve that could not vote


def test_several_frames_per_video_name_n_f_and_never_claim_the_first_frame_alone(tmp_path):
    rng = np.random.default_rng(1)
    z = rng.normal(size=(N, 6))
    path = _store(tmp_path, _one_point_per_layer(rng, L), _latent_layers(rng, z, 3), n_frames=4)
    _, line = _lines(path)["vid"]
    assert f"maps all {N} items to one point" in line and "4 frames per video" in line
    assert "round(linspace(0, T−1, n_f))" in line and "first frame" not in line


def test_an_image_model_on_the_first_frame_only_names_the_image_mode(tmp_path):
    rng = np.random.default_rng(2)
    z = rng.normal(size=(N, 6))
    path = _store(tmp_path, _one_point_per_layer(rng, L), _latent_layers(rng, z, 3), vid_modality="image",
                  n_frames=4, image_mode="first")
    _, line = _lines(path)["vid"]
    assert f"maps all {N} items to one point" in line
    assert "--image-mode first" in line and "first frame" in line and "--image-mode frames" in line


def test_a_text_run_with_every_layer_one_point_says_its_captions_gave_one_point(tmp_path):
    rng = np.random.default_rng(3)
    z = rng.normal(size=(N, 6))
    path = _store(tmp_path, _latent_layers(rng, z, L), _one_point_per_layer(rng, 3), n_captions=2)
    v, line = _lines(path)["txt"]
    assert v.status == "none"
    assert f"every layer, the first included, maps all {N} items to one point" in line
    assert "2 captions per item" in line and "gave one point" in line
    assert "frame" not in line


def test_a_class_token_model_whose_layer_0_alone_is_one_point_keeps_its_verdict(tmp_path):
    """Layer 0 of a class-token model is the class embedding before any attention: one point for every
    input. Its other layers differ by item, so nothing says its inputs were identical."""
    rng = np.random.default_rng(4)
    z = rng.normal(size=(N, 6))
    V = _latent_layers(rng, z, L)
    V[0] = V[0, :1]
    path = _store(tmp_path, V, _latent_layers(rng, z, 3))
    v, line = _lines(path)["vid"]
    assert v.status != "none" and v.layer is not None and v.layer >= 1
    assert "one point" not in line and "same input" not in line and "frame" not in line


def test_later_layers_collapsing_over_a_varied_first_layer_never_claim_identical_inputs(tmp_path):
    """The items differ at layer 0 and the model maps them all to one point afterwards: the inputs were
    not one, so the line keeps saying that every curve is undefined on degenerate layers."""
    rng = np.random.default_rng(5)
    z = rng.normal(size=(N, 6))
    V = _one_point_per_layer(rng, L)
    V[0] = rng.normal(size=(N, D))
    path = _store(tmp_path, V, _latent_layers(rng, z, 3))
    v, line = _lines(path)["vid"]
    assert v.status == "none"
    assert "every curve is undefined" in line and "its layers are degenerate" in line
    assert "one point" not in line and "same input" not in line and "frame" not in line


def test_every_layer_zero_is_no_evidence_of_identical_inputs(tmp_path):
    """All-zero layers are collapsed too, but they say nothing of the input (an extraction that wrote
    zeros looks the same): no claim about the inputs."""
    rng = np.random.default_rng(6)
    z = rng.normal(size=(N, 6))
    path = _store(tmp_path, np.zeros((L, N, D)), _latent_layers(rng, z, 3))
    v, line = _lines(path)["vid"]
    assert v.status == "none" and "same input" not in line and "frame" not in line


def test_the_report_carries_the_same_line(tmp_path):
    from precompute.cli import main

    rng = np.random.default_rng(7)
    z = rng.normal(size=(N, 6))
    path = _store(tmp_path, _one_point_per_layer(rng, L), _latent_layers(rng, z, 3))
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(path), "--out", str(out)]) == 0
    md = out.with_suffix(".md").read_text()
    assert f"maps all {N} items to one point" in md and "1 frame per video" in md
    assert f"maps all {N} items to one point" in out.read_text()
