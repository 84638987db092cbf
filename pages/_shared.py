"""Glue every page shares: the store path, cached views read through short-lived read-only
connections, URL-backed selections, downloads and the sidebar. No SQL and no maths here either:
data comes from ``analysis.views``.

Connections: DuckDB locks the store file per process, and a reader holding it refuses every
writer (``layerscope analyze``, ``precompute``, ``downstream import``). So no connection is kept:
each view opens the store read-only, reads, and closes (:func:`analysis.storage.store.read_store`); results
are cached by the store's stamp (file and write-ahead-log mtime and size), so a refresh after a
write shows the new results. While a writer holds the store (an analysis holds it for its whole run),
each view reads a copy of the store as last saved (:func:`analysis.storage.store.snapshot`), and the
page says so once.

Text: every string that comes from the store or the URL goes through :func:`analysis.views.text.md_escape`
before any Markdown-rendering element (markdown, caption, info, warning, widget labels).
"""

from __future__ import annotations

import os
import sys
import time

import streamlit as st

from analysis import jobs, report

from analysis.views import store_info, url_state
from analysis.storage.store import StoreBusy, read_store, snapshot, store_stamp
from analysis.views.choices import choose
from analysis.views.store_info import UNTRAINED_ICON
from analysis.views.text import md_escape

DEFAULT_STORE = "data/demo.duckdb"


def store_path() -> str:
    """``--store`` after ``--`` on the streamlit command line, else $LAYERSCOPE_STORE, else the demo store."""
    argv = sys.argv
    if "--store" in argv and argv.index("--store") + 1 < len(argv):
        return argv[argv.index("--store") + 1]
    return os.environ.get("LAYERSCOPE_STORE", DEFAULT_STORE)


@st.cache_data(show_spinner=False, max_entries=256)
def cached(name: str, path: str, stamp: tuple, *args, choices: tuple = (), _fn, _wait: float = 2.0):
    """``_fn(con, *args, **dict(choices))`` on a connection opened for this call only. ``name`` (the
    function's module and name) keys the cache in its place; ``choices``: keyword arguments as sorted
    ``(name, value)`` pairs; ``_wait``: seconds to wait for a writer's lock; neither underscored argument
    is part of the cache key."""
    return read_store(path, _fn, *args, wait=_wait, **dict(choices))


@st.cache_data(show_spinner=False, max_entries=4)
def _report_files(path: str, stamp: tuple):
    data = read_store(path, report.report_data, path)  # the store is let go before rendering
    return report.render_report_files(data)


#: the last value of each view, shown while a writer holds the store (bounded: cleared when large)
_LAST: dict = {}
#: when each store was last found held by a writer: later reads then do not wait for it again
_BUSY: dict = {}


def _wait(path) -> float:
    return 0.0 if time.monotonic() - _BUSY.get(path, -1e9) < 10 else 2.0


def new_run():
    """Called once at the top of every script run (app.py): notes said once per page are reset, and so
    is the list of URL parameters the page owns."""
    st.session_state["_busy_noted"] = False
    st.session_state["_owned_params"] = set()


#: Streamlit's frontend pushes a browser-history entry for every change of the query string, so each URL
#: write that only mirrors a widget (a page's defaults, a changed selectbox) was one more press of Back,
#: and Back from a page landed on the same page with its defaults missing, which wrote them again. A
#: change of the query alone now replaces the current entry; a change of page (the path) still pushes.
_QUERY_WRITES_REPLACE = """<script>
(() => {
  const h = window.history;
  if (h.layerscopeQueryReplaces) return;
  const push = h.pushState.bind(h);
  h.pushState = (state, title, url) => {
    const next = new URL(url === undefined || url === null ? location.href : url, location.href);
    return next.pathname === location.pathname ? h.replaceState(state, title, url) : push(state, title, url);
  };
  h.layerscopeQueryReplaces = true;
})();
</script>"""


def query_writes_replace_history():
    """Called once at the top of every script run (app.py), before any page writes the URL: see
    :data:`_QUERY_WRITES_REPLACE`. In the sidebar, so the main column keeps no empty element."""
    st.sidebar.html(_QUERY_WRITES_REPLACE, unsafe_allow_javascript=True)


def own_params(*params: str):
    """Mark URL parameters as this page's (the ``pick*`` helpers and :func:`url_list` do it themselves;
    pages that read ``st.query_params`` directly call this): :func:`prune_params` keeps them."""
    st.session_state.setdefault("_owned_params", set()).update(params)


def prune_params(page: str):
    """After ``page`` ran to its end (app.py): remember the URL parameters it owns, and drop those another
    page of this session owns that it does not (and that are not :data:`CARRIED`), so no page keeps
    another page's selections. A page that stopped early (no store, the store busy, missing results)
    never gets here, so a link's parameters are not lost then."""
    owned = st.session_state.get("_owned_params", set())
    owners = st.session_state.setdefault("_param_owners", {})
    owners[page] = set(owned)
    others = set().union(*(s for p, s in owners.items() if p != page))
    for param in url_state.stale_params(list(st.query_params.keys()), owned, others, CARRIED):
        del st.query_params[param]


def _busy_note():
    """The "being written" note, once per page run however many views read the saved copy. A reader has
    nothing to stop or merge: the note says what the page shows, not the writer's advice."""
    if st.session_state.get("_busy_noted"):
        return
    st.session_state["_busy_noted"] = True
    st.caption("The store is being written by another process (a background job, or a command); the pages show "
               "the results saved before it. Refresh when it is done to see its new results.")


def _read(key, fn, saved=None):
    """``fn()``; while a writer holds the store, ``saved()`` (the same read on the copy as last saved)
    or the value read before, with the note."""
    try:
        value = fn()
    except StoreBusy as exc:
        _BUSY[store_path()] = time.monotonic()
        try:
            value = saved() if saved is not None else _LAST[key]
        except (StoreBusy, KeyError):
            if key not in _LAST:
                st.warning(md_escape(f"{exc}. Refresh when it is done."))
                st.stop()
            value = _LAST[key]
        except ValueError as err:  # the copy could not be made or opened
            if key not in _LAST:
                st.warning(md_escape(f"{exc}; a copy to read could not be made either ({err})."))
                st.stop()
            value = _LAST[key]
        _busy_note()
        return value
    except ValueError as exc:  # damaged, not a DuckDB file, another schema version
        st.error(md_escape(f"Cannot open the store {store_path()}: {exc}"))
        st.stop()
    if len(_LAST) > 1024:
        _LAST.clear()
    _LAST[key] = value
    return value


def view(fn, *args, **choices):
    """A cached call of the view function ``fn(con, *args, **choices)`` (one of :mod:`analysis.views`;
    ``choices``: a section's page choices, by keyword; a fresh read when the store changed)."""
    path = store_path()
    kw = tuple(sorted(choices.items()))
    return _read((_name(fn), path, args, kw), lambda: _cached_view(fn, path, *args, choices=kw),
                 lambda: _cached_view(fn, str(snapshot(path)), *args, choices=kw))


def _name(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _cached_view(fn, path: str, *args, choices: tuple = ()):
    """:func:`cached` of ``fn`` on the store at ``path``, keyed by the function's name and the store's stamp."""
    return cached(_name(fn), path, store_stamp(path), *args, choices=choices, _fn=fn, _wait=_wait(path))


def report_files() -> dict[str, str]:
    """The layer-selection report of the whole store: ``{"html", "json", "md"}`` texts."""
    path = store_path()
    return _read(("report_files", path), lambda: _report_files(path, store_stamp(path)))


def _url_notice(message: str | None):
    """A refused URL value: one small line, never an error (the page shows the fallback)."""
    if message:
        st.warning(md_escape(message))


#: URL parameters whose choice follows the user across pages: the sidebar navigation opens a page
#: without parameters, so the last choice (kept in the session) is that page's default
CARRIED = ("dataset",)


def _carried(param: str):
    return st.session_state.get(f"_carry_{param}") if param in CARRIED else None


def pick(label: str, options, *, param: str, default=None, fmt=None, container=st, help=None, widget="selectbox",
         key: str | None = None, horizontal: bool = False):
    """A single choice whose value lives in the URL (``?param=value``): a selectbox (or ``widget="radio"``,
    ``horizontal`` or not); ``key``: the widget's key (default ``pick_<param>``).

    The URL's value wins when it is one of ``options``; anything else falls back to ``default`` (else
    the first option) with a one-line note. Returns ``None`` when there are no options."""
    own_params(param)
    options = list(options)
    carried = _carried(param)
    if param not in st.query_params and carried is not None and carried in map(str, options):
        default = next(o for o in options if str(o) == carried)  # the choice made on another page
    choice = choose(st.query_params.get(param), options, label.lower(), default)
    if choice.message:
        st.warning(md_escape(choice.message))
    if choice.value is None:
        return None
    index = options.index(choice.value)
    extra = {"horizontal": horizontal} if widget == "radio" else {}
    make = container.radio if widget == "radio" else container.selectbox
    value = make(label, options, index=index, format_func=fmt or str, key=key or f"pick_{param}", help=help, **extra)
    st.query_params[param] = str(value)
    if param in CARRIED:
        st.session_state[f"_carry_{param}"] = str(value)
    return value


def pick_many(label: str, options, *, param: str, default=(), fmt=None, container=st, help=None,
              key: str | None = None) -> list:
    """A multiselect whose values live in the URL as a repeated parameter (``?m=a&m=b``; ``?m=`` for
    none; ``key``: the widget's key, default ``pick_<param>``). Unknown values in the link are dropped
    with a one-line note."""
    own_params(param)
    options = list(options)
    choice = url_state.choose_many(url_list(param), options, label.lower(), list(default))
    _url_notice(choice.message)
    value = container.multiselect(label, options, default=choice.value, format_func=fmt or str,
                                  key=key or f"pick_{param}", help=help)
    st.query_params[param] = [str(v) for v in value] if value else ""
    return value


def pick_int(label: str, lo: int, hi: int, *, param: str, default: int, container=st, help=None) -> int:
    """An integer slider in ``[lo, hi]`` whose value lives in the URL; a value that is not an integer in
    range falls back to ``default`` with a one-line note."""
    own_params(param)
    choice = url_state.choose_int(st.query_params.get(param), lo, hi, label.lower(), default)
    _url_notice(choice.message)
    if hi <= lo:  # a slider needs a range: a single possible value is shown as text
        container.caption(f"{md_escape(label)}: {lo}")
        value = lo
    else:
        value = container.slider(label, lo, hi, choice.value, key=f"pick_{param}", help=help)
    st.query_params[param] = str(value)
    return int(value)


def pick_flag(label: str, *, param: str, default: bool = False, container=st, help=None) -> bool:
    """A toggle whose state lives in the URL as ``1``/``0``."""
    own_params(param)
    choice = url_state.choose_flag(st.query_params.get(param), label.lower(), default)
    _url_notice(choice.message)
    value = container.toggle(label, value=choice.value, key=f"pick_{param}", help=help)
    st.query_params[param] = "1" if value else "0"
    return bool(value)


def url_list(param: str) -> list[str] | None:
    """Every value of a repeated URL parameter (``?m=a&m=b`` → ``["a", "b"]``); ``None`` when absent."""
    own_params(param)
    return st.query_params.get_all(param) if param in st.query_params else None


def page_path(name: str):
    """Absolute path of ``pages/<name>.py`` for ``st.page_link`` / ``st.switch_page``:
    ``layerscope dashboard`` runs an entry script that lives outside the repository
    (precompute/dashboard_entry.py), and Streamlit looks a relative page path up next to it."""
    from pathlib import Path

    return Path(__file__).resolve().parent / f"{name}.py"


def open_page(name: str, params: dict):
    """Go to ``pages/<name>.py`` with these URL parameters (lists repeat the parameter)."""
    st.switch_page(page_path(name), query_params=params)


def drop_params(*params: str):
    """Remove URL parameters of controls the page no longer shows (a link then names only what is on screen)."""
    for param in params:
        if param in st.query_params:
            del st.query_params[param]


def download_data(df, name: str, label: str = "Download data (CSV)"):
    st.download_button(label, df.to_csv(index=False).encode(), file_name=f"{name}.csv", mime="text/csv",
                       key=f"dl_{name}")


def download_chart(chart, name: str):
    """PNG and SVG of a chart when vl-convert is installed (it renders offline).

    Rendered when the button is clicked, not on every rerun: converting a chart takes about a second,
    which would otherwise be paid by every render of the page (``bench/dashboard.py``)."""
    try:
        import vl_convert as vlc
    except ImportError:
        return

    def svg():
        return vlc.vegalite_to_svg(chart.to_json()).encode()

    def png():
        return vlc.vegalite_to_png(chart.to_json(), scale=2)

    cols = st.columns(2)
    cols[0].download_button("Chart (SVG)", svg, file_name=f"{name}.svg", mime="image/svg+xml", key=f"svg_{name}")
    cols[1].download_button("Chart (PNG)", png, file_name=f"{name}.png", mime="image/png", key=f"png_{name}")


def require_store(*, reads_results: bool = True):
    """The store path, or a friendly start-here message (and stop) for a missing or empty store.
    ``reads_results``: the page reads ``layerscope analyze``'s result tables, so it also stops when they
    were written by another analysis version (:func:`require_current_results`); a page of embeddings
    only (Neighbours) passes False and keeps working."""
    path = store_path()
    if not os.path.exists(path) or not view(store_info.is_layerscope_store):
        st.info(f"No LayerScope store at {md_escape(path)} yet. Start with the demo (`layerscope demo`), or embed "
                "your own data:")
        st.code("layerscope demo\n\n"
                "layerscope precompute --store data/my.duckdb --manifest my.jsonl --dataset mine "
                "--model MCG-NJU/videomae-base\nlayerscope analyze --store data/my.duckdb\n"
                "layerscope dashboard --store data/my.duckdb", language="bash")
        st.stop()
    untrained_banner()  # every page starts here: a store of random-weight models says so before any number
    if reads_results:
        require_current_results()
    return path


def require_current_results():
    """Stop the page when the store's results were computed by another analysis version: their payloads
    may have another shape, so none is read; the sentence names the command, and a button runs it.
    When the last analysis did not finish, say so first (where it stopped, which results are shown,
    how to finish it)."""
    stale = view(store_info.stale_results, store_path())
    if stale:
        st.error(md_escape(stale))
        background_job("analyze", "Recompute them now, in the background (the store's own settings)")
        st.stop()
    unfinished = view(store_info.unfinished_analysis, store_path())
    if unfinished:
        st.warning(md_escape(unfinished.sentence), icon=":material/pending:")


def require_results(what: str, available: bool, why: str | None = None):
    """Stop the page when ``available`` is false: with ``why`` (nothing to compute: e.g. a text-only
    dataset on a vision page) as the reason, else with the command that computes ``what``."""
    if not available and why:
        st.info(md_escape(why))
        st.stop()
    if not available:
        st.info(f"No {md_escape(what)} in this store yet. Compute them with `layerscope analyze`:")
        st.code(f"layerscope analyze --store {store_path()}", language="bash")
        st.stop()


def dataset_picker():
    ov = view(store_info.overview, store_path())
    if ov.get("empty"):
        require_results("runs", False)
    return pick("Dataset", list(ov["datasets"]["dataset"]), param="dataset", container=st.sidebar)


def untrained_banner():
    """A banner on every page when models of the store have random (untrained) weights."""
    path = store_path()
    if not os.path.exists(path):
        return
    key = (_name(store_info.overview), path, (path,))  # view(store_info.overview, path)'s key: one memory of it
    try:
        ov = _cached_view(store_info.overview, path, path)
        _LAST[key] = ov
    except StoreBusy:  # a job is writing: the models did not change, so the banner stays
        try:
            ov = _LAST.get(key) or _cached_view(store_info.overview, str(snapshot(path)), path)
        except ValueError:  # no copy could be read either (StoreBusy is one)
            return
    except Exception:  # noqa: BLE001 - a damaged or older store is explained by the page itself
        return
    if ov.get("empty") or "models" not in ov:
        return
    models = list(ov["models"].loc[ov["models"]["random_init"].astype(bool), "model"])
    text = store_info.untrained_banner(models, len(ov["models"]))
    if text:
        st.warning(md_escape(text), icon=UNTRAINED_ICON)


def render_sidebar(path: str):
    st.sidebar.markdown("### LayerScope")
    st.sidebar.caption(f"Store: {md_escape(path)}")


def reproducibility(run_ids, params: dict | None = None):
    """The sidebar panel: revisions, sizes, code versions and parameters behind the current view."""
    if not run_ids:
        return
    prov = view(store_info.provenance, tuple(run_ids))
    with st.sidebar.expander("Reproducibility", expanded=False):
        if "runs" in prov:
            st.dataframe(prov["runs"], hide_index=True, width="stretch")
        if params:
            st.json(params)


def _job_line(job: dict):
    """One line on a background job: what it does now, or its result, or its one-line error."""
    what = {"import": "import and analysis", "map": "map"}.get(job.get("kind"), "analysis")
    end = job.get("finished") or time.time()
    took = f"{end - float(job.get('started') or end):.0f} s"
    if job["state"] == "running":
        st.info(md_escape(f"Background {what} running ({took}{jobs.progress_text(job)}, {job.get('lines', 0)} log "
                          f"lines): {job.get('step')}"
                          + (f" — {job['message']}" if job.get("message") and job["message"] != job.get("step") else "")
                          + ". The pages stay usable; results appear when it is done."))
    elif job["state"] == "cancelled":
        st.warning(md_escape(f"Background {what} cancelled after {took}: {job.get('message')}"))
    elif job["state"] == "done":
        st.success(md_escape(f"Background {what} done in {took}: {job.get('message')}"))
    else:
        st.error(md_escape(f"Background {what} failed: {job.get('message')}"))


@st.fragment(run_every=2.0)
def _live_job(path: str, job_id: str):
    """Redrawn every 2 s while the job runs; when it ends, the whole page reruns to read the new results."""
    job = jobs.latest(path)
    if job is None or job.get("id") != job_id or job["state"] != "running":
        st.rerun(scope="app")
    _job_line(job)
    if st.button("Cancel the job", key=f"cancel_{job_id}", icon=":material/cancel:",
                 help="Stops the background process; the store keeps every study completed before it"):
        jobs.cancel(jobs.jobs_dir(path) / job_id)
        st.rerun(scope="app")


def background_job(kind: str, label: str, *, csv: bytes | None = None, help=None,
                   request: dict | None = None) -> dict | None:
    """A button that starts ``kind`` (``"analyze"``, ``"import"`` of ``csv``, or ``"map"`` of ``request``)
    as a background job on the store (:mod:`analysis.jobs`: a subprocess with the store's own analysis
    settings), and the store's latest job: live progress while it runs, then its result or its error in
    one line."""
    path = store_path()
    job = jobs.latest(path)
    running = job is not None and job["state"] == "running"
    if st.button(label, key=f"job_{kind}", disabled=running or (kind == "import" and not csv), help=help):
        try:
            jobs.start(path, kind, csv=csv, request=request)
        except (ValueError, OSError) as exc:
            st.error(md_escape(f"Could not start the job: {jobs.one_line(exc)}"))
            return job
        st.rerun()  # drawn again with the job running: the button is disabled until it ends
    if job is None:
        return None
    if job["state"] == "running":
        _live_job(path, job["id"])
    else:
        _job_line(job)
    return job


def last_job_outcome():
    """The store's latest background job in one line (running, done or failed), without a button: the
    outcome stays visible after the job has made nothing missing any more."""
    job = jobs.latest(store_path())
    if job is None:
        return None
    if job["state"] == "running":
        _live_job(store_path(), job["id"])
    else:
        _job_line(job)
    return job
