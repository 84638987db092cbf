"""Issue #31: DR Figs. 2, 7 and 11/12 read from a store of planted best cells
(tests.stores.write_paper_store), the published numbers beside the user's once the names are mapped,
and the published table's validation. Expected values come from the planted numbers by hand or
numpy.polyfit, never from the views' own output."""

import duckdb
import numpy as np
import pytest

from analysis.storage import published as P
from analysis.views import paper_figures as pf
from analysis.views.scaling import scaling_view
from precompute.cli import main
from tests.stores import PAPER_DOWNSTREAM, PAPER_VISION, write_paper_store


@pytest.fixture()
def store(tmp_path):
    path = tmp_path / "paper.duckdb"
    write_paper_store(path)
    return path


@pytest.fixture()
def mapped(store):
    """The same store with its names mapped to DR's through the command line."""
    for args in (["vmae", "VideoMAEv2-H"], ["gemma", "Gemma-2-9b-it"], ["--dataset", "mine", "VATEX"]):
        assert main(["papers", "map", "--store", str(store), *args]) == 0
    return store


def _con(path):
    return duckdb.connect(str(path), read_only=True)


def _planted(vision, text, n_c):
    """A model's planted best value at its largest n_f."""
    settings = PAPER_VISION[vision][2]
    return settings[max(settings)][(text, n_c)]


def test_fig7_fit_equals_polyfit_on_the_trained_models_only(store):
    with _con(store) as con:
        fv = pf.fig7_view(con, "mine", "mutual_knn", "gemma")
    trained = [m for m, (_, control, _) in PAPER_VISION.items() if not control]
    x = [_planted(m, "gemma", 1) for m in trained]
    y = [_planted(m, "gemma", 10) for m in trained]
    slope, intercept = np.polyfit(x, y, 1)
    assert fv["n_c"] == (1, 10) and fv["fit"]["n"] == 4
    assert fv["fit"]["slope"] == pytest.approx(slope) and fv["fit"]["intercept"] == pytest.approx(intercept)
    assert fv["fit"]["r"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    pts = fv["points"].set_index("vision")
    assert not pts.loc["rand", "in_fit"] and pts.loc["dino", "n_frames"] == 8
    assert fv["published"] == []  # nothing mapped: no paper number


def test_fig7_without_two_caption_budgets_says_why(tmp_path):
    path = tmp_path / "one.duckdb"
    write_paper_store(path)
    with duckdb.connect(str(path)) as con:
        con.execute("DELETE FROM result_grids WHERE n_captions = 10")
    with _con(path) as con:
        fv = pf.fig7_view(con, "mine", "mutual_knn", "gemma")
    assert fv["points"].empty and "one caption budget" in fv["error"]


def test_fig7_shows_drs_line_beside_once_the_dataset_is_mapped(mapped):
    with _con(mapped) as con:
        fv = pf.fig7_view(con, "mine", "mutual_knn", "gemma")
    pub = {p["metric"]: p["value"] for p in fv["published"]}
    assert pub == {"fig7_slope": 1.6, "fig7_intercept": -0.018, "fig7_r": 0.998} and fv["setting_match"]
    text = pf.fig7_text(fv)
    assert "DR Fig. 7 (published" in text and "y = 1.6x − 0.018" in text
    # the paper's line is beside the fit, not in it
    assert fv["fit"]["slope"] != pytest.approx(1.6, abs=1e-9)


def test_fig11_matrix_cells_carry_the_best_layers(store):
    with _con(store) as con:
        av = pf.fig11_view(con, "mine", "mutual_knn", "smallest")
        big = pf.fig11_view(con, "mine", "mutual_knn", "largest")
    table = av["table"].set_index("vision")
    # planted layers: L(round(100·value) mod 13) / L5
    assert table.loc["vmae", "gemma"] == "0.25 (L12/L5)" and table.loc["dino", "minilm"] == "0.15 (L2/L5)"
    assert av["n_c"] == 1 and big["n_c"] == 10
    assert "collapsed" in big["table"].set_index("vision").loc["rand", "minilm"]


def test_fig11_rank_agreement_by_hand(store):
    with _con(store) as con:
        av = pf.fig11_view(con, "mine", "mutual_knn", "smallest")
    # gemma ranks vmae > vjepa > dino > clip, minilm vjepa > vmae > dino > clip (rand: a control):
    # one discordant pair of six: τ = (5 − 1)/6; ranks (4,3,2,1) and (3,4,2,1): ρ_s = 1 − 6·2/(4·15) = 0.8,
    # and with two raters W = (ρ_s + 1)/2 = 0.9
    (pair,) = av["agreement"]["pairs"]
    assert pair["tau"] == pytest.approx(4 / 6)
    assert av["agreement"]["w"]["w"] == pytest.approx(0.9) and av["agreement"]["w"]["n"] == 4
    assert sorted(av["ranked_models"]) == ["clip", "dino", "vjepa", "vmae"]


def test_fig2_offset_by_hand(store):
    with _con(store) as con:
        fv = pf.fig2_view(con, "mine", "mutual_knn", "gemma", "k400 · top1")
    # only two ● points (dino, clip): any two points lie on a line (here y = 2x + 0.14), so there is
    # no line and no offset to report
    assert fv["offset"]["offset"] is None and "at least 3" in fv["offset"]["error"]
    assert fv["offset"]["line"]["slope"] is None and fv["offset"]["n_reference"] == 2
    pts = fv["points"]
    squares = pts[pts["kind"] == "image_on_image"].set_index("vision")
    assert squares.loc["dino", "alignment"] == pytest.approx(0.14) and squares.loc["dino", "score"] == PAPER_DOWNSTREAM["dino"]
    assert not pts.set_index("vision").loc["rand", "in_fit"]
    assert "at least 3" in pf.fig2_text(fv)


def test_a_store_mapped_to_drs_names_shows_table_1_beside_the_fit(mapped):
    """Issue #31's done-when: DR Table 1's values beside the fitted ones, never in place of them."""
    with _con(mapped) as con:
        sv = scaling_view(con, "mine", "vmae|gemma|mutual_knn")
    rows = {r["parameter"]: r for r in sv["table"].to_dict(orient="records")}
    assert rows["alpha"]["paper"] == "0.750" and rows["s_inf"]["paper"] == "0.410" and rows["beta"]["paper"] == "1.300"
    assert "Table 1" in rows["alpha"]["paper source"]
    assert rows["R²"]["paper"] == "0.979"
    # the fitted values are the store's own (the planted law is DR's, so close but not the typed numbers)
    assert float(rows["alpha"]["value"]) == pytest.approx(0.75, abs=0.05)
    # d_v = 2/α, the paper's from DR's α
    assert float(rows["d_v = 2/α"]["value"]) == pytest.approx(2 / float(rows["alpha"]["value"]), rel=2e-3)
    assert rows["d_v = 2/α"]["paper"] == "2.667"


def test_unmapped_scaling_table_has_no_paper_column(store):
    with _con(store) as con:
        sv = scaling_view(con, "mine", "vmae|gemma|mutual_knn")
    assert "paper" not in sv["table"].columns and "d_v = 2/α" in set(sv["table"]["parameter"])


def test_a_text_model_mapped_elsewhere_does_not_match_table_1(mapped):
    with duckdb.connect(str(mapped)) as con:
        P.set_paper_name(con, "model", "gemma", "")  # removed: DR's rows name their text encoder
        assert P.paper_names(con)["model"] == {"vmae": "VideoMAEv2-H"}
    with _con(mapped) as con:
        assert pf.published_scaling(con, "mine", "vmae", "gemma") == {}


def test_mapping_refuses_unknown_names(store):
    with duckdb.connect(str(store)) as con:
        with pytest.raises(ValueError, match="no model 'nope' in the store"):
            P.set_paper_name(con, "model", "nope", "VideoMAEv2-H")
        with pytest.raises(ValueError, match="not a model of the published table"):
            P.set_paper_name(con, "model", "vmae", "VideoMAE-Huge")
        assert P.paper_names(con)["model"] == {}


def test_papers_cli_errors_are_one_line(store, capsys):
    assert main(["papers", "map", "--store", str(store), "--dataset", "other", "VATEX"]) == 2
    assert "no dataset 'other' in the store" in capsys.readouterr().err
    assert main(["papers", "list", "--store", str(store)]) == 0
    assert "VideoMAEv2-H" in capsys.readouterr().out


def test_published_table_loads_and_every_row_cites_its_paper():
    rows = P.load_published()
    assert rows and all(r.source.startswith(r.paper) for r in rows)
    dr = {(r.model, r.dataset, r.metric): r.value for r in rows if r.paper == "DR"}
    assert dr[("VideoMAEv2-H", "VATEX", "alpha")] == 0.75 and dr[("PE-Core-L", "VATEX", "s_inf")] == 0.109


@pytest.mark.parametrize("body, message", [
    ("paper,model\n", ":1: header"),
    ("paper,model,dataset,setting,metric,value,source\nDR,x,VATEX,,alpha,abc,DR Sec. 6\n", ":2: value 'abc'"),
    ("paper,model,dataset,setting,metric,value,source\n# c\nDR,x,VATEX,,alpha,0.5\n", ":3: 6 fields"),
    ("paper,model,dataset,setting,metric,value,source\nDR,,VATEX,,alpha,0.5,DR\n", ":2: empty model"),
    ("paper,model,dataset,setting,metric,value,source\nDR,x,VATEX,,alpha,nan,DR\n", ":2: value 'nan' is not finite"),
])
def test_a_bad_published_file_names_its_line(tmp_path, body, message):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(ValueError, match=f"bad.csv{message}"):
        P.load_published(path)


def test_renaming_or_removing_a_model_carries_its_paper_name(store, tmp_path):
    from precompute.upkeep.manage import remove_runs, rename_model

    with duckdb.connect(str(store)) as con:
        P.set_paper_name(con, "model", "vmae", "VideoMAEv2-H")
        P.set_paper_name(con, "model", "dino", "DINOv2-G")
    rename_model(str(store), "vmae", "videomae-huge")
    remove_runs(str(store), model="dino")
    with _con(store) as con:
        assert P.paper_names(con)["model"] == {"videomae-huge": "VideoMAEv2-H"}


def test_d_v_is_blank_with_the_reason_where_alpha_is_not_determined(tmp_path):
    """The runaway grid of tests.stores leaves α at its bound: d_v = 2/α must not be printed."""
    from tests.stores import write_scaling_studies

    path = tmp_path / "s.duckdb"
    with duckdb.connect(str(path)) as con:
        write_scaling_studies(con)
    with _con(path) as con:
        sv = scaling_view(con, "toy", "v|runaway|cknna")
        law = scaling_view(con, "toy", "v|law|mutual_knn")
    rows = {r["parameter"]: r for r in sv["table"].to_dict(orient="records")}
    assert rows["alpha"]["value"] == "" and rows["d_v = 2/α"]["value"] == ""
    assert rows["d_v = 2/α"]["note"].startswith("not determined:")
    assert rows["d_v = 2/α"]["note"] == rows["alpha"]["note"]
    fitted = {r["parameter"]: r for r in law["table"].to_dict(orient="records")}
    assert float(fitted["d_v = 2/α"]["value"]) == pytest.approx(2 / float(fitted["alpha"]["value"]), rel=2e-3)


def test_a_missing_published_table_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no published table here"):
        P.load_published(tmp_path / "nothing.csv")


def test_the_section_draws_the_chosen_figure_titled_with_its_numbers(store):
    with _con(store) as con:
        sec = pf.section(con, "mine", figure="fig7", text="gemma")
        everything = pf.section(con, "mine")
    # one figure, one text model: Fig. 7 against gemma, its planted points (vision × n_c 1 and 10)
    ((caption, chart),) = sec.charts
    assert caption == "DR Fig. 7: mutual_knn, n_c 1 against 10, text model gemma"
    assert [e["text_model"] for e in sec.data["fig7"]] == ["gemma"]
    assert not any(sec.data[name] for name in ("fig11", "fig2", "fig8", "prompts", "gap_maps"))
    spec = chart.to_dict()
    assert " ".join(spec["title"]["text"]) == "mutual_knn: n_c 1 against n_c 10, text model gemma"
    # the untrained control is named under the title (an exported figure says it holds one)
    assert "rand" in " ".join(spec["title"]["subtitle"]) and "dataset mine" in spec["title"]["subtitle"]
    points = {p["vision"]: (p["x"], p["y"]) for p in next(iter(spec["datasets"].values()))}
    assert points == {m: (_planted(m, "gemma", 1), _planted(m, "gemma", 10)) for m in PAPER_VISION}
    # the report's section (every figure) holds this figure's chart, titled alike
    assert [(c, ch.to_dict()) for c, ch in everything.charts if c == caption] == [(caption, spec)]


def test_the_section_refuses_an_unknown_figure(store):
    with _con(store) as con, pytest.raises(ValueError, match="figure 'fig9': expected one of gap_maps, prompts"):
        pf.section(con, "mine", figure="fig9")
