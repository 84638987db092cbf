"""Issue #29 item 8: a sentence-transformers folder's ``modules.json`` (Pooling config, Normalize)
makes the ``default`` layer, so ``default`` equals ``SentenceTransformer.encode()``; the numbered
layers keep the protocol's masked token mean. References: sentence-transformers itself."""

import json
import shutil

import numpy as np
import pytest
import torch

from precompute.demo import minilm_path
from precompute.adapters.hf import ModelError
from precompute.adapters.dispatch import load_adapter
from precompute.adapters.sentence_head import HeadError, SentenceHead, pooling_mode, read_head

# different lengths, so padding (and the mask) matters for every pooling mode
TEXTS = ["a red circle", "a blue square moves left quickly over a striped background", "two dogs run"]


def _tiny_st(root, *, pooling: str, normalize: bool):
    """A tiny random BERT with all-MiniLM-L6-v2's tokenizer, saved by sentence-transformers itself
    with the given Pooling mode (and Normalize): the folder layout users hand LayerScope."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    bert = root / "bert"
    if not bert.exists():
        tok = AutoTokenizer.from_pretrained(minilm_path())
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64)
        BertModel(cfg, add_pooling_layer=False).save_pretrained(bert)
        tok.save_pretrained(bert)
    modules = [Transformer(str(bert), max_seq_length=48), Pooling(32, pooling_mode=pooling)]
    out = root / f"st_{pooling}{'_norm' if normalize else ''}"
    SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device="cpu").save(str(out))
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("st")
    return {"cls": _tiny_st(root, pooling="cls", normalize=True), "mean": _tiny_st(root, pooling="mean", normalize=False)}


def _default_and_encode(folder):
    from sentence_transformers import SentenceTransformer

    a = load_adapter(str(folder), named_layers=True)
    out = a.embed_texts(TEXTS)
    (idx,) = [int(i) for i, n in a.layer_names.items() if n == "default"]
    want = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    return a, out, out[idx, :, :want.shape[1]], want


def _cosines(x, y):
    return (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


@pytest.mark.parametrize("kind", ["cls", "mean"])
def test_default_equals_sentence_transformers_encode(folders, kind):
    a, out, got, want = _default_and_encode(folders[kind])
    np.testing.assert_allclose(_cosines(got, want), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert a.st_head == SentenceHead(kind, normalize=kind == "cls")
    cfg = a.info().config["layerscope"]
    assert cfg["sentence_transformers"] == {"pooling": kind, "normalize": kind == "cls"}
    assert cfg["default_pooling"].startswith(f"sentence-transformers {kind}")


def test_numbered_layers_stay_the_masked_token_mean(folders):
    """The CLS head changes default only: the last numbered layer is the mean over real tokens of
    last_hidden_state (DESIGN §4 captions), computed here from transformers directly."""
    from transformers import AutoModel, AutoTokenizer

    a, out, got, _ = _default_and_encode(folders["cls"])
    tok = AutoTokenizer.from_pretrained(folders["cls"])
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = AutoModel.from_pretrained(folders["cls"])(**enc).last_hidden_state
    m = enc["attention_mask"][:, :, None].float()
    mean = ((h * m).sum(1) / m.sum(1)).numpy()
    np.testing.assert_allclose(out[a.n_hidden - 1], mean, rtol=1e-4, atol=1e-5)
    cls = torch.nn.functional.normalize(h[:, 0], dim=1).numpy()
    np.testing.assert_allclose(got, cls, rtol=1e-4, atol=1e-5)
    assert not np.allclose(got, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-3)


def test_real_minilm_default_equals_encode():
    """all-MiniLM-L6-v2 (legacy ``pooling_mode_mean_tokens`` config, Normalize, max_seq_length 256)."""
    a, _, got, want = _default_and_encode(minilm_path())
    assert a.st_head == SentenceHead("mean", normalize=True) and a.max_length == 256
    np.testing.assert_allclose(_cosines(got, want), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("mode", ["cls", "mean", "max", "mean_sqrt_len_tokens", "lasttoken"])
@pytest.mark.parametrize("normalize", [False, True])
def test_head_matches_sentence_transformers_modules(mode, normalize):
    """Every mode on right- and left-padded masks against sentence-transformers' own Pooling/Normalize."""
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    g = torch.Generator().manual_seed(1)
    tokens = torch.randn(4, 6, 5, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])
    feats = Pooling(5, pooling_mode=mode)({"token_embeddings": tokens, "attention_mask": mask})
    if normalize:
        feats = Normalize()(feats)
    got = SentenceHead(mode, normalize)(tokens, mask)
    torch.testing.assert_close(got, feats["sentence_embedding"], rtol=1e-5, atol=1e-6)


def test_pooling_config_forms():
    assert pooling_mode({"pooling_mode": "cls"}, "x") == "cls"
    assert pooling_mode({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "x") == "cls"
    assert pooling_mode({"pooling_mode_mean_tokens": False}, "x") == "mean"  # none set: mean, as ST reads it
    with pytest.raises(HeadError, match="weightedmean"):
        pooling_mode({"pooling_mode": "weightedmean"}, "x")
    with pytest.raises(HeadError, match="not one LayerScope reproduces"):
        pooling_mode({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, "x")


def test_a_head_it_cannot_reproduce_is_refused_by_name(folders, tmp_path):
    folder = tmp_path / "dense"
    shutil.copytree(folders["mean"], folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(HeadError, match="Dense"):
        read_head(folder)
    with pytest.raises(ModelError, match="Dense.*--no-named-layers"):
        load_adapter(str(folder), named_layers=True)
    a = load_adapter(str(folder), named_layers=False)  # no default layer stored: the head does not matter
    assert a.st_head is None and "default" not in a.layer_names.values()


def test_a_plain_transformers_folder_has_no_head(folders):
    assert read_head(folders["cls"] / ".." / "bert") is None
    a = load_adapter(str(folders["cls"] / ".." / "bert"), named_layers=True)
    assert a.st_head is None and "sentence_transformers" not in a.info().config["layerscope"]


def test_sweep_plan_pins_the_head_in_the_run_identity(folders):
    """A run made before the head was read (no ``sentence_transformers`` key) must not count as done."""
    from precompute.adapters.dispatch import probe_model
    from precompute.batch.known_runs import known_identity

    known = known_identity(probe_model(str(folders["cls"]), named_layers=True))
    info, unknown = known.info, known.unknown
    assert info.config["layerscope"]["sentence_transformers"] == {"pooling": "cls", "normalize": True}
    assert "sentence_transformers" not in unknown


def test_precompute_records_the_head_and_stores_encode_as_default(folders, tmp_path):
    """Through the CLI: the run config says how default was made (``default_pooling``) and carries the
    head in the run identity; the stored default layer is encode() of the caption."""
    import duckdb

    from analysis.storage.store import load_embeddings
    from precompute.cli import main
    from precompute.inputs.manifest import load_manifest
    from sentence_transformers import SentenceTransformer
    from tests.precompute.helpers import make_dataset

    manifest = make_dataset(tmp_path / "d", n=4, captions=1)
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(manifest), "--dataset", "d",
                 "--model", str(folders["cls"]), "--name", "st", "--captions", "1", "--quiet"]) == 0
    with duckdb.connect(str(store), read_only=True) as con:
        (cfg,) = [json.loads(r[0]) for r in con.execute("SELECT config FROM runs WHERE model = 'st' AND variant = 'original'").fetchall()]
    assert cfg["default_pooling"] == "sentence-transformers cls + normalize"
    assert cfg["sentence_transformers"] == {"pooling": "cls", "normalize": True}
    assert "sentence_transformers" not in cfg["not_identity"] and "default_pooling" in cfg["not_identity"]
    stored = load_embeddings(store, model="st", dataset="d", n_captions=1)
    default = stored[int(next(i for i, n in cfg["layer_names"].items() if n == "default"))]
    captions = [it.captions[0] for it in load_manifest(manifest).items]
    want = SentenceTransformer(str(folders["cls"]), device="cpu").encode(captions, convert_to_numpy=True)
    np.testing.assert_allclose(_cosines(default[:, :want.shape[1]], want), 1.0, atol=1e-6)
