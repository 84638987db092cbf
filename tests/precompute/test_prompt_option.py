"""``--prompt eol|plain`` (TARA's comparison of one MLLM with and without the explicit one-word
limitation prompt): the plain prompt is the input alone, its embedding the hidden state of the
input's own last token (by hand); the prompt is recorded per run, and one MLLM precomputed under two
names with the two prompts is proposed as a pair by the Paper figures' prompt comparison."""

import json

import duckdb
import numpy as np
import pytest
import torch

from analysis.studies import analyze_store
from analysis.views import prompt_compare as PC
from precompute.synthetic import tiny_models
from precompute.cli import main
from precompute.adapters.dispatch import load_adapter
from precompute.adapters.hf import ModelError
from tests.precompute.helpers import make_dataset


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    return str(tiny_models.build_llava(tmp_path_factory.mktemp("m") / "llava"))


def test_the_plain_prompt_is_the_input_alone_and_its_last_token_is_pooled(llava):
    a = load_adapter(llava, device="cpu", prompt_template="none", prompt="plain")
    assert a.prompt_format("text") == "{text}" and a.prompt_format("video") == "{media}"
    got = a.embed_texts(["a red circle"])[:, 0]
    enc = a.processor(text=["a red circle"], return_tensors="pt")
    with torch.no_grad():
        hs = a.model(**enc, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(got, torch.stack([h[0, -1] for h in hs]).numpy(), rtol=1e-4, atol=1e-5)
    eol = load_adapter(llava, device="cpu", prompt_template="none")
    assert eol.prompt_format("text") == "{text}: Summarize above sentence in one word: "
    assert not np.allclose(eol.embed_texts(["a red circle"])[:, 0], got)


def test_an_unknown_prompt_is_named(llava):
    with pytest.raises(ModelError, match="--prompt must be one of eol, plain, got 'short'"):
        load_adapter(llava, device="cpu", prompt="short")


def test_two_names_two_prompts_are_compared(tmp_path, llava):
    data = make_dataset(tmp_path / "data", n=8, captions=1)
    store = tmp_path / "s.duckdb"
    common = ["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "toy", "--model", llava,
              "--frames", "1", "--captions", "1", "--prompt-template", "none", "--quiet"]
    assert main(common + ["--name", "llava-eol"]) == 0
    assert main(common + ["--name", "llava-plain", "--prompt", "plain"]) == 0
    con = duckdb.connect(str(store), read_only=True)
    prompts = {(m, json.loads(c).get("side"), json.loads(c)["prompt"]) for m, c in con.execute(
        "SELECT model, config FROM runs WHERE variant = 'original'").fetchall()}
    con.close()
    assert ("llava-plain", "text", "{text}") in prompts and ("llava-plain", "video", "{media}") in prompts
    assert ("llava-eol", "text", "{text}: Summarize above sentence in one word: ") in prompts
    analyze_store(store, k=3, n_boot=0, metrics=("mutual_knn",), maps=0, n_null=0, log=lambda m: None)
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert PC.prompt_pairs(con, "toy") == [("llava-eol", "llava-plain")]
        cv = PC.compare_view(con, "toy", "llava-eol", "llava-plain")
    finally:
        con.close()
    assert cv["error"] is None and cv["prompts"]["llava-plain"] == "{text}"
