"""A published number is shown only beside its own quantity: DR's Table 1 (mutual k-NN against
Gemma-2-9b-it) never beside a CKA fit or a fit against another text encoder; DR's Fig. 2 offset (in
retrieval accuracy) never beside an offset on another task; a number rounded in the text is cited
as such. Planted store of result rows (tests.stores.write_paper_store) with DR's names mapped."""

import duckdb
import pytest

from analysis.storage import published as P
from analysis.storage import results as R
from analysis.studies.scaling import fit_subject
from analysis.views import paper_figures as pf
from analysis.views.scaling import scaling_view
from precompute.cli import main
from tests.stores import SCALING_GRIDS, put_analysis_version, write_paper_store


def _mapped(tmp_path, dataset="VATEX"):
    path = tmp_path / f"paper-{dataset}.duckdb"
    write_paper_store(path)
    for args in (["vmae", "VideoMAEv2-H"], ["gemma", "Gemma-2-9b-it"], ["--dataset", "mine", dataset]):
        assert main(["papers", "map", "--store", str(path), *args]) == 0
    return path


@pytest.fixture()
def mapped(tmp_path):
    return _mapped(tmp_path)


def _put_fit(path, subject, metric):
    with duckdb.connect(str(path)) as con:
        R.put_study(con, result_id=subject, study="scaling", dataset="mine", subject=subject,
                    params={"metric": metric, "k": 10, "n_boot": 0},
                    payload=fit_subject(None, "vmae-f16", metric, {"k": 10}, SCALING_GRIDS["v|law|mutual_knn"], 0, 0),
                    input_key="x")
        put_analysis_version(con)


def test_table_1_sits_beside_the_mutual_knn_fit_against_its_text_encoder_only(mapped, tmp_path):
    _put_fit(mapped, "vmae|gemma|cka", "cka")
    with duckdb.connect(str(mapped), read_only=True) as con:
        own = scaling_view(con, "mine", "vmae|gemma|mutual_knn")
        cka = scaling_view(con, "mine", "vmae|gemma|cka")
    assert "paper" in own["table"] and own["table"].set_index("parameter").loc["alpha", "paper"] == "0.750"
    assert "paper" not in cka["table"]  # Table 1 fits mutual k-NN, not CKA
    # on PVD (Table 1 rows measured against Gemma-2-9b-it too) a fit against minilm gets no paper column
    pvd = _mapped(tmp_path, "PVD")
    _put_fit(pvd, "vmae|minilm|mutual_knn", "mutual_knn")
    with duckdb.connect(str(pvd), read_only=True) as con:
        other_text = scaling_view(con, "mine", "vmae|minilm|mutual_knn")
        same_text = scaling_view(con, "mine", "vmae|gemma|mutual_knn")
    assert "paper" not in other_text["table"]
    assert same_text["table"].set_index("parameter").loc["alpha", "paper"] == "0.480"


def test_table_1_rows_all_name_their_text_encoder_and_rounded_values_say_so():
    rows = [p for p in P.load_published() if p.paper == "DR" and "Table 1" in p.source]
    assert rows and all(p.setting == "text=Gemma-2-9b-it" for p in rows)
    alpha = next(p for p in rows if (p.model, p.dataset, p.metric) == ("VideoMAEv2-H", "VATEX", "alpha"))
    # Sec. 6 states 0.75; Table 1 gives 0.748: the citation names both
    assert alpha.value == 0.75 and "rounded" in alpha.source and "0.748" in alpha.source


def test_fig2s_published_offset_only_beside_a_retrieval_task(mapped):
    with duckdb.connect(str(mapped)) as con:
        con.execute("INSERT INTO downstream_results (model, task, metric, setting, layer, value, higher_is_better) "
                    "SELECT model, 'text-to-video retrieval', 'r@1', setting, layer, value, higher_is_better "
                    "FROM downstream_results WHERE task = 'k400'")
    with duckdb.connect(str(mapped), read_only=True) as con:
        action = pf.fig2_view(con, "mine", "mutual_knn", "gemma", "k400 · top1")
        retrieval = pf.fig2_view(con, "mine", "mutual_knn", "gemma", "text-to-video retrieval · r@1")
    assert action["published"] == [] and "DR Fig. 2" not in pf.fig2_text(action)
    assert [p["value"] for p in retrieval["published"]] == [0.014]
    # ■ and ● of one image model read the same whole-model result: said
    assert any("share one downstream value" in n for n in action["notes"])


def test_fig2s_image_on_video_points_use_drs_8_frames_when_stored(mapped):
    import numpy as np

    with duckdb.connect(str(mapped)) as con:
        con.execute("INSERT INTO runs (run_id, model, dataset, modality, n_frames, n_captions, variant, image_mode, "
                    "status, n_items, n_done) VALUES ('dino-f16', 'dino', 'mine', 'image', 16, NULL, 'original', "
                    "'frames', 'done', 100, 100)")
        R.put_grid(con, result_id="dino-16-gemma-1", dataset="mine", pair_kind="vision_text", model_a="dino",
                   model_b="gemma", run_a="dino-f16", run_b="gemma-c1", n_frames=16, n_captions=1, n_frames_b=None,
                   metric="mutual_knn", params={"k": 10}, grid=np.full((2, 2), 0.5), best_a=1, best_b=1,
                   best_value=0.5, ci_low=None, ci_high=None, n_boot=0, flags={}, input_key="x")
        put_analysis_version(con)
    with duckdb.connect(str(mapped), read_only=True) as con:
        fv = pf.fig2_view(con, "mine", "mutual_knn", "gemma", "k400 · top1")
    dots = fv["points"][fv["points"]["kind"] == "image_on_video"].set_index("vision")
    assert dots.loc["dino", "n_frames"] == 8 and dots.loc["dino", "alignment"] == pytest.approx(0.18)
