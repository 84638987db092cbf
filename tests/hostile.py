"""Hostile user strings (model, dataset, item and caption names) and an independent CommonMark check
(markdown-it-py) that they stay text: shared by the escaping tests of the dashboard and the report."""

from markdown_it import MarkdownIt

SCRIPT = "<script>window.pwned=1</script>"
IMAGE = "![x](http://h.invalid/x.png)"
JSLINK = "[a](javascript:alert(1))"
NAMES = {"vis": SCRIPT, "txt": IMAGE}
DATASET = JSLINK
ITEM = "<img src=x onerror=alert(1)>"
CAPTION = "**b** ![c](http://h.invalid/c.png) <b>raw</b> [l](javascript:alert(2)) $x$ :red[y]"
HOSTILE = [SCRIPT, IMAGE, JSLINK, ITEM, CAPTION, "<http://h.invalid/auto>", "&lt;b&gt;", "`code`", "- list",
           "1. item", "# heading", "a | b", "line\n\n![y](http://h.invalid/y.png)", "~~s~~ _e_ *f* \\*"]


def render(md: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)


#: what a user string must never become: an image (fetched on view), a link, a script, raw HTML
#: (markdown-it writes text quotes as &quot;, so `src="` / `href="` only occur in real attributes)
DANGEROUS = ("<img", "<script", "<a ", "<b>", 'src="', 'href="')
#: and, for an escaped string on its own, any formatting at all
FORMATTING = ("<code", "<em", "<strong", "<del", "<h1", "<ul", "<ol", "<table", "<blockquote")


def assert_inert(md: str, strict: bool = False):
    out = render(md)
    for bad in DANGEROUS + (FORMATTING if strict else ()):
        assert bad not in out, (bad, md, out)
    return out


MARKDOWN_ELEMENTS = ("markdown", "caption", "info", "warning", "error", "success", "title", "header", "subheader")


def markdown_sources(at) -> list[str]:
    """Every string the page hands to Streamlit's Markdown renderer: bodies and widget/metric labels."""
    out = []
    for kind in MARKDOWN_ELEMENTS:
        out += [e.value for e in at.get(kind)]
    for kind in ("selectbox", "multiselect", "slider", "toggle", "metric", "button", "download_button"):
        out += [w.label for w in at.get(kind)]
    return out
