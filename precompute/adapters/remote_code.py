"""Models that bring their own Python code (``auto_map`` in their config), known without running it.

``--trust-remote-code`` (``trust_remote_code = true`` in a sweep) lets transformers import a model's
own configuration and modeling files: arbitrary code, run with the user's rights. LayerScope warns in
one line before it runs any, and ``sweep plan``, documented as loading no model, never runs it: it
plans such a model from its ``config.json`` read as plain JSON (:class:`RemoteCodeProbe`) and says
what only a load can tell (layers, width, pooling).
"""

from __future__ import annotations

import json
from pathlib import Path

#: the one-line warning before a remote-code model's code first runs (``{name}``: the model)
WARNING = ("warning: {name} brings its own Python code (auto_map in its config.json); --trust-remote-code "
           "runs that arbitrary code with your user's rights: use it only for models whose code you trust")


def remote_code_config(spec: str) -> dict | None:
    """The ``config.json`` of ``spec`` as plain JSON when it names its own code (``auto_map``), else
    None (also for ``timm:`` / ``open_clip:`` specs and for a config that cannot be read here: the
    probe then reports that). A local folder's file is read directly; a hub id's through
    transformers' config-file download (a JSON file; no code is imported)."""
    if ":" in spec.split("/", 1)[0] and not Path(spec).exists():  # timm:NAME, open_clip:ARCH/...
        return None
    local = Path(spec)
    try:
        if local.exists():
            data = json.loads((local / "config.json").read_text(encoding="utf-8"))
        else:
            from transformers import PretrainedConfig

            data, _ = PretrainedConfig.get_config_dict(spec)
    except Exception:  # missing, unreadable, offline: not ours to report (the probe says what is wrong)
        return None
    return data if isinstance(data, dict) and data.get("auto_map") else None


class RemoteCodeProbe:
    """What ``sweep plan`` needs of a remote-code model (:func:`precompute.batch.known_runs.known_identity`),
    from its config JSON alone: modality and pooling by the loader's own rules
    (:func:`precompute.adapters.hf.classify_hooked` / ``classify`` on a plain config object), the
    revision (folder fingerprint, or the hub commit), and no layers (None: known after loading)."""

    def __init__(self, spec: str, config: dict, *, modality: str | None = None, blocks: str | None = None,
                 random_init: bool = False):
        from transformers import PretrainedConfig

        from . import hf

        self.spec = spec
        local = Path(spec)
        self.is_local = local.exists()
        self.source = str(local.resolve()) if self.is_local else spec
        self.random_init = bool(random_init)
        # a plain PretrainedConfig holding the JSON's fields: the rules below read only attributes
        self.config = PretrainedConfig.from_dict({k: v for k, v in config.items() if k != "model_type"})
        self.config.model_type = config.get("model_type", "")
        self.config.auto_map = config.get("auto_map")
        self._commit = config.get("_commit_hash")
        # the same rules Adapter.__init__ applies (private helpers of precompute.adapters.hf, reused so
        # the plan cannot drift from what a load decides)
        if hf.is_remote_type(self.config) or blocks:
            self.modality, self.pooling = hf.classify_hooked(self.config, modality, spec)
        else:
            self.modality, self.pooling = hf.classify(self.config, modality)

    def planned_layers(self):
        return None  # the model's own code decides its layers: known once it is loaded

    def config_revision(self) -> str | None:
        """As :meth:`precompute.adapters.hf.Adapter.config_revision` for trained weights; a random-init
        build's revision hashes the config class's serialisation, which only its code can give: None
        (unknown to the plan)."""
        from .hf import local_revision

        if self.random_init:
            return None
        return local_revision(Path(self.source)) if self.is_local else (self._commit or "unknown")


def cannot_know(name: str) -> str:
    """The plan's line about a remote-code model it did not run."""
    return (f"note: {name} brings its own code (remote code), not run by the plan: its layers, width and pooling "
            "are known once `sweep run` loads it (its runs' sizes show as ?)")


def warning_line(name: str) -> str:
    return WARNING.format(name=name)

