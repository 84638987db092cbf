"""`layerscope analyze` and `layerscope downstream import` on real stores."""

import shutil

import duckdb
import numpy as np
import pytest
from scipy import stats

from analysis.storage import results as R
from analysis.grid import layer_grid
from analysis.storage.store import StoreError, load_embeddings
from analysis.studies import analyze_store
from precompute.cli import main
from tests.stores import DEMO_LIKE_BOOT


@pytest.fixture
def store(demo_like, tmp_path):
    path = tmp_path / "s.duckdb"
    shutil.copy(demo_like, path)
    return path


def quiet(_msg):
    pass


def test_demo_store_holds_every_study(store):
    con = duckdb.connect(str(store), read_only=True)
    studies = {r[0] for r in con.execute("SELECT DISTINCT study FROM result_studies").fetchall()}
    # downstream needs imported whole-model results; predictors reads the probes measured on the items'
    # fields (the demo-shaped store is analysed with the demo's --labels)
    assert studies == {"scaling", "model_map", "temporal", "layer_choice", "verdict", "predictors",
                       "embedding_map", "same_space", "probes"}
    grids = R.read_grids(con, dataset="moving_shapes", model_a="videomae-tiny", model_b="all-MiniLM-L6-v2",
                         metric="mutual_knn", n_frames=4, n_captions=4)
    con.close()
    (g,) = grids
    V = load_embeddings(store, model="videomae-tiny", dataset="moving_shapes", n_frames=4)
    T = load_embeddings(store, model="all-MiniLM-L6-v2", dataset="moving_shapes", n_captions=4)
    np.testing.assert_array_equal(g["grid"], layer_grid(V, T, metric="mutual_knn", k=10))
    assert g["grid"][g["best_a"], g["best_b"]] == g["best_value"] == g["grid"].max()
    assert g["ci_low"] <= g["best_value"] <= g["ci_high"]


def test_demo_dual_encoder_fills_the_shared_space_studies(store):
    """The dual encoder (both towers, named layers, as the demo precomputes it) gives a same-space row
    at ``joint``, the temporal page's shared-space probes, and a two-sided embedding map."""
    from analysis.metrics import recall_at_k
    from tests.stores import DEMO_LIKE_DUAL as clip
    con = duckdb.connect(str(store), read_only=True)
    rows = R.read_studies(con, study="same_space", dataset="moving_shapes")
    (temporal,) = R.read_studies(con, study="temporal", dataset="moving_shapes")
    maps = [r["payload"] for r in R.read_studies(con, study="embedding_map", dataset="moving_shapes")]
    con.close()
    row = next(r for r in rows if r["payload"]["n_frames"] == 4 and r["payload"]["n_captions"] == 1)
    p = row["payload"]
    assert row["subject"] == f"{clip}|{clip}" and p["space"] == "joint"
    (joint,), width = p["layers_a"], p["flags"]["width"]["joint"]
    V = load_embeddings(store, model=clip, dataset="moving_shapes", n_frames=4)[joint][:, :width].astype(float)
    T = load_embeddings(store, model=clip, dataset="moving_shapes", n_captions=1)[joint][:, :width].astype(float)
    # by brute force: items whose video rows or caption rows are equal are right answers for each other
    label = list(range(len(V)))

    def root(i):
        while label[i] != i:
            i = label[i]
        return i

    for i in range(len(V)):
        for j in range(i):
            if (V[i] == V[j]).all() or (T[i] == T[j]).all():
                label[root(i)] = root(j)
    groups = [root(i) for i in range(len(V))]
    assert p["metrics"]["recall@1_v2t"]["values"] == [pytest.approx(recall_at_k(V, T, k=1, groups=groups))]
    # chiral choice and time reversal on the shared space (an image tower averages frames, so the
    # reversal can tie; the entry then says why instead of scoring)
    for probe in ("chiral", "time_reversal"):
        (entry,) = [e for e in temporal["payload"][probe] if e["video"] == clip]
        assert (entry["text"], entry["space"], entry["layers_a"]) == (clip, "joint", [joint])
        assert entry["per_layer"][0] is not None or entry["reasons"]
    two_sided = [m for m in maps if len(m["sides"]) == 2]
    assert two_sided and two_sided[0]["models"] == [clip, clip] and two_sided[0]["layer_names"] == ["joint", "joint"]


def test_second_analyze_computes_nothing_and_changed_inputs_are_recomputed(store):
    again = analyze_store(store, n_boot=DEMO_LIKE_BOOT, log=quiet)
    assert again["computed"] == 0 and again["skipped"] > 0
    con = duckdb.connect(str(store))
    run = con.execute("SELECT run_id FROM runs WHERE model = 'vit-tiny' AND dataset = 'moving_shapes' "
                      "AND n_frames = 2 AND variant = 'original'").fetchall()[0][0]
    con.execute("UPDATE runs SET finished = finished + INTERVAL 1 SECOND WHERE run_id = ?", [run])
    con.close()
    redo = analyze_store(store, n_boot=DEMO_LIKE_BOOT, log=quiet)
    assert 0 < redo["computed"] < again["skipped"]


def test_scaling_study_matches_its_grids(store):
    con = duckdb.connect(str(store), read_only=True)
    (s,) = R.read_studies(con, study="scaling", dataset="moving_shapes",
                          subject="videomae-tiny|all-MiniLM-L6-v2|mutual_knn")
    grids = R.read_grids(con, dataset="moving_shapes", model_a="videomae-tiny", model_b="all-MiniLM-L6-v2",
                         metric="mutual_knn")
    con.close()
    p = s["payload"]
    assert len(p["scores"]) == len(grids) == 9  # 3 n_f x 3 n_c, the small demo's budgets
    best = {(g["n_frames"], g["n_captions"]): g["best_value"] for g in grids}
    for nf, nc, y in zip(p["n_frames"], p["n_captions"], p["scores"]):
        assert best[(nf, nc)] == y
    assert "fit" in p and {f["form"] for f in p["forms"]} == {"saturating", "log_linear", "joint_power"}


def test_downstream_import_and_correlation(store, tmp_path, capsys):
    csv = tmp_path / "results.csv"
    csv.write_text("model,task,metric,value,higher_is_better\n"
                   "videomae-tiny,ssv2,top1,40.0,true\nvit-tiny,ssv2,top1,30.0,true\n"
                   "llama-tiny,ssv2,top1,10.0,true\nall-MiniLM-L6-v2,ssv2,top1,20.0,true\n"
                   "videomae-tiny,depth,rmse,0.5,false\nvit-tiny,depth,rmse,0.7,false\n"
                   "llama-tiny,depth,rmse,0.9,false\nall-MiniLM-L6-v2,depth,rmse,0.8,false\n")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 0
    analyze_store(store, n_boot=DEMO_LIKE_BOOT, log=quiet)
    con = duckdb.connect(str(store), read_only=True)
    (d,) = R.read_studies(con, study="downstream", dataset="moving_shapes")
    con.close()
    row = next(r for r in d["payload"]["rows"] if r.get("score") == "rankme at last layer" and r["task"] == "ssv2")
    assert row["pearson_r"] == pytest.approx(stats.pearsonr(row["x"], row["y"])[0])
    assert row["spearman_rho"] == pytest.approx(stats.spearmanr(row["x"], row["y"])[0])
    depth = next(r for r in d["payload"]["rows"] if r.get("score") == "rankme at last layer" and r["task"] == "depth")
    # signed as computed (a lower-is-better task keeps its sign, as in the paper), direction beside it
    assert depth["pearson_r"] == pytest.approx(stats.pearsonr(depth["x"], depth["y"])[0])
    assert depth["higher_is_better"] is False and depth["better"] == (depth["pearson_r"] < 0)
    # the paper's protocol by default: one caption, each vision model's standard frame count
    settings = d["payload"]["settings"]
    assert d["payload"]["setting"] == "paper"
    assert settings["all-MiniLM-L6-v2"]["n_captions"] == 1 and settings["llama-tiny"]["n_captions"] == 1
    con = duckdb.connect(str(store), read_only=True)
    native = dict(con.execute("SELECT model, native_frames FROM models").fetchall())
    frames = {m: sorted(r[0] for r in con.execute("SELECT DISTINCT n_frames FROM runs WHERE model = ? AND "
                                                  "variant = 'original'", [m]).fetchall()) for m in ("videomae-tiny",)}
    con.close()
    want = min(frames["videomae-tiny"], key=lambda f: (abs(f - native["videomae-tiny"]), -f))
    assert settings["videomae-tiny"]["n_frames"] == want


def test_downstream_csv_errors_import_nothing(store, tmp_path, capsys):
    con = duckdb.connect(str(store), read_only=True)
    before = con.execute("SELECT * FROM downstream_results ORDER BY ALL").fetchall()
    con.close()
    bad = tmp_path / "bad.csv"
    bad.write_text("model,task,metric,value,higher_is_better\n"
                   "not-a-model,ssv2,top1,40,true\nvit-tiny,ssv2,top1,abc,true\nvit-tiny,,top1,1,maybe\n")
    assert main(["downstream", "import", str(bad), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv:2: column 'model': unknown model 'not-a-model'" in err
    assert "bad.csv:3: column 'value': 'abc' is not a finite number" in err
    assert "bad.csv:4: column 'task' is empty" in err and "'maybe' is not true/false" in err
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT * FROM downstream_results ORDER BY ALL").fetchall() == before
    con.close()
    missing = tmp_path / "cols.csv"
    missing.write_text("model,value\nvit-tiny,1\n")
    assert main(["downstream", "import", str(missing), "--store", str(store)]) == 2
    assert "missing column(s) task, metric, higher_is_better" in capsys.readouterr().err


@pytest.mark.slow  # builds a tiny ViT and precomputes it
def test_bad_analyze_inputs(tmp_path, store, capsys):
    from precompute.synthetic import tiny_models
    from tests.precompute.helpers import make_dataset

    one = tmp_path / "one.duckdb"
    m = make_dataset(tmp_path / "d", n=6, captions=1)
    tiny_models.build_vit(tmp_path / "vit")
    assert main(["precompute", "--store", str(one), "--manifest", str(m), "--dataset", "d", "--model",
                 str(tmp_path / "vit"), "--frames", "1", "--quiet"]) == 0
    out = analyze_store(one, k=3, n_boot=0, log=quiet)  # one model, one setting
    assert any("no vision×text pair" in n for n in out["notes"])
    assert any("at least 2 models" in n for n in out["notes"])
    with pytest.raises(ValueError, match="--k 10 needs more items than any dataset holds .* N = 6"):
        analyze_store(one, k=10, n_boot=0, log=quiet)  # a k no dataset can take is refused, not saved
    with pytest.raises(StoreError, match="unknown --reference"):
        analyze_store(store, references=["nope"], log=quiet)
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    assert main(["analyze", "--store", str(empty)]) == 2
    assert "no runs yet" in capsys.readouterr().err
