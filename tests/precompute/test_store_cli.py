"""The precompute CLI against a real DuckDB store: contents, resume, and every kind of bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from analysis.storage.schema import SCHEMA_VERSION, embedding_tables
from analysis.storage.store import StoreError, list_runs, load_embeddings
from precompute.cli import main
from precompute.inputs.manifest import load_manifest
from precompute.adapters.dispatch import load_adapter
from precompute.batch.runner import caption_text
from precompute.synthetic.video_files import index_frames, write_video
from precompute.inputs.video import read_frames, sample_indices
from tests.precompute.helpers import make_dataset

REPO = Path(__file__).resolve().parents[2]


def cli(*args):
    return main([str(a) for a in args])


def n_vectors(con) -> int:
    return sum(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in embedding_tables(con).values())


def run_cli_subprocess(*args, env=None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "precompute.cli", *map(str, args)], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def dataset(tmp_path):
    return make_dataset(tmp_path / "data", n=7, captions=3)


def test_store_holds_every_layer_in_manifest_order(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["vit"],
               "--model", tiny["bert"], "--frames", "1,3", "--captions", "1,3", "--batch-size", "3", "--quiet") == 0
    # 2 vision runs, 2 text runs, and the text model on each item's first negative caption
    assert "5 run(s) computed" in capsys.readouterr().out
    runs = list_runs(store)
    assert len(runs) == 5 and all(r["status"] == "done" and r["n_done"] == 7 for r in runs)
    manifest = load_manifest(dataset)
    # named layers are on by default: the adapters that match the CLI's runs store them too
    vit = load_adapter(tiny["vit"], named_layers=True)
    stored = load_embeddings(store, model="vit", dataset="toy", n_frames=3)
    assert stored.shape == (4 + 1, 7, 32) and stored.dtype == np.float32  # 4 hidden states, then `default`
    for i in (0, 6):
        frames = read_frames(manifest.items[i].video)
        direct = vit.embed_videos([frames[sample_indices(len(frames), 3)]])[:, 0]
        np.testing.assert_allclose(stored[:, i], direct, rtol=1e-5, atol=1e-6)
    bert = load_adapter(tiny["bert"], named_layers=True)
    text = load_embeddings(store, model="bert", dataset="toy", n_captions=3)
    direct = bert.embed_texts([caption_text(manifest.items[4].captions, 3)])[:, 0]
    np.testing.assert_allclose(text[:, 4], direct, rtol=1e-5, atol=1e-6)
    neg = load_embeddings(store, model="bert", dataset="toy", n_captions=1, variant="negative")
    np.testing.assert_allclose(neg[:, 2], bert.embed_texts([manifest.items[2].negatives[0]])[:, 0],
                               rtol=1e-5, atol=1e-6)
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM items WHERE dataset = 'toy'").fetchall()[0][0] == 7
    assert con.execute("SELECT random_init, modality FROM models WHERE model = 'vit'").fetchall()[0] == (True, "image")
    con.close()
    # rerunning the same command computes nothing
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["vit"],
               "--frames", "1,3", "--quiet") == 0
    assert "0 run(s) computed, 2 already done" in capsys.readouterr().out
    assert cli("runs", "--store", store) == 0
    assert "5 run(s), 5 done" in capsys.readouterr().out


def test_interrupted_run_resumes_to_exactly_the_uninterrupted_result(tmp_path, dataset, tiny, capsys):
    args = ["precompute", "--manifest", dataset, "--dataset", "toy", "--model", tiny["videomae"],
            "--model", tiny["llama"], "--frames", "2,5", "--captions", "2", "--batch-size", "2", "--quiet"]
    whole = tmp_path / "whole.duckdb"
    # only the killed run needs a process of its own; the reference and the resume run in this one
    assert cli(*args[:1], "--store", whole, *args[1:]) == 0
    broken = tmp_path / "broken.duckdb"
    r = run_cli_subprocess(*args[:1], "--store", broken, *args[1:], env={"LAYERSCOPE_KILL_AFTER_BATCHES": "5"})
    assert r.returncode == -9  # SIGKILL, mid-run
    runs = {(r["n_frames"], r["n_captions"]): r for r in list_runs(broken)}
    assert runs[(5, None)]["status"] == "running" and runs[(5, None)]["n_done"] == 2  # 4 + 1 batches committed
    with pytest.raises(StoreError, match="not done"):
        load_embeddings(broken, model="videomae", dataset="toy", n_frames=5)
    capsys.readouterr()
    assert cli(*args[:1], "--store", broken, *args[1:]) == 0
    assert "3 run(s) computed, 1 already done" in capsys.readouterr().out  # the resumed run and two text runs
    for kw in ({"model": "videomae", "n_frames": 2}, {"model": "videomae", "n_frames": 5},
               {"model": "llama", "n_captions": 2}):
        np.testing.assert_array_equal(load_embeddings(broken, dataset="toy", **kw),
                                      load_embeddings(whole, dataset="toy", **kw))
    con = duckdb.connect(str(broken), read_only=True)
    dup = sum(con.execute(f"SELECT count(*) FROM (SELECT run_id, layer, idx FROM {t} "
                          "GROUP BY ALL HAVING count(*) > 1)").fetchall()[0][0] for t in embedding_tables(con).values())
    con.close()
    assert dup == 0


def test_short_video_is_handled_and_recorded(tmp_path, tiny, capsys):
    write_video(tmp_path / "short.mkv", index_frames(3))
    write_video(tmp_path / "long.mkv", index_frames(20))
    (tmp_path / "m.jsonl").write_text(
        json.dumps({"id": "short", "video": "short.mkv", "captions": ["c"]}) + "\n"
        + json.dumps({"id": "long", "video": "long.mkv", "captions": ["c"]}) + "\n")
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", tmp_path / "m.jsonl", "--dataset", "d",
               "--model", tiny["vit"], "--frames", "8", "--quiet") == 0
    assert "short_videos: 1 item(s)" in capsys.readouterr().err
    con = duckdb.connect(str(store), read_only=True)
    config = json.loads(con.execute("SELECT config FROM runs").fetchall()[0][0])
    con.close()
    assert config["notes"]["short_videos"]["short"]["frames"] == 3
    assert "repeats frames" in config["notes"]["short_videos"]["short"]["handled"]


def test_more_captions_than_an_item_has(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["bert"],
               "--captions", "5", "--quiet") == 2
    err = capsys.readouterr().err
    assert "up to 5 captions but 7 item(s) have fewer: item0 (3)" in err and "--allow-fewer-captions" in err
    assert not list_runs(store) if store.exists() else True
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["bert"],
               "--captions", "5", "--allow-fewer-captions", "--quiet") == 0
    con = duckdb.connect(str(store), read_only=True)
    notes = json.loads(con.execute("SELECT config FROM runs").fetchall()[0][0])["notes"]
    con.close()
    assert notes["fewer_captions"]["item0"] == {"has": 3, "asked": 5, "handled": "all available captions were used"}


def test_bad_manifest_stops_before_any_model_runs(tmp_path, tiny, capsys):
    (tmp_path / "m.jsonl").write_text(json.dumps({"id": "a", "video": "gone.mp4", "captions": ["x"]}) + "\n")
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", tmp_path / "m.jsonl", "--dataset", "d",
               "--model", tiny["vit"], "--quiet") == 2
    assert "m.jsonl:1: field 'video':" in capsys.readouterr().err
    assert not store.exists()


def test_nan_activations_stop_the_run_and_keep_earlier_batches(tmp_path, tiny, capsys):
    from safetensors.torch import load_file, save_file
    import shutil

    bad = tmp_path / "nanbert"
    shutil.copytree(tiny["bert"], bad)
    weights = load_file(bad / "model.safetensors")
    from transformers import AutoTokenizer

    token = AutoTokenizer.from_pretrained(bad).convert_tokens_to_ids("square")
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[key][token] = float("nan")  # only captions with "square" go bad
    save_file(weights, bad / "model.safetensors", metadata={"format": "pt"})
    write_video(tmp_path / "v.mkv", index_frames(4))
    captions = ["a red circle", "a blue circle", "a red circle", "a blue circle", "a green square", "a red circle"]
    (tmp_path / "m.jsonl").write_text("".join(
        json.dumps({"id": f"i{k}", "video": "v.mkv", "captions": [c]}) + "\n" for k, c in enumerate(captions)))
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", tmp_path / "m.jsonl", "--dataset", "d",
               "--model", bad, "--captions", "1", "--batch-size", "2", "--quiet") == 2
    err = capsys.readouterr().err
    assert "NaN/inf at layer 0 for item 'i4'" in err and "earlier batches are kept" in err
    (run,) = list_runs(store)
    assert run["status"] == "running" and run["n_done"] == 4


def test_store_of_another_schema_version_is_refused_untouched(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["bert"],
               "--captions", "1", "--quiet") == 0
    con = duckdb.connect(str(store))
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    before = n_vectors(con)
    assert before > 0
    con.close()
    capsys.readouterr()
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["bert"],
               "--captions", "2", "--quiet") == 2
    assert "schema version 999" in capsys.readouterr().err
    con = duckdb.connect(str(store), read_only=True)
    assert n_vectors(con) == before
    con.close()


def test_second_process_on_a_store_in_use_gets_a_clear_error(tmp_path, dataset, tiny):
    store = tmp_path / "s.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb,time; c=duckdb.connect({str(store)!r}); "
                               "print('locked', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = run_cli_subprocess("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy",
                               "--model", tiny["bert"], "--captions", "1", "--quiet")
        assert r.returncode == 2
        assert "in use by another process" in r.stderr
    finally:
        holder.kill()


def test_dataset_and_model_name_clashes_change_nothing(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["bert"],
               "--captions", "1", "--quiet") == 0
    other = make_dataset(tmp_path / "other", n=4, captions=2, seed=5)
    assert cli("precompute", "--store", store, "--manifest", other, "--dataset", "toy", "--model", tiny["bert"],
               "--captions", "1", "--quiet") == 2
    assert "dataset 'toy' is already in" in capsys.readouterr().err
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["llama"],
               "--name", "bert", "--captions", "1", "--quiet") == 2
    assert "model name 'bert' is already used" in capsys.readouterr().err
    assert len(list_runs(store)) == 2  # the first call's caption run and negative-caption run


def test_offline_env_and_shards(tmp_path, dataset, tiny):
    store = tmp_path / "s.duckdb"
    r = run_cli_subprocess("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy",
                           "--model", tiny["vit"], "--frames", "2", "--shard", "1/2", "--batch-size", "2", "--quiet",
                           env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    (run,) = list_runs(store)
    # 7 items are 4 batches of 2; shards take whole batches: 0..3 and 4..6
    assert run["n_items"] == 3 and run["status"] == "done"
    con = duckdb.connect(str(store), read_only=True)
    (table,) = embedding_tables(con).values()
    assert [r[0] for r in con.execute(f"SELECT DISTINCT idx FROM {table} ORDER BY idx").fetchall()] == [4, 5, 6]
    con.close()


def test_cli_argument_errors(tmp_path, dataset, tiny, capsys):
    with pytest.raises(SystemExit):
        cli("precompute", "--store", tmp_path / "s.duckdb", "--manifest", dataset, "--dataset", "d",
            "--model", tiny["vit"], "--frames", "0,2")
    assert "positive integers" in capsys.readouterr().err
    assert cli("precompute", "--store", tmp_path / "s.duckdb", "--manifest", dataset, "--dataset", "d",
               "--model", tiny["vit"], "--shard", "3/2", "--quiet") == 2
    assert "--shard 3/2" in capsys.readouterr().err


def test_mllm_runs_both_sides_in_one_space(tmp_path, dataset, tiny):
    from analysis.storage import results as R
    from analysis.studies import analyze_store

    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["llava"],
               "--frames", "1,2", "--captions", "1,2", "--quiet") == 0
    runs = list_runs(store)
    sides = sorted((r["modality"], r["variant"], r["n_frames"] or 0, r["n_captions"] or 0) for r in runs)
    assert sides == [("text", "negative", 0, 1), ("text", "original", 0, 1), ("text", "original", 0, 2),
                     ("video", "original", 1, 0), ("video", "original", 2, 0)]
    V = load_embeddings(store, model="llava", dataset="toy", n_frames=2)
    T = load_embeddings(store, model="llava", dataset="toy", n_captions=1)
    assert V.shape == T.shape == (3, 7, 32)  # one shared space: same layers, same width
    analyze_store(store, k=3, n_boot=0, log=lambda m: None)
    con = duckdb.connect(str(store), read_only=True)
    (temporal,) = R.read_studies(con, study="temporal", dataset="toy")
    con.close()
    (chiral,) = temporal["payload"]["chiral"]
    assert chiral["model"] == "llava" and len(chiral["per_layer"]) == 3


def test_shard_stores_merge_into_exactly_the_unsharded_run(tmp_path, dataset, tiny, capsys):
    common = ["--manifest", dataset, "--dataset", "toy", "--frames", "2", "--captions", "1", "--batch-size", "2",
              "--quiet"]
    # CLIP's narrower joint layer (16 wide in a 32-wide run) and a hook-path timm model put extras
    # (layer widths, the block path found) in the run config beside the identity: merge must still
    # find the unsharded run id
    from precompute.synthetic.tiny_models import build_clip

    clip = str(build_clip(tmp_path / "tinyclip"))
    commands = [["--model", tiny["vit"], "--model", tiny["bert"], "--model", clip],
                ["--model", "timm:vit_tiny_patch16_224?img_size=32&depth=2", "--random-init"]]
    whole = tmp_path / "whole.duckdb"
    for c in commands:
        assert cli("precompute", "--store", whole, *common, *c) == 0
    shards = []
    for i in range(3):
        shards.append(tmp_path / f"shard{i}.duckdb")
        for c in commands:
            assert cli("precompute", "--store", shards[-1], *common, *c, "--shard", f"{i}/3") == 0
    merged = tmp_path / "merged.duckdb"
    assert cli("merge", "--store", merged, *map(str, shards[:2])) == 0  # one shard missing
    assert "0 sharded run(s) merged" in capsys.readouterr().out
    assert cli("merge", "--store", merged, *map(str, shards)) == 0
    assert "5 sharded run(s) merged" in capsys.readouterr().out
    assert {r["run_id"] for r in list_runs(merged)} == {r["run_id"] for r in list_runs(whole)}
    for kw in ({"model": "vit", "n_frames": 2}, {"model": "bert", "n_captions": 1},
               {"model": "bert", "n_captions": 1, "variant": "negative"}, {"model": "tinyclip", "n_frames": 2},
               {"model": "timm:vit_tiny_patch16_224?img_size=32&depth=2-random-init", "n_frames": 2}):
        np.testing.assert_array_equal(load_embeddings(merged, dataset="toy", **kw),
                                      load_embeddings(whole, dataset="toy", **kw))
    assert cli("merge", "--store", merged, *map(str, shards)) == 0  # again: nothing new
    assert "5 already in" in capsys.readouterr().out
    # the merged run keeps the extras: CLIP's 16-wide joint layer in a 32-wide run
    con = duckdb.connect(str(merged), read_only=True)
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE model = 'tinyclip'").fetchone()[0])
    con.close()
    assert cfg["layer_names"] == {"3": "default", "4": "joint"} and cfg["layer_dims"] == {"4": 16}


def test_interrupted_shard_resumes_at_its_own_first_missing_item(tmp_path, tiny):
    # a shard's items start past 0: its progress must count its own items, not manifest positions
    data = make_dataset(tmp_path / "data", n=10, captions=1)
    args = ["precompute", "--manifest", data, "--dataset", "toy", "--model", tiny["vit"], "--frames", "2",
            "--batch-size", "2", "--shard", "1/2", "--quiet"]
    whole = tmp_path / "whole.duckdb"
    assert cli(args[0], "--store", whole, *args[1:]) == 0  # in this process: only the killed run needs its own
    broken = tmp_path / "broken.duckdb"
    r = run_cli_subprocess(args[0], "--store", broken, *args[1:], env={"LAYERSCOPE_KILL_AFTER_BATCHES": "1"})
    assert r.returncode == -9
    (run,) = list_runs(broken)
    # 10 items are 5 batches of 2; shards take whole batches (0..5, 6..9): items 6, 7 of 6..9 done
    assert (run["status"], run["n_done"], run["n_items"]) == ("running", 2, 4)
    assert cli(args[0], "--store", broken, *args[1:]) == 0
    (run,) = list_runs(broken)
    assert (run["status"], run["n_done"]) == ("done", 4)
    np.testing.assert_array_equal(load_embeddings(broken, model="vit", dataset="toy", n_frames=2),
                                  load_embeddings(whole, model="vit", dataset="toy", n_frames=2))


def _downgrade_to_v2(store, *, corrupt=False):
    """Rewrite a store in the version-2 layout by hand: float32 BLOB blocks of up to 3 items per layer."""
    con = duckdb.connect(str(store))
    con.execute("CREATE TABLE embeddings (run_id VARCHAR, layer SMALLINT, first_idx INTEGER, n_items INTEGER, "
                "vectors BLOB)")
    for run_id, dim, n_layers in con.execute("SELECT run_id, dim, n_layers FROM runs").fetchall():
        rows = con.execute(f"SELECT layer, idx, vec FROM embeddings_{dim} WHERE run_id = ? ORDER BY layer, idx",
                           [run_id]).fetchall()
        for layer in range(n_layers):
            mine = [r for r in rows if r[0] == layer]
            for b in range(0, len(mine), 3):
                block = np.array([r[2] for r in mine[b:b + 3]], dtype="<f4")
                blob = block.tobytes()[:-4] if corrupt and layer == 1 else block.tobytes()
                con.execute("INSERT INTO embeddings VALUES (?, ?, ?, ?, ?)",
                            [run_id, layer, mine[b][1], len(block), blob])
    for (table,) in con.execute("SELECT table_name FROM information_schema.tables "
                                "WHERE table_name LIKE 'embeddings_%'").fetchall():
        con.execute(f"DROP TABLE {table}")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()


def test_migrate_upgrades_a_version_2_store_without_losing_a_vector(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["vit"],
               "--model", tiny["bert"], "--frames", "2", "--captions", "1", "--quiet") == 0
    sel = [{"model": "vit", "n_frames": 2}, {"model": "bert", "n_captions": 1},
           {"model": "bert", "n_captions": 1, "variant": "negative"}]
    before = [load_embeddings(store, dataset="toy", **kw) for kw in sel]
    _downgrade_to_v2(store)
    capsys.readouterr()
    assert cli("runs", "--store", store) == 2
    assert "layerscope migrate --store" in capsys.readouterr().err
    assert cli("migrate", "--store", store) == 0
    assert f"schema 2 -> {SCHEMA_VERSION}, 3 run(s)" in capsys.readouterr().out
    for kw, expected in zip(sel, before):
        np.testing.assert_array_equal(load_embeddings(store, dataset="toy", **kw), expected)
    assert cli("migrate", "--store", store) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_migrate_of_a_damaged_store_changes_nothing(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["vit"],
               "--frames", "2", "--quiet") == 0
    _downgrade_to_v2(store, corrupt=True)
    capsys.readouterr()
    assert cli("migrate", "--store", store) == 2
    assert "nothing was changed" in capsys.readouterr().err
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [("2",)]
    assert con.execute("SELECT count(*) FROM embeddings").fetchall()[0][0] > 0
    assert embedding_tables(con) == {}
    con.close()
    assert cli("migrate", "--store", tmp_path / "missing.duckdb") == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["xclip", "vjepa2", "vivit"])
def test_video_families_through_the_cli_match_the_adapter(tmp_path, dataset, tiny, name):
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny[name],
               "--frames", "2,6", "--batch-size", "3", "--variant", "reversed", "--quiet") == 0
    manifest = load_manifest(dataset)
    a = load_adapter(tiny[name], named_layers=True)  # as the CLI stores them by default
    for n_f in (2, 6):
        stored = load_embeddings(store, model=name, dataset="toy", n_frames=n_f, variant="reversed")
        # 3 hidden states, then `default`, and X-CLIP's `joint` (its projection through its mit)
        assert stored.shape == (3 + (2 if name == "xclip" else 1), 7, 32)
        frames = read_frames(manifest.items[5].video)[::-1]
        direct = a.embed_videos([frames[sample_indices(len(frames), n_f)]])[:, 0]
        np.testing.assert_allclose(stored[:, 5], direct, rtol=1e-5, atol=1e-6)
