"""Sweep files: validation errors that point at file, line and field; plans; reruns that do nothing."""

import json
import textwrap

import pytest
from transformers import AutoConfig

from precompute.cli import main
from precompute.sweep import SweepError, key_lines, load_sweep, plan_sweep, run_sweep
from tests.precompute.helpers import make_dataset, stored_rows
from tests.precompute.helpers import write_sweep as sweep_file


def write_sweep(root, tiny, extra="", *, models=None):
    """The test sweep: the vit and bert-tiny (named) models on ``data/manifest.jsonl``, then ``extra``;
    ``models`` replaces the models' tables (TOML text)."""
    models = models if models is not None else f"""
        [[models]]
        source = "{tiny['vit']}"

        [[models]]
        source = "{tiny['bert']}"
        name = "bert-tiny"
    """
    path = sweep_file(root / "sweep.toml", manifest="data/manifest.jsonl", models=[])
    path.write_text(path.read_text() + textwrap.dedent(models) + textwrap.dedent(extra))
    return path


def line_of(path, needle: str, nth: int = 0) -> int:
    """1-based line of the nth line containing ``needle`` (found independently of the parser)."""
    hits = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if needle in line]
    return hits[nth]


@pytest.fixture
def root(tmp_path):
    make_dataset(tmp_path / "data", n=7, captions=3)
    return tmp_path


def test_key_lines_index_tables_arrays_and_keys():
    text = "top = 1\n[a]\nk = 2\n\n[[m]]\nx = 1\n[[m]]\n# c\nx = 2\n[b.c]\n\"q\" = 3\n"
    lines = key_lines(text)
    assert lines[("top",)] == 1 and lines[("a",)] == 2 and lines[("a", "k")] == 3
    assert lines[("m", 0)] == 5 and lines[("m", 0, "x")] == 6 and lines[("m", 1)] == 7 and lines[("m", 1, "x")] == 9
    assert lines[("b", "c", "q")] == 11


@pytest.mark.parametrize("extra, needle, field, says", [
    ('[analyze]\nk = 0\n', "k = 0", "analyze.k", "integer >= 1"),
    ('[analyze]\nclamp = "sometimes"\n', "clamp =", "analyze.clamp", "'platonic'"),
    ('[ray]\nreplicas = "two"\n', "replicas", "ray.replicas", "integer"),
    ('[analyze]\nbootstrapp = 5\n', "bootstrapp", "analyze.bootstrapp", "unknown field"),
    ('[[models]]\nsource = "x"\ndtype = "fp8"\n', "fp8", "models[2].dtype", "'bfloat16'"),
    ('[[models]]\nname = "no-source"\n', "[[models]]", "models[2]", "missing required field 'source'"),
    ('[[models]]\nsource = "elsewhere"\nname = "bert-tiny"\n', 'name = "bert-tiny"', "models[2].name",
     "already models[1]"),
    ('[[datasets]]\nname = "other"\nmanifest = "missing.jsonl"\n', "missing.jsonl", "datasets[1].manifest",
     "does not exist"),
    ('[precompute2]\n', "[precompute2]", "precompute2", "unknown table"),
    ('[[models]]\nsource = "x"\nnamed_layers = "yes"\n', "named_layers", "models[2].named_layers", "true or false"),
    ('[[models]]\nsource = "x"\nrandom_init = 1\n', "random_init", "models[2].random_init", "true or false"),
    ('[[models]]\nsource = "x"\nblocks = 3\n', "blocks = 3", "models[2].blocks", "non-empty string"),
    ('[[models]]\nsource = "x"\nrevision = 5\n', "revision = 5", "models[2].revision", "non-empty string"),
    ('[[models]]\nsource = "x"\ncache_dir = ""\n', "cache_dir", "models[2].cache_dir", "non-empty string"),
    ('[[models]]\nsource = "x"\nname = "alpha [text]"\n', 'name = "alpha [text]"', "models[2].name",
     "how LayerScope names a dual encoder's sides"),
])
def test_field_errors_name_file_line_and_field(root, tiny, extra, needle, field, says):
    path = write_sweep(root, tiny, extra)
    with pytest.raises(SweepError) as exc:
        load_sweep(path)
    msg = str(exc.value)
    # the last line holding the needle: the appended text comes after the base sweep
    want = line_of(path, needle, -1)
    assert msg.startswith(f"{path}:{want}: {field}: "), msg
    assert says in msg


def test_syntax_error_names_its_line_and_nothing_is_created(root, tiny, capsys):
    path = write_sweep(root, tiny, "[analyze]\nk = = 3\n")
    store = root / "s.duckdb"
    assert main(["sweep", "run", str(path), "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line_of(path, 'k = = 3')}: TOML syntax error" in err and len(err.strip().splitlines()) == 1
    assert not store.exists()


def test_bad_model_folder_and_short_captions_stop_before_anything_runs(root, tiny, capsys):
    store = root / "s.duckdb"
    path = write_sweep(root, tiny, models='[[models]]\nsource = "./nowhere"\n')
    assert main(["sweep", "run", str(path), "--store", str(store)]) == 2
    assert "models[0].source: model folder" in capsys.readouterr().err
    # 3 captions per item, 5 asked: refused (in plan and run) before the vision model runs
    path = write_sweep(root, tiny, models=f"""
        [[models]]
        source = "{tiny['vit']}"
        [[models]]
        source = "{tiny['bert']}"
    """)
    path.write_text(path.read_text().replace("captions = [1, 3]", "captions = [1, 5]"))
    assert main(["sweep", "run", str(path), "--store", str(store)]) == 2
    assert "have fewer" in capsys.readouterr().err
    assert not store.exists()


def test_plan_lists_runs_and_the_size_the_run_then_writes(root, tiny, capsys):
    path = write_sweep(root, tiny, "[analyze]\nenabled = false\n")
    store = root / "s.duckdb"
    plan = plan_sweep(load_sweep(path), store)
    labels = [(r.model, r.label, r.status) for r in plan.runs]
    assert labels == [("vit", "n_f=1", "todo"), ("vit", "n_f=3", "todo"), ("bert-tiny", "n_c=1", "todo"),
                      ("bert-tiny", "n_c=3", "todo"), ("bert-tiny", "n_c=1 negatives", "todo")]
    # hidden states = layers + 1 (embeddings), then the named `default` layer, each a float32
    # vector of the hidden size, per item
    for name, n_runs in (("vit", 2), ("bert", 3)):
        cfg = AutoConfig.from_pretrained(tiny[name])
        per_run = 7 * (cfg.num_hidden_layers + 1 + 1) * cfg.hidden_size * 4
        assert [r.bytes_left for r in plan.runs if r.model.startswith(name)] == [per_run] * n_runs
    assert main(["sweep", "plan", str(path), "--store", str(store)]) == 0
    assert "5 run(s): 0 done, 5 to run (35 item embeddings" in capsys.readouterr().out
    run_sweep(load_sweep(path), store, progress=False, log=lambda m: None)
    stored = stored_rows(store)
    assert sum(len(v) * 4 for *_, v in stored) == sum(r.bytes_left for r in plan.runs)
    after = plan_sweep(load_sweep(path), store)
    assert {r.status for r in after.runs} == {"done"} and after.done_pairs == {("toy", "vit"), ("toy", "bert-tiny")}


def test_sweep_run_equals_plain_precompute_and_a_second_run_does_nothing(root, tiny, monkeypatch, capsys):
    path = write_sweep(root, tiny, "[analyze]\nk = 3\nbootstrap = 0\njobs = 1\n")
    store, plain = root / "s.duckdb", root / "plain.duckdb"
    assert main(["sweep", "run", str(path), "--store", str(store), "--quiet"]) == 0
    first = capsys.readouterr().out
    assert "5 run(s) computed" in first and "analyze: 0 result(s) computed" not in first
    assert main(["precompute", "--store", str(plain), "--manifest", str(root / "data/manifest.jsonl"), "--dataset",
                 "toy", "--model", tiny["vit"], "--frames", "1,3", "--batch-size", "3", "--quiet"]) == 0
    assert main(["precompute", "--store", str(plain), "--manifest", str(root / "data/manifest.jsonl"), "--dataset",
                 "toy", "--model", tiny["bert"], "--name", "bert-tiny", "--captions", "1,3", "--batch-size", "3",
                 "--quiet"]) == 0
    assert stored_rows(store) == stored_rows(plain)  # same run ids, same rows, bitwise

    import precompute.batch.runner

    def no_load(*a, **k):
        raise AssertionError("a complete sweep must not load a model")

    monkeypatch.setattr(precompute.batch.runner, "load_adapter", no_load)
    assert main(["sweep", "run", str(path), "--store", str(store), "--quiet"]) == 0
    second = capsys.readouterr().out
    assert "0 run(s) computed" in second and "2 dataset×model pair(s) complete" in second
    assert "analyze: 0 result(s) computed" in second


def test_per_model_overrides_and_a_partial_run_in_the_plan(root, tiny):
    path = write_sweep(root, tiny, "[analyze]\nenabled = false\n", models=f"""
        [[models]]
        source = "{tiny['vit']}"
        batch_size = 2
    """)
    store = root / "s.duckdb"
    sweep = load_sweep(path)
    assert sweep.model_options(sweep.models[0])["batch_size"] == 2
    # an interrupted plain run of the same settings: 4 of 7 items (2 batches of 2)
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "precompute.cli", "precompute", "--store", str(store), "--manifest",
                        str(root / "data/manifest.jsonl"), "--dataset", "toy", "--model", tiny["vit"], "--frames",
                        "1", "--batch-size", "2", "--quiet"], env={**os.environ, "LAYERSCOPE_KILL_AFTER_BATCHES": "2"},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9
    plan = plan_sweep(sweep, store)
    assert [(r.label, r.status, r.n_done) for r in plan.runs] == [("n_f=1", "partial", 4), ("n_f=3", "todo", 0)]
    out = run_sweep(sweep, store, progress=False, log=lambda m: None)
    assert out["runs_computed"] == 2 and out["items_embedded"] == 3 + 7  # the partial run resumed


def test_blocks_random_init_and_named_layers_in_a_sweep_are_the_cli_flags(root, tiny):
    """A sweep's ``blocks``, ``random_init`` and ``named_layers`` give the runs (ids and rows) of the
    same ``layerscope precompute`` flags, and the plan tells runs with named layers from runs without."""
    from precompute.adapters.hooks import find_blocks
    from precompute.adapters.dispatch import load_adapter

    blocks = find_blocks(load_adapter(tiny["vit"]).model)[0]
    manifest = root / "data/manifest.jsonl"
    common = ["--manifest", str(manifest), "--dataset", "toy", "--batch-size", "3", "--quiet"]
    bert_named = ["--model", tiny["bert"], "--random-init", "--captions", "1,3"]
    store, plain = root / "s.duckdb", root / "plain.duckdb"
    for s in (store, plain):  # a run of random-init bert with named layers (the default) is in both stores
        assert main(["precompute", "--store", str(s), *common, *bert_named]) == 0
    path = write_sweep(root, tiny, "[analyze]\nenabled = false\n", models=f"""
        [[models]]
        source = "{tiny['vit']}"
        name = "vit-hooks"
        blocks = "{blocks}"

        [[models]]
        source = "{tiny['bert']}"
        random_init = true
        named_layers = false
    """)
    sweep = load_sweep(path)
    plan = plan_sweep(sweep, store)
    # the stored bert runs have named layers: the sweep's (without) are still to do
    assert [(r.model, r.label, r.status) for r in plan.runs] == [
        ("vit-hooks", "n_f=1", "todo"), ("vit-hooks", "n_f=3", "todo"), ("bert-random-init", "n_c=1", "todo"),
        ("bert-random-init", "n_c=3", "todo"), ("bert-random-init", "n_c=1 negatives", "todo")]
    out = run_sweep(sweep, store, progress=False, log=lambda m: None)
    assert out["runs_computed"] == 5
    assert main(["precompute", "--store", str(plain), *common, "--model", tiny["vit"], "--name", "vit-hooks",
                 "--blocks", blocks, "--frames", "1,3"]) == 0
    assert main(["precompute", "--store", str(plain), *common, *bert_named, "--no-named-layers"]) == 0
    assert stored_rows(store) == stored_rows(plain)  # same run ids, same rows, bitwise
    after = plan_sweep(load_sweep(path), store)
    assert [(r.model, r.status) for r in after.runs] == [(r.model, "done") for r in after.runs]
    assert after.done_pairs == {("toy", "vit-hooks"), ("toy", "bert-random-init")}


def test_caption_shortfall_names_the_sweeps_own_field_or_its_default(root, tiny):
    """Issue #34 item 16, in a sweep: the budgets are the file's ``captions`` (its line) or the default."""
    path = write_sweep(root, tiny)
    path.write_text(path.read_text().replace("captions = [1, 3]", "captions = [1, 5]"))
    with pytest.raises(SweepError) as exc:
        plan_sweep(load_sweep(path), root / "s.duckdb")
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{line_of(path, 'captions = [1, 5]')}: ") and "precompute.captions = [1, 5]" in msg
    assert "captions = [1, 2, 3]" in msg and "allow_fewer_captions = true" in msg and "--" not in msg
    path.write_text(path.read_text().replace("captions = [1, 5]\n", ""))
    with pytest.raises(SweepError) as exc:
        plan_sweep(load_sweep(path), root / "s.duckdb")
    assert "the default captions = [1, 2, 4, 8, 10] (no `captions` in [precompute])" in str(exc.value)


@pytest.mark.parametrize("extra, needle, field, says", [
    ('[[models]]\nsource = "x"\ndevice = "tpu"\n', 'device = "tpu"', "models[2].device", "cuda:N"),
    ('[ray]\ngpus_per_model = inf\n', "gpus_per_model", "ray.gpus_per_model", "finite"),
    ('[ray]\ngpus_per_model = nan\n', "gpus_per_model", "ray.gpus_per_model", "finite"),
    ('[analyze]\nmetrics = ["mutual_knn", "ckaa"]\n', "ckaa", "analyze.metrics", "Did you mean 'cka'"),
    ('[analyze]\nmetrics = ["rankme"]\n', "rankme", "analyze.metrics", "pairwise"),
    ('[analyze]\nprobes = ["knn", "svm"]\n', "svm", "analyze.probes", "unknown probe 'svm'"),
    ('[analyze]\nlabels = "scene.shape"\n', "labels", "analyze.labels", "non-empty list of strings"),
])
def test_more_field_errors_name_file_line_and_field(root, tiny, extra, needle, field, says):
    """Issue #34 item 6: values the run would refuse only after precompute (or never) stop the load."""
    path = write_sweep(root, tiny, extra)
    with pytest.raises(SweepError) as exc:
        load_sweep(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{line_of(path, needle, -1)}: {field}: "), msg
    assert says in msg


def test_frames_beyond_the_runners_limit_name_the_line(root, tiny):
    from precompute.batch.runner import MAX_FRAMES

    path = write_sweep(root, tiny)
    path.write_text(path.read_text().replace("frames = [1, 3]", f"frames = [1, {MAX_FRAMES + 1}]"))
    with pytest.raises(SweepError) as exc:
        load_sweep(path)
    assert str(exc.value).startswith(f"{path}:{line_of(path, 'frames =')}: precompute.frames: ")
    assert str(MAX_FRAMES) in str(exc.value)
    path.write_text(path.read_text().replace(f"frames = [1, {MAX_FRAMES + 1}]", f"frames = [1, {MAX_FRAMES}]"))
    assert load_sweep(path).precompute["frames"] == [1, MAX_FRAMES]  # the limit itself is allowed


def test_a_bom_is_read_and_non_utf8_bytes_name_their_line(root, tiny):
    path = write_sweep(root, tiny)
    text = path.read_text()
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())  # Notepad's UTF-8 with BOM
    assert [m.store_name for m in load_sweep(path).models] == ["vit", "bert-tiny"]
    bad = text.replace('name = "bert-tiny"', 'name = "bert-tiny"\n# caf\xe9 in Latin-1').encode("latin-1")
    path.write_bytes(bad)
    with pytest.raises(SweepError) as exc:
        load_sweep(path)
    msg = str(exc.value)
    line = bad.split(b"caf")[0].count(b"\n") + 1  # the comment's line, counted on the bytes
    assert msg.startswith(f"{path}:{line}: "), msg
    assert "UTF-8" in msg and "0xe9" in msg


def test_a_relative_source_in_a_sweep_given_by_a_relative_path_is_a_folder_not_a_hub_id(root, tiny, monkeypatch):
    """``source = "./nope"`` must be checked as a folder next to the sweep file, never become hub id ``nope``."""
    import shutil

    shutil.copytree(tiny["bert"], root / "mybert")
    path = write_sweep(root, tiny, models='[[models]]\nsource = "./nope"\n')
    monkeypatch.chdir(root)
    with pytest.raises(SweepError) as exc:
        load_sweep(path.name)
    assert str(exc.value).startswith(f"sweep.toml:{line_of(path, './nope')}: models[0].source: model folder")
    path.write_text(path.read_text().replace("./nope", "./mybert"))
    m = load_sweep(path.name).models[0]
    assert m.source == str(root / "mybert") and m.store_name == "mybert"


def test_unknown_reference_stops_the_plan_with_its_line(root, tiny):
    path = write_sweep(root, tiny, '[analyze]\nreferences = ["bert-tiny", "bart-tiny"]\n')
    with pytest.raises(SweepError) as exc:
        plan_sweep(load_sweep(path), root / "s.duckdb")
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{line_of(path, 'references')}: analyze.references: "), msg
    assert "'bart-tiny'" in msg and "bert-tiny" in msg
    path.write_text(path.read_text().replace('"bart-tiny"', '"vit [image]"'))
    assert plan_sweep(load_sweep(path), root / "s.duckdb").runs  # a known model with a side is fine


def test_a_blocks_path_the_model_lacks_stops_the_plan_at_its_line(root, tiny):
    """Issue #34 item 6: a bad ``blocks`` passed ``sweep plan`` and failed only when its model loaded."""
    from precompute.adapters.hooks import find_blocks
    from precompute.adapters.dispatch import load_adapter

    good = find_blocks(load_adapter(tiny["vit"]).model)[0]  # the loaded model's own block list
    path = write_sweep(root, tiny, "[analyze]\nenabled = false\n", models=f"""
        [[models]]
        source = "{tiny['bert']}"

        [[models]]
        source = "{tiny['vit']}"
        blocks = "{good}z"
    """)
    with pytest.raises(SweepError) as exc:
        plan_sweep(load_sweep(path), root / "s.duckdb")
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{line_of(path, good + 'z')}: models[1].blocks: "), msg
    assert good in msg.split(f"{good}z", 1)[1]  # the lists it does have
    path.write_text(path.read_text().replace(f"{good}z", good))
    assert plan_sweep(load_sweep(path), root / "s.duckdb").runs  # the right path plans


def test_a_local_folder_with_a_revision_stops_the_plan_at_its_line(root, tiny):
    path = write_sweep(root, tiny, f'[[models]]\nsource = {json.dumps(tiny["bert"])}\nname = "b2"\nrevision = "v1"\n')
    with pytest.raises(SweepError) as exc:
        plan_sweep(load_sweep(path), root / "s.duckdb")
    msg = str(exc.value)
    assert "--revision v1" in msg and "local folder" in msg and str(path) in msg, msg


def test_a_relative_cache_dir_is_relative_to_the_sweep_file(root, tiny, monkeypatch):
    path = write_sweep(root, tiny, '[[models]]\nsource = "org/some-model"\ncache_dir = "hub-cache"\n')
    monkeypatch.chdir("/")
    m = load_sweep(path).models[2]
    assert m.options["cache_dir"] == str(root / "hub-cache")
