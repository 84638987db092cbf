"""Which ``--name`` goes with which ``--model``, and the name a model folder gets by default.

``--name`` may be given for some models and not others: each ``--name`` names the ``--model`` given
just before it, or the model it names explicitly as ``--name MODEL=NAME`` (``MODEL`` one of the given
``--model`` values; any other value is a plain name, ``=`` included: ``--name lr=3e-4``). Plain names that do not
each follow a model of their own but are as many as the models name them in order (``--model A
--model B --name a --name b``, as before). A model without a name gets :func:`default_name`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


class NameArg(str):
    """A ``--name`` value that remembers how many ``--model`` flags came before it (``after``)."""

    after: int | None

    def __new__(cls, value: str, after: int | None = None):
        self = super().__new__(cls, value)
        self.after = after
        return self


class NameAfterModel(argparse.Action):
    """``--name``: appends a :class:`NameArg` marked with the number of ``--model`` values parsed so far."""

    def __call__(self, parser, namespace, values, option_string=None):
        entries = list(getattr(namespace, self.dest, None) or [])
        entries.append(NameArg(values, len(getattr(namespace, "model", None) or [])))
        setattr(namespace, self.dest, entries)


def _model_and_name(text: str, models: list[str]) -> tuple[str, str, list[int]]:
    """``(model, name, indices of the --model values it names)`` of a ``MODEL=NAME`` value: split at the
    first ``=`` whose left side names a given ``--model`` (a spec may hold ``=`` itself, as
    ``timm:vit?img_size=32``); no such split: a plain name, ``=`` and all (``lr=3e-4``), ``matches`` empty."""
    at = text.find("=")
    while at >= 0:
        key = text[:at]
        matches = [i for i, spec in enumerate(models) if _same_model(key, spec)]
        if matches:
            return key, text[at + 1:], matches
        at = text.find("=", at + 1)
    return text, text, []


def _same_model(key: str, spec: str) -> bool:
    if key == spec:
        return True
    return os.path.exists(key) and os.path.exists(spec) and os.path.abspath(key) == os.path.abspath(spec)


def resolve_names(models: list[str], names) -> list[str | None]:
    """The store name asked for each of ``models`` (None: its default), from the ``--name`` values
    ``names`` (plain strings, or :class:`NameArg` that know their place on the command line).
    Raises ``ValueError`` naming the ``--name`` at fault."""
    names = list(names or [])
    out: list[str | None] = [None] * len(models)
    plain = []
    for n in names:
        key, value, matches = _model_and_name(str(n), models)
        if len(matches) > 1:
            raise ValueError(f"--name {n}: --model {key} is given {len(matches)} times; put a plain --name right "
                             "after each")
        if matches:
            _assign(out, models, matches[0], value, n)
        else:
            plain.append(n)
    if not plain:
        return out
    try:
        return _by_place(out, models, plain)
    except ValueError:
        if len(plain) == len(models) == len(names):
            return [str(n) for n in plain]  # one plain name per model, not each after its own: in order
        raise


def _by_place(out: list, models: list[str], plain: list) -> list[str | None]:
    """``out`` with each plain name given to the ``--model`` before it."""
    out = list(out)
    for n in plain:
        after = getattr(n, "after", None)
        if after is None:
            raise ValueError(f"--name was given {len(plain)} time(s) for {len(models)} model(s); give one per "
                             "--model, or --name MODEL=NAME for some of them")
        if after == 0:
            raise ValueError(f"--name {n} comes before any --model; put it after the --model it names")
        _assign(out, models, after - 1, str(n), n)
    return out


def _assign(out: list, models: list[str], i: int, value: str, given) -> None:
    if not value.strip():
        raise ValueError(f"--name {given}: the name is empty")
    if out[i] is not None:
        raise ValueError(f"--model {models[i]} is named twice ({out[i]} and {value}); give it one --name")
    out[i] = value


def default_name(spec: str) -> str:
    """Store name of a model given without ``--name``: the hub id (or loader spec) as given; a local
    folder's own name, a symbolic link's name rather than its target's (the name the user chose); a
    folder named ``model`` inside an installed Python package (a sentence-transformers model shipped on
    PyPI), its package's distribution name."""
    if not os.path.exists(spec):
        return spec
    folder = Path(os.path.abspath(spec))  # absolute without resolving links: "." and "x/" have names
    if folder.name == "model" and (folder.parent / "__init__.py").is_file():
        return _distribution(folder.parent.name) or folder.parent.name
    return folder.name


def _distribution(module: str) -> str | None:
    """The installed distribution that provides the top-level ``module``, or None."""
    from importlib.metadata import packages_distributions

    found = packages_distributions().get(module) or []
    return found[0] if found else None
