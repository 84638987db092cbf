"""``--ray local`` on a 2-CPU Ray instance: the plain path's vectors bitwise, worker and driver deaths."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from precompute.batch import ray_backend
from precompute.cli import main
from tests.precompute.helpers import make_dataset, stored_contents, write_sweep
from tests.stores import result_tables as results

pytestmark = pytest.mark.slow  # starts a local Ray instance and builds tiny models

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance (2 CPUs) for the module; ``--ray local`` joins it instead of starting one."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("raydata"), n=7, captions=3)


def args(store, data, tiny, *extra):
    return ["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "toy", "--model", tiny["vit"],
            "--model", tiny["bert"], "--frames", "1,3", "--captions", "1,3", "--batch-size", "3", "--variant",
            "original", "--quiet", *extra]


@pytest.fixture(scope="module")
def plain(tmp_path_factory, data, tiny):
    store = tmp_path_factory.mktemp("plain") / "plain.duckdb"
    assert main(args(store, data, tiny)) == 0
    return stored_contents(store)


def test_ray_local_writes_exactly_the_plain_runs(tmp_path, ray_local, data, tiny, plain):
    store = tmp_path / "ray.duckdb"
    assert main(args(store, data, tiny, "--ray", "local")) == 0
    rows, runs = stored_contents(store)
    assert runs == plain[1] and all(r[1] == "done" for r in runs) and len(runs) == 5
    assert rows == plain[0]
    # and a second --ray run finds everything done
    assert main(args(store, data, tiny, "--ray", "local")) == 0
    assert stored_contents(store) == (rows, runs)


def test_a_killed_model_worker_is_restarted_and_the_store_ends_complete(tmp_path, ray_local, data, tiny, plain,
                                                                      monkeypatch):
    marker = tmp_path / "killed"
    # the first model actor to reach its 2nd forward SIGKILLs itself (once): Ray restarts it and
    # re-runs the calls it had in flight
    monkeypatch.setenv(ray_backend.KILL_ENV, f"{marker}:2")
    store = tmp_path / "ray.duckdb"
    assert main(args(store, data, tiny, "--ray", "local")) == 0
    assert marker.exists()
    assert stored_contents(store) == plain


def test_a_killed_driver_resumes_like_a_killed_local_run(tmp_path, ray_local, data, tiny, plain):
    store = tmp_path / "ray.duckdb"
    # a driver of its own (its own Ray instance), killed after 4 committed batches; its own
    # process group, so the Ray helpers it leaves behind can be ended with it
    proc = subprocess.Popen([sys.executable, "-m", "precompute.cli", *args(store, data, tiny, "--ray", "local")],
                            cwd=REPO, env={**os.environ, "LAYERSCOPE_KILL_AFTER_BATCHES": "4"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == -9, err.decode()[-2000:]
    rows, runs = stored_contents(store)
    # 7 items in batches of 3: the first vision run done (3 batches) and one batch of the second
    assert sorted((r[2], r[1]) for r in runs) == [(3, "running"), (7, "done")]
    assert rows and set(rows) <= set(plain[0])
    assert main(args(store, data, tiny, "--ray", "local")) == 0
    assert stored_contents(store) == plain


def test_without_ray_the_flag_says_how_to_install_it(tmp_path, data, tiny, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    store = tmp_path / "s.duckdb"
    assert main(args(store, data, tiny, "--ray", "local")) == 2
    err = capsys.readouterr().err
    assert 'pip install -e ".[ray]"' in err and len(err.strip().splitlines()) == 1
    assert not store.exists()
    assert main(args(store, data, tiny, "--gpus-per-model", "1")) == 2
    assert "--gpus-per-model only applies with --ray" in capsys.readouterr().err


def test_sweep_run_on_ray_then_a_second_run_does_nothing(tmp_path, ray_local, data, tiny, plain, capsys):
    sweep = write_sweep(tmp_path / "sweep.toml", manifest=data, models=[tiny["vit"], tiny["bert"]],
                        extra="[analyze]\nenabled = false\n")
    store = tmp_path / "s.duckdb"
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--ray", "local", "--quiet"]) == 0
    assert "5 run(s) computed" in capsys.readouterr().out
    assert stored_contents(store) == plain
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--ray", "local", "--quiet"]) == 0
    assert "0 run(s) computed, 0 already done, 2 dataset×model pair(s) complete" in capsys.readouterr().out


def test_sweep_analysis_scored_in_ray_tasks_equals_local_analysis(tmp_path, ray_local, data, tiny, monkeypatch):
    import shutil

    from analysis.studies import parallel

    sweep = write_sweep(tmp_path / "sweep.toml", manifest=data, models=[tiny["vit"], tiny["bert"]],
                        extra="[analyze]\nk = 3\nbootstrap = 20\njobs = 1\n")
    local, remote = tmp_path / "local.duckdb", tmp_path / "remote.duckdb"
    assert main(["sweep", "run", str(sweep), "--store", str(local), "--quiet"]) == 0
    shutil.copy(local, remote)
    con = duckdb.connect(str(remote))
    for t in ("result_grids", "result_profiles", "result_studies"):
        con.execute(f"DELETE FROM {t}")
    con.close()
    chunks = []
    run_remote = parallel._run_remote

    def spy(ctx, kind, unit, tasks, out, bar):
        chunks.append((kind, len(tasks)))
        return run_remote(ctx, kind, unit, tasks, out, bar)

    monkeypatch.setattr(parallel, "_run_remote", spy)
    assert main(["sweep", "run", str(sweep), "--store", str(remote), "--ray", "local", "--quiet"]) == 0
    assert {kind for kind, _ in chunks} >= {"grid"}  # pairs went to Ray tasks
    want, got = results(local), results(remote)
    assert all(want[t] for t in want) and got == want


def test_asking_for_gpus_this_machine_lacks_is_an_error_before_anything_runs(tmp_path, ray_local, data, tiny,
                                                                            capsys):
    assert ray_local.cluster_resources().get("GPU", 0) == 0  # the test machines have none
    store = tmp_path / "s.duckdb"
    assert main(args(store, data, tiny, "--ray", "local", "--gpus-per-model", "1")) == 2
    err = capsys.readouterr().err
    assert "--gpus-per-model 1.0: 1 model actor(s) need 1 GPU(s), this machine has 0" in err
    assert len(err.strip().splitlines()) == 1 and not store.exists()


def test_decoders_decode_and_preprocess_on_cpu_workers(ray_local, data, tiny):
    """The CPU actor returns the model's inputs (a Prepared, not raw frames or strings), equal to
    what the local path prepares, from the weightless adapter the driver ships to it."""
    import torch

    from precompute.inputs.manifest import load_manifest
    from precompute.adapters.hf import Prepared
    from precompute.adapters.dispatch import load_adapter
    from precompute.batch.options import PrecomputeOptions
    from precompute.batch.runner import FrameCache, Precompute, RunPlan, model_inputs

    items = load_manifest(data).items[:3]
    for spec, plan in ((tiny["videomae"], RunPlan("r", 3, None, "original", {})),
                       (tiny["bert"], RunPlan("r", None, 3, "original", {}))):
        adapter = load_adapter(spec)
        boxed = [ray_local.put(adapter.preprocessor())]
        decoder = ray_backend._decoder_class(ray_local).remote([3], ["original"], {"caption_order": "first",
                                                                                    "caption_seed": 0})
        got, notes = ray_local.get(decoder.prepare.options(num_returns=2).remote(plan, items, "frames", 1, boxed))
        local = Precompute(None, load_manifest(data), "toy", options=PrecomputeOptions(frames=(3,), captions=(3,)),
                           progress=False)
        kind, raw, _ = local.batch_inputs(plan, items, FrameCache(local._wanted_frames).get)
        local.close()
        want, _ = model_inputs(adapter, kind, raw, [it.item_id for it in items], "frames")
        assert isinstance(got, Prepared) and set(got.inputs) == set(want.inputs)
        assert all(torch.equal(got.inputs[k], want.inputs[k]) for k in want.inputs)
        assert (got.owner is None) == (want.owner is None) and got.masked == want.masked
        ray_local.kill(decoder)


def test_an_address_where_nothing_listens_fails_fast_with_one_line(tmp_path):
    import socket
    import time

    from precompute.synthetic import tiny_models

    with socket.socket() as s:  # a port nothing listens on: bound, then released
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = make_dataset(tmp_path / "data", n=2, captions=1)
    bert = tiny_models.build_bert(tmp_path / "bert")
    address = f"127.0.0.1:{port}"
    t0 = time.monotonic()
    # a subprocess: ray.init on such an address used to retry for ever (a warning every 30 s)
    r = subprocess.run([sys.executable, "-m", "precompute.cli", "precompute", "--store", str(tmp_path / "s.duckdb"),
                        "--manifest", str(data), "--dataset", "toy", "--model", str(bert), "--captions", "1",
                        "--quiet", "--ray", address], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                       text=True, timeout=90)
    assert time.monotonic() - t0 < 60
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert f"--ray {address}: nothing answers at {address}" in lines[0]


@pytest.mark.parametrize("address, expected", [("127.0.0.1:6379", ("127.0.0.1", 6379)),
                                               ("ray://head:10001", ("head", 10001)),
                                               ("[::1]:6379", ("::1", 6379)), ("auto", None), ("head", None)])
def test_host_port_of_cluster_addresses(address, expected):
    assert ray_backend.host_port(address) == expected
