"""`--prompt` and `--prompt-template` shape MLLM runs only: given with no MLLM they are refused in one
line before a store is made, never ignored without a word."""

import json

import pytest

from precompute.cli import main


@pytest.mark.parametrize("flag", [["--prompt", "plain"], ["--prompt-template", "none"]])
def test_an_mllm_flag_without_an_mllm_is_refused(tmp_path, capsys, flag):
    from precompute.synthetic import tiny_models

    tiny_models.build_bert(tmp_path / "bert", layers=1)
    manifest = tmp_path / "t.jsonl"
    manifest.write_text("".join(json.dumps({"id": f"s{i}", "captions": [f"a dog {i}"]}) + "\n" for i in range(4)))
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(manifest), "--dataset", "d", "--model",
                 str(tmp_path / "bert"), "--captions", "1", "--quiet", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{flag[0]} {flag[1]}" in err and "MLLMs only" in err and "text" in err
    assert not store.exists()
