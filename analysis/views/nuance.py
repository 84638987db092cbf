"""Views of the shared-space results for the Temporal page and the report: the ``same_space``
study's rows and the temporal study's nuanced-retrieval probes as long tables. Undefined values
stay as rows with their reason (never dropped); no maths beyond reshaping."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.storage import results as R
from analysis.storage.schema import fetch_one
from analysis.views.charts import lazy_altair


def same_space_studies(con, dataset) -> list[dict]:
    """Every ``same_space`` row of a dataset: ``[{"subject", "payload"}]`` (empty before analyze)."""
    if fetch_one(con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'result_studies'")[0] == 0:
        return []
    return [{"subject": r["subject"], "payload": r["payload"]}
            for r in R.read_studies(con, current=True, study="same_space", dataset=dataset)]


def pair_label(subject: str, payload: dict) -> str:
    """``video × text (space, n_f, n_c)``, e.g. ``clip × clip (joint, n_f=8, n_c=1)``."""
    a, _, b = subject.partition("|")
    return f"{a} × {b} ({payload['space']}, n_f={payload['n_frames']}, n_c={payload['n_captions']})"


def _finite(v):
    return None if v is None or not np.isfinite(v) else float(v)


def _depth(i: int, n: int) -> float:
    return i / max(1, n - 1)


def same_space_long(rows: list[dict]) -> pd.DataFrame:
    """One row per (pair, entry, metric): ``pair, space, layer_a, layer_b, depth, metric, value,
    ci_low, ci_high, better, note``; ``layer`` is ``"joint"`` for a dual encoder's joint layer."""
    out = []
    for r in rows:
        p = r["payload"]
        label = pair_label(r["subject"], p)
        reasons = (p.get("flags") or {}).get("reasons") or {}
        n = len(p["layers_a"])
        for name, m in p["metrics"].items():
            cis = m.get("ci") or [None] * n
            for e, v in enumerate(m["values"]):
                ci = cis[e] if e < len(cis) else None
                out.append({"pair": label, "space": p["space"], "layer": "joint" if p["space"] == "joint" else str(
                            p["layers_a"][e]), "layer_a": p["layers_a"][e], "layer_b": p["layers_b"][e],
                            "depth": _depth(e, n), "metric": name, "value": _finite(v),
                            "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
                            "better": "higher" if m["higher_is_better"] else "lower",
                            "note": reasons.get(name, {}).get(str(e), "")})
    return pd.DataFrame(out)


def _entry_label(e: dict) -> str:
    return f"{e['video']} × {e['text']} ({e['space']})"


def _per_layer(entries, value_key="per_layer", **extra) -> list[dict]:
    """One row per (pair, layer) of a two-way choice probe: ``accuracy`` (0.5 is chance), its 95%
    Wilson interval over ``n_items`` choices (``ci_low``, ``ci_high``; approximate, as ties count ½),
    ``depth`` (``None`` on a dual encoder's joint layer: one named layer has no depth)."""
    from analysis.methods.intervals import wilson_interval

    out = []
    for e in entries:
        n = len(e["layers_a"])
        joint = e["space"] == "joint"
        for i, v in enumerate(e[value_key]):
            acc = _finite(v)
            ci = wilson_interval(acc, e.get("n_items")) if acc is not None else None
            out.append({"pair": _entry_label(e), "layer": "joint" if joint else str(e["layers_a"][i]),
                        "depth": None if joint else _depth(i, n), "accuracy": acc,
                        "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None, "n_items": e.get("n_items"),
                        "ties": (e.get("ties") or [None] * n)[i], "note": (e.get("reasons") or {}).get(str(i), ""),
                        **extra})
    return out


def nuance_view(payload: dict) -> dict:
    """Long tables of the temporal study's shared-space probes: ``chiral`` and ``time_reversal``
    (accuracy per layer, 0.5 is chance), ``gallery`` (mAP per layer and gallery setting; a setting's
    own name is one query per action, ``"<setting>, item queries"`` one per item's caption) and
    ``negation`` (Recall@k per layer of each item's caption and of its negated caption)."""
    chiral = _per_layer(payload.get("chiral", []))
    rev = _per_layer(payload.get("time_reversal", []))
    gallery = []
    for e in payload.get("chiral_gallery", []):
        n = len(e["layers_a"])
        # one query per action (TARA's protocol) is the setting's own name; the mAP with one query per
        # item's caption is labelled as such
        for suffix, values_key, n_key, protocol in (("", "map", "n_queries", "one per action"),
                                                    (", item queries", "map_item_queries", "n_item_queries",
                                                     "one per item")):
            for s, values in e[values_key].items():
                for i, v in enumerate(values):
                    gallery.append({"pair": _entry_label(e), "setting": s + suffix,
                                    "depth": None if e["space"] == "joint" else _depth(i, n),
                                    "layer": "joint" if e["space"] == "joint" else str(e["layers_a"][i]),
                                    "mAP": _finite(v), "queries": e[n_key], "query protocol": protocol,
                                    "note": (e.get("reasons") or {}).get(f"{s} {i}", "")})
    negation = []
    for e in payload.get("negation", []):
        n = len(e["layers_a"])
        for key, values in e["recall"].items():
            kind, _, k = key.partition("@")
            for i, v in enumerate(values):
                negation.append({"pair": _entry_label(e), "queries": kind, "k": int(k),
                                 "depth": None if e["space"] == "joint" else _depth(i, n),
                                 "layer": "joint" if e["space"] == "joint" else str(e["layers_a"][i]),
                                 "recall": _finite(v), "n_queries": e.get("n_queries"),
                                 "note": (e.get("reasons") or {}).get(str(i), "")})
    return {"chiral": pd.DataFrame(chiral), "time_reversal": pd.DataFrame(rev), "gallery": pd.DataFrame(gallery),
            "negation": pd.DataFrame(negation)}


CHANCE_CHOICE = 0.5  # a two-way choice at random


def choice_charts(df: pd.DataFrame, *, height: int = 260) -> list:
    """Charts of a two-way choice probe (:func:`nuance_view`'s ``chiral`` / ``time_reversal``): layers
    with a depth as lines on relative depth [0, 1], joint layers (no depth) as points per pair in a
    second chart; both with the 95% interval as error bars and chance (0.5) as a dashed rule."""
    from analysis.views.charts import lazy_altair

    alt = lazy_altair()
    chance = alt.Chart(pd.DataFrame({"chance": [CHANCE_CHOICE], "what": ["chance 0.5"]})).mark_rule(
        strokeDash=[4, 4], color="gray").encode(y="chance:Q", tooltip=[alt.Tooltip("what:N", title="rule")])
    y = alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1]), title="accuracy (0.5 = chance)")
    tips = [alt.Tooltip("pair:N", title="pair"), alt.Tooltip("layer:N", title="layer"),
            alt.Tooltip("accuracy:Q", format=".3f"), alt.Tooltip("ci_low:Q", format=".3f", title="95% CI low"),
            alt.Tooltip("ci_high:Q", format=".3f", title="95% CI high"), alt.Tooltip("ties:Q", title="ties"),
            alt.Tooltip("n_items:Q", title="items"), alt.Tooltip("note:N", title="note")]
    legend = alt.Legend(orient="bottom", labelLimit=0, columns=1)
    out = []
    deep = df[df["depth"].notna()] if len(df) else df
    if len(deep):
        x = alt.X("depth:Q", title="relative depth (0 = embeddings, 1 = last layer)", scale=alt.Scale(domain=[0, 1]),
                  axis=alt.Axis(labelAngle=0, titleLimit=0))
        base = alt.Chart(deep).encode(x=x, color=alt.Color("pair:N", legend=legend))
        out.append(alt.layer(base.mark_errorbar().encode(y=alt.Y("ci_low:Q", title="accuracy (0.5 = chance)",
                                                                  scale=alt.Scale(domain=[0, 1])), y2="ci_high:Q"),
                             base.mark_line(point=True).encode(y=y, tooltip=tips), chance).properties(height=height))
    joint = df[df["depth"].isna()] if len(df) else df
    if len(joint):
        x = alt.X("pair:N", title="joint layer of each pair", axis=alt.Axis(labelAngle=0, labelLimit=0))
        base = alt.Chart(joint).encode(x=x, color=alt.Color("pair:N", legend=None))
        out.append(alt.layer(base.mark_errorbar(thickness=2).encode(
                                 y=alt.Y("ci_low:Q", title="accuracy (0.5 = chance)", scale=alt.Scale(domain=[0, 1])),
                                 y2="ci_high:Q"),
                             base.mark_point(filled=True, size=80).encode(y=y, tooltip=tips), chance)
                   .properties(height=height))
    return out


def below_chance_text(df: pd.DataFrame, what: str) -> str:
    """One line on the values whose whole 95% interval lies below chance 0.5 (the space prefers the
    wrong answer: the temporal opposite, the reversed video), with their count; ``""`` when none."""
    if not len(df) or "ci_high" not in df:
        return ""
    low = df[df["ci_high"].notna() & (df["ci_high"] < CHANCE_CHOICE)]
    if not len(low):
        return ""
    parts = [f"{r.pair} layer {r.layer}: {r.accuracy:.3f} (95% CI {r.ci_low:.3f}–{r.ci_high:.3f})"
             for r in low.head(3).itertuples()]
    more = f"; and {len(low) - 3} more" if len(low) > 3 else ""
    return (f"{len(low)} {what} value(s) lie below chance with their whole interval: the space systematically "
            f"prefers the wrong answer, which is a signal, not noise ({'; '.join(parts)}{more}).")


def undefined_text(df: pd.DataFrame, what: str, value_col: str) -> str:
    """One line on the undefined (not drawn) values of a long table: their count, then each distinct
    reason once with how many values it covers (never one sentence per layer); ``""`` when none."""
    if not len(df) or value_col not in df:
        return ""
    missing = df[df[value_col].isna()]
    if not len(missing):
        return ""
    reasons = missing["note"].fillna("").replace("", "undefined") if "note" in missing else pd.Series(
        ["undefined"] * len(missing))
    # notes that differ only in a number (a scale, a layer) are one reason: counted, the first one shown
    groups: dict[str, list[str]] = {}
    for why in reasons:
        groups.setdefault(_blank(why), []).append(why)
    parts = [(f"{len(g)} × {g[0]}" + (" (values differ)" if len(set(g)) > 1 else "")) if len(g) > 1 else g[0]
             for g in groups.values()]
    return f"{len(missing)} of {len(df)} {what} value(s) undefined (not drawn): " + "; ".join(parts)


def interval_coverage_text(sel: pd.DataFrame) -> str:
    """What the same-space chart draws of uncertainty: how many of its values have a bootstrap
    interval (drawn as error bars) and how many have none (not resampled: MMD and Fréchet; the
    bootstrap off; an undefined resample), so the caption never promises bands that rows lack."""
    if not len(sel):
        return ""
    defined = sel[sel["value"].notna()]
    has = defined["ci_low"].notna() & defined["ci_high"].notna()
    n, k = len(defined), int(has.sum())
    if n == 0:
        return "No value is defined here, so no interval is drawn."
    if k == n:
        return f"Error bars: 95% bootstrap intervals over items, on all {n} value(s)."
    if k == 0:
        return (f"No interval: none of the {n} value(s) was resampled (MMD and Fréchet never are; otherwise the "
                "bootstrap was off): point estimates only.")
    return (f"Error bars: 95% bootstrap intervals over items on {k} of {n} value(s); {n - k} have none "
            "(not resampled) and are point estimates.")


def joint_points_chart(df: pd.DataFrame, y: str, colour: str, *, height: int = 220):
    """The joint-layer rows of a probe table (no depth: a dual encoder's one shared layer) as points
    per pair, coloured by ``colour``, y in [0, 1]; ``None`` when there are none."""
    from analysis.views.charts import lazy_altair

    alt = lazy_altair()
    joint = df[df["depth"].isna() & df[y].notna()] if len(df) and "depth" in df else df.iloc[0:0]
    if not len(joint):
        return None
    return alt.Chart(joint).mark_point(filled=True, size=80).encode(
        x=alt.X("pair:N", title="joint layer of each pair", axis=alt.Axis(labelAngle=0, labelLimit=0)),
        y=alt.Y(f"{y}:Q", scale=alt.Scale(domain=[0, 1])), xOffset=f"{colour}:N",
        color=alt.Color(f"{colour}:N", legend=alt.Legend(orient="bottom", labelLimit=0, columns=1)),  # a phone's width
        tooltip=[c for c in joint.columns if c != "depth"]).properties(height=height)


def same_space_chart(sel: pd.DataFrame, metric: str, height: int = 280):
    """One same-space metric of one pair per layer with its interval (rows of :func:`same_space_long`);
    a pair without layers (a dual encoder's joint layer) on a nominal axis."""
    alt = lazy_altair()
    better = sel["better"].iloc[0] if len(sel) else "higher"
    x = alt.X("layer_a:O", title="layer") if (sel["space"] == "layers").all() else alt.X("layer:N", title=None)
    base = alt.Chart(sel).encode(x=x)
    band = base.mark_errorbar().encode(y=alt.Y("ci_low:Q", title=f"{metric} ({better} is better)"), y2="ci_high:Q")
    line = base.mark_line(point=True).encode(y="value:Q", tooltip=["layer", "value", "ci_low", "ci_high", "note"])
    return (band + line).properties(height=height)


def gallery_chart(deep: pd.DataFrame, height: int = 260):
    """Chiral-gallery mAP per setting on relative depth (:func:`nuance_view`'s ``gallery``, rows with a depth)."""
    alt = lazy_altair()
    return alt.Chart(deep).mark_line(point=True).encode(
        x=alt.X("depth:Q", title="relative depth", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("mAP:Q", scale=alt.Scale(domain=[0, 1])),
        color="setting:N", strokeDash="pair:N", tooltip=["pair", "setting", "layer", "mAP", "queries", "note"]
    ).properties(height=height)


def negation_chart(deep: pd.DataFrame, height: int = 260):
    """Recall@k of captions and their negated forms on relative depth (:func:`nuance_view`'s
    ``negation``, rows with a depth)."""
    alt = lazy_altair()
    return alt.Chart(deep).mark_line(point=True).encode(
        x=alt.X("depth:Q", title="relative depth", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("recall:Q", scale=alt.Scale(domain=[0, 1])),
        color="queries:N", strokeDash="k:N", detail="pair:N",
        tooltip=["pair", "queries", "k", "layer", "recall", "n_queries", "note"]).properties(height=height)


def _blank(text: str) -> str:
    """``text`` with its numbers and parenthesised details blanked: the reason, without the values."""
    key = re.sub(r"\s*\([^()]*\)", "", str(text).strip())  # "(layers 0, 3)", "(0.12)": details, not the reason
    return re.sub(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", key)


def _reason_key(note: str) -> tuple[str, str | None, str]:
    """``(key, subject, reason)`` of a note shaped ``"subject: reason"`` (else no subject); the key is
    the reason with its numbers blanked, so notes that differ only in a layer index or a value group."""
    subject, sep, reason = note.partition(": ")
    if not sep:
        subject, reason = None, note
    return _blank(reason), subject, reason


def collapse_notes(notes, *, named: int = 3) -> list[str]:
    """Notes said once per reason: near-identical notes (same reason once numbers are blanked, whatever
    their subject before ``": "``) become one line with their count and the first ``named`` subjects;
    a reason met once is kept as written. Order: each reason where it first appears.

    >>> collapse_notes(["vit layer 1: constant", "vit layer 2: constant", "dino: 3 ties"])
    ['2 × constant (vit layer 1, vit layer 2)', 'dino: 3 ties']
    """
    groups: dict[str, list[tuple[str | None, str, str]]] = {}
    for note in notes:
        if note:
            key, subject, reason = _reason_key(str(note))
            groups.setdefault(key, []).append((subject, reason, str(note)))
    out = []
    for entries in groups.values():
        if len(entries) == 1:
            out.append(entries[0][2])
            continue
        subjects = list(dict.fromkeys(s for s, _, _ in entries if s))
        reason = entries[0][1] if len({r for _, r, _ in entries}) == 1 else f"{entries[0][1]} (values differ)"
        who = ", ".join(subjects[:named]) + (f" and {len(subjects) - named} more" if len(subjects) > named else "")
        out.append(f"{len(entries)} × {reason}" + (f" ({who})" if who else ""))
    return out
