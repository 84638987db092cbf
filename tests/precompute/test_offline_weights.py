"""``--model timm:NAME`` / ``open_clip:ARCH/TAG`` whose weights are not cached, offline: one line, no
retries, in seconds. Offline is ``HF_HUB_OFFLINE`` set, or the hub's endpoint refusing connections
(an endpoint on a closed local port: no test reaches the real hub). Regression test for issue #46:
an unreachable hub cost 88 s and 22 retry lines before the error.

The command runs in a child process whose imports are done before the clock starts, so the bound
measures LayerScope's handling, not how long torch takes to import on a busy machine."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.precompute.helpers import make_dataset

ROOT = Path(__file__).resolve().parents[2]

#: imports first, then the timed command; prints the seconds it took on its last line (stdout)
_TIMED = """
import sys, time
import huggingface_hub, torch, transformers
import {module}
from precompute.cli import main
start = time.monotonic()
code = main(sys.argv[1:])
print(code, time.monotonic() - start)
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: connections are refused


@pytest.mark.slow
@pytest.mark.parametrize("offline", ["HF_HUB_OFFLINE", "unreachable"])
@pytest.mark.parametrize("spec,module", [("timm:vit_small_patch16_224", "timm"),
                                         ("open_clip:ViT-B-32/laion2b_s34b_b79k", "open_clip")])
def test_uncached_weights_offline_fail_in_seconds_in_one_line(tmp_path, offline, spec, module):
    pytest.importorskip(module)
    manifest = make_dataset(tmp_path / "data", n=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=str(ROOT), HF_HOME=str(tmp_path / "hf"), TORCH_HOME=str(tmp_path / "torch"),
               XDG_CACHE_HOME=str(tmp_path / "cache"))  # no cached weights anywhere
    if offline == "HF_HUB_OFFLINE":
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
    done = subprocess.run([sys.executable, "-c", _TIMED.format(module=module), "precompute", "--store",
                           str(tmp_path / "s.duckdb"), "--manifest", str(manifest), "--dataset", "d", "--model", spec],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    code, seconds = done.stdout.split()[-2:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert int(code) != 0
    assert len(lines) == 1, done.stderr[-3000:]  # no retry lines, no traceback
    assert spec in lines[0] and "not in the local cache" in lines[0] and "--random-init" in lines[0]
    assert ("HF_HUB_OFFLINE is set" if offline == "HF_HUB_OFFLINE" else "cannot be reached") in lines[0]
    assert float(seconds) < 5.0


def test_the_cache_check_finds_weights_the_hub_cache_holds(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    from precompute.adapters.hooked import hub_weights_cached

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    assert not hub_weights_cached("timm/vit_small_patch16_224.augreg_in21k_ft_in1k")
    # the hub cache's layout: refs/main names the snapshot that holds the files
    repo = tmp_path / "models--timm--vit_small_patch16_224.augreg_in21k_ft_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "model.safetensors").write_bytes(b"weights")
    assert hub_weights_cached("timm/vit_small_patch16_224.augreg_in21k_ft_in1k")
    assert not hub_weights_cached("timm/vit_small_patch16_224.augreg_in21k_ft_in1k", "open_clip_model.safetensors")


@pytest.mark.slow
def test_a_weights_file_needs_no_hub_offline(tmp_path):
    """``--weights FILE`` brings every tensor: an uncached model name offline still runs (the demo's
    EfficientNet-Lite0 from its package, on a machine without the hub)."""
    timm = pytest.importorskip("timm")
    import torch

    weights = tmp_path / "w.pth"
    torch.save(timm.create_model("test_efficientnet", pretrained=False).state_dict(), weights)
    manifest = make_dataset(tmp_path / "data", n=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=str(ROOT), HF_HOME=str(tmp_path / "hf"), TORCH_HOME=str(tmp_path / "torch"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "precompute.cli", "precompute", "--store", str(tmp_path / "s.duckdb"),
                           "--manifest", str(manifest), "--dataset", "d", "--model", "timm:test_efficientnet",
                           "--weights", str(weights), "--frames", "1", "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
