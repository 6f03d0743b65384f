"""The HTML report in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
installed by ``make test``): the page loads from disk with no console error and no request
but its own file, lists the findings, a click on a finding focuses its nodes on both sides, a
folded block unfolds and is laid out, MathML renders with a size, the error chart is drawn.
Screenshots go to ``build/test-artifacts/``. These tests do not skip: without Chromium they
fail and say how to install it.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("flax")

from specgraph.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "test-artifacts"
XOR = str(ROOT / "examples/xor/model_torch.py") + ":correct"
XOR_BAD = str(ROOT / "examples/xor/model_jax.py") + ":forgot_activation"
CNN = str(ROOT / "examples/report/cnn_padding.py")


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.fail("the HTML report tests need Chromium and its driver: install Debian's "
                    "chromium and chromium-driver (make test does, as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1600,1300", "--disable-background-networking",
                "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(driver), options=options)
    yield drv
    drv.quit()


def _open(browser, path: Path, shot: str | None = None):
    browser.get_log("browser")  # drop what earlier pages left
    browser.get_log("performance")
    browser.get(path.as_uri())
    assert browser.execute_script("return document.body.dataset.ready") == "1", \
        "the page's script did not finish"
    console = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert console == [], f"console messages: {console}"
    events = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in events
            if m["method"] == "Network.requestWillBeSent"]
    assert urls == [path.as_uri()], f"requests other than the page itself: {urls}"
    if shot:
        _shot(browser, shot)


def _shot(browser, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _report(tmp_path: Path, *args: str, name: str = "report.html", expect: int = 1) -> Path:
    out = tmp_path / name
    assert main(["report", *args, "-o", str(out)]) == expect
    return out


@pytest.fixture(scope="module")
def xor_report(tmp_path_factory):
    return _report(tmp_path_factory.mktemp("xor"), XOR, XOR_BAD)


def _selected(browser, side: str) -> str | None:
    return browser.execute_script(
        f"const e = document.querySelector('.panel[data-side={side}] .g-node.sel');"
        "return e ? e.dataset.id : null")


def _visible_in_panel(browser, side: str, node: str) -> bool:
    return browser.execute_script(f"""
        const svg = document.querySelector('.panel[data-side={side}] svg.graph');
        const n = svg.querySelector('.g-node[data-id="{node}"]');
        if (!n) return false;
        const a = svg.getBoundingClientRect(), b = n.getBoundingClientRect();
        return b.width > 0 && b.left >= a.left && b.right <= a.right && b.top >= a.top &&
               b.bottom <= a.bottom;""")


def test_xor_report_loads_offline_and_focuses_a_finding(browser, xor_report):
    from selenium.webdriver.common.by import By

    _open(browser, xor_report, "xor-loaded")
    items = browser.find_elements(By.CSS_SELECTOR, "#findings .finding")
    assert len(items) == 1
    assert "missing-op" in items[0].text and "relu" in items[0].text
    data = json.loads(browser.execute_script(
        "return document.getElementById('specgraph-data').textContent"))
    finding = data["findings"][0]
    assert finding["lhs"] and not finding["rhs"]  # the relu only lhs has
    items[0].click()
    assert _selected(browser, "lhs") == finding["lhs"][0]
    assert _visible_in_panel(browser, "lhs", finding["lhs"][0])
    node = next(n for n in data["sides"][0]["nodes"] if n["id"] == finding["lhs"][0])
    assert node["st"] == "only"
    assert "no counterpart" in browser.find_element(By.ID, "detail").text
    _shot(browser, "xor-finding")


def test_clicking_a_node_shows_its_counterpart_on_the_other_side(browser, xor_report):
    from selenium.webdriver.common.by import By

    _open(browser, xor_report)
    node = browser.find_element(By.CSS_SELECTOR, '.panel[data-side=lhs] .g-node[data-id="n2"]')
    node.click()
    peer = browser.execute_script(
        "const e = document.querySelector('.panel[data-side=rhs] .g-node.peer');"
        "return e ? e.dataset.id : null")
    assert peer == "n1"  # lhs's head linear is rhs's second node (rhs lacks the relu)
    assert _visible_in_panel(browser, "rhs", "n1")


def test_mathml_renders_with_a_size_and_marks_the_difference(browser, xor_report):
    _open(browser, xor_report)
    sizes = browser.execute_script("""
        return [...document.querySelectorAll('#equations math')].map(m => {
            const r = m.getBoundingClientRect();
            return [m.namespaceURI, r.width, r.height]; });""")
    assert sizes and all(ns == "http://www.w3.org/1998/Math/MathML" for ns, _, _ in sizes)
    assert all(w > 10 and h > 5 for _, w, h in sizes)
    marked = browser.execute_script(
        "return [...document.querySelectorAll('#equations .d')].map(e => e.textContent)")
    assert any("relu" in m for m in marked)  # the activation the port forgot
    # an msub lays its subscript lower than its base: presentation MathML, rendered
    drop = browser.execute_script("""
        const s = document.querySelector('#equations msub');
        const [b, sub] = s.children;
        return sub.getBoundingClientRect().bottom - b.getBoundingClientRect().bottom;""")
    assert drop > 0


def test_error_chart_is_drawn_with_tolerance(browser, xor_report):
    _open(browser, xor_report)
    data = json.loads(browser.execute_script(
        "return document.getElementById('specgraph-data').textContent"))
    drawn = browser.execute_script("""
        const c = document.getElementById('error-chart');
        const r = c.getBoundingClientRect();
        return [r.width, r.height, c.querySelectorAll(".pt").length,
                c.querySelectorAll('polyline.tol-f, polyline.tol-b').length,
                c.querySelectorAll(".pt.bad").length];""")
    width, height, points, tolerances, bad = drawn
    assert width > 100 and height > 100
    expected = sum(("fw" in row) + ("bw" in row) for row in data["layers"])
    assert points == expected > 0
    assert tolerances == 2
    assert bad >= 1  # the layers after the forgotten relu part


def test_padding_mismatch_report_focuses_both_sides(browser, tmp_path):
    from selenium.webdriver.common.by import By

    path = _report(tmp_path, f"{CNN}:torch_cnn", f"{CNN}:flax_cnn")
    _open(browser, path, "cnn-loaded")
    items = browser.find_elements(By.CSS_SELECTOR, "#findings .finding")
    assert len(items) == 1 and "padding" in items[0].text
    data = json.loads(browser.execute_script(
        "return document.getElementById('specgraph-data').textContent"))
    f = data["findings"][0]
    items[0].click()
    assert _selected(browser, "lhs") == f["lhs"][0]
    assert _selected(browser, "rhs") == f["rhs"][0]
    assert _visible_in_panel(browser, "lhs", f["lhs"][0])
    assert _visible_in_panel(browser, "rhs", f["rhs"][0])
    marked = browser.execute_script(
        "return [...document.querySelectorAll('#equations .d')].map(e => e.textContent)")
    assert marked, "the padding that differs is marked in the equations"
    _shot(browser, "cnn-finding")


STACK = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16, eps=eps)

    def forward(self, x):
        return self.norm(x + torch.relu(self.fc(x)))


class Stack(nn.Module):
    def __init__(self, eps_last):
        super().__init__()
        self.layer = nn.ModuleList(Block(1e-5) for _ in range(7))
        self.layer.append(Block(eps_last))

    def forward(self, x):
        for block in self.layer:
            x = block(x)
        return x


def _make(eps):
    torch.manual_seed(0)
    return Stack(eps), (torch.randn(2, 16),)


def same():
    return _make(1e-5)


def last_differs():
    return _make(1e-3)
'''


def test_repeated_blocks_fold_and_unfold(browser, tmp_path):
    from selenium.webdriver.common.by import By

    (tmp_path / "stack.py").write_text(STACK)
    path = _report(tmp_path, f"{tmp_path / 'stack.py'}:same",
                   f"{tmp_path / 'stack.py'}:last_differs")
    _open(browser, path)
    data = json.loads(browser.execute_script(
        "return document.getElementById('specgraph-data').textContent"))
    folds = data["sides"][0]["folds"]
    assert len(folds) == 1
    assert folds[0]["label"] == "layer.1–6: identical to layer.0"
    # the block with the finding is open, the folded ones are one box
    fold = browser.find_element(By.CSS_SELECTOR, ".panel[data-side=lhs] .g-fold")
    assert "identical to layer.0" in fold.text
    members = folds[0]["members"]
    assert browser.execute_script(
        f"return document.querySelectorAll('.panel[data-side=lhs] [data-scope=\"{members[0]}\"]')"
        ".length") == 0  # folded: not drawn
    fold.click()
    assert browser.find_elements(By.CSS_SELECTOR, ".panel[data-side=lhs] .g-fold") == []
    boxes = browser.execute_script(f"""
        return {members}.map(id => {{
            const e = document.querySelector('.panel[data-side=lhs] [data-scope="' + id + '"]');
            if (!e) return null;
            const r = e.getBoundingClientRect();
            return [Math.round(r.x), Math.round(r.y), r.width, r.height]; }});""")
    assert None not in boxes and all(w > 0 and h > 0 for _, _, w, h in boxes)
    assert len({(x, y) for x, y, _, _ in boxes}) == len(members)  # each laid out in place
    # a block closed and opened again lays out its inside
    head = browser.find_element(
        By.CSS_SELECTOR, f'.panel[data-side=lhs] .g-scope[data-scope="{members[0]}"] .head')
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", head)
    closed = browser.find_element(
        By.CSS_SELECTOR, f'.panel[data-side=lhs] .g-closed[data-scope="{members[0]}"]')
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", closed)
    inner = browser.find_elements(
        By.CSS_SELECTOR, f'.panel[data-side=lhs] .g-scope[data-scope="{members[0]}"] .g-node')
    assert len(inner) >= 3  # linear, relu, add, layer_norm of that block
    _shot(browser, "stack-unfolded")


HOSTILE = '''
import torch
from torch import nn

# module names cannot hold a dot; everything else goes
NAMES = ["<script>__pwned=1</script>", "</style><b>x", "javascript:alert(1)",
         "q\\"uote'<img src=x onerror=__pwned=2>"]


class Hostile(nn.Module):
    def __init__(self, act):
        super().__init__()
        for k, name in enumerate(NAMES):
            self.add_module(name, nn.Linear(4, 4))
        self.act = act

    def forward(self, x):
        for name in NAMES:
            x = getattr(self, name)(x)
            if self.act:
                x = torch.relu(x)
        return x


def plain():
    torch.manual_seed(0)
    return Hostile(False), (torch.randn(2, 4),)


def with_relu():
    torch.manual_seed(0)
    return Hostile(True), (torch.randn(2, 4),)
'''


def test_hostile_module_names_are_text(browser, tmp_path):
    (tmp_path / "hostile.py").write_text(HOSTILE)
    path = _report(tmp_path, f"{tmp_path / 'hostile.py'}:plain",
                   f"{tmp_path / 'hostile.py'}:with_relu")
    html = path.read_text(encoding="utf-8")
    assert "<script>__pwned" not in html
    assert "<img src=x" not in html
    assert "</style><b>" not in html
    assert html.count("<script") == 3  # the data block, dagre, the page's own script
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp
    _open(browser, path)
    assert browser.execute_script("return window.__pwned === undefined")
    labels = browser.execute_script(
        "return [...document.querySelectorAll('.panel[data-side=lhs] .g-scope text, "
        ".panel[data-side=lhs] .g-closed text')].map(t => t.textContent).join(' ')")
    assert "<script>__pwned=1</script>" in labels  # shown as the name it is
    assert "javascript:" not in " ".join(browser.execute_script(
        "return [...document.querySelectorAll('[href]')].map(a => a.getAttribute('href'))"))


def test_check_report_shows_the_spec_beside_the_implementation(browser, tmp_path):
    from selenium.webdriver.common.by import By

    out = tmp_path / "check.html"
    code = main(["check", str(ROOT / "examples/specs/resnet_torch.py") + ":bottleneck_v15",
                 "--spec", str(ROOT / "examples/specs/resnet_bottleneck.spec.yaml"),
                 "--html", str(out)])
    assert code == 1
    _open(browser, out, "check-loaded")
    hits = browser.find_elements(By.CSS_SELECTOR, ".yaml div.hit")
    assert hits, "the spec lines with findings are marked"
    data = json.loads(browser.execute_script(
        "return document.getElementById('specgraph-data').textContent"))
    k = int(hits[0].get_attribute("data-k"))
    browser.execute_script("arguments[0].scrollIntoView()", hits[0])
    hits[0].click()
    assert browser.execute_script("return document.body.dataset.focused") == str(k)
    assert _selected(browser, "lhs") == data["findings"][k]["lhs"][0]
    spec_line = data["findings"][k]["spec_line"]
    assert hits[0].get_attribute("id") == f"spec-L{spec_line}"
    assert "stride" in hits[0].text or "conv" in hits[0].text
    top = browser.execute_script(
        "return document.querySelector('.graphs').getBoundingClientRect().top")
    assert -2 <= top < 200  # a spec line brings the graphs into view
    html = out.read_text(encoding="utf-8")
    assert "blame: the implementation" in html and "blame: lhs" not in html


def test_same_inputs_give_the_same_bytes(tmp_path):
    a = _report(tmp_path, XOR, XOR_BAD, name="a.html")
    b = _report(tmp_path, XOR, XOR_BAD, name="b.html")
    assert a.read_bytes() == b.read_bytes()


def test_report_refuses_an_unwritable_target_before_tracing(tmp_path, capsys):
    assert main(["report", XOR, XOR_BAD, "-o", str(tmp_path / "nowhere" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "is not a folder you can write into" in err
    assert "tracing" not in err


def test_equivalent_pair_report(tmp_path):
    good = str(ROOT / "examples/xor/model_jax.py") + ":correct"
    path = _report(tmp_path, XOR, good, expect=0)
    html = path.read_text(encoding="utf-8")
    assert "the two models are equivalent" in html
    assert textwrap.dedent("No findings.") in html


def test_missing_dagre_is_one_sentence_before_tracing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECGRAPH_ASSETS", str(tmp_path / "empty"))
    assert main(["report", XOR, XOR_BAD, "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "needs @dagrejs/dagre 3.1.3" in err and "python -m specgraph.assets" in err
    assert "tracing" not in err and not (tmp_path / "r.html").exists()


def test_a_download_that_does_not_match_the_registry_is_refused(tmp_path, monkeypatch):
    import io
    import tarfile

    from specgraph.assets import DAGRE, fetch
    from specgraph.errors import SpecgraphError

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in ((DAGRE.script, b"window.__evil = 1;"), (DAGRE.license, b"MIT")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    monkeypatch.setenv("SPECGRAPH_ASSETS", str(tmp_path / "assets"))
    with pytest.raises(SpecgraphError, match="does not match the registry's sha512"):
        fetch(DAGRE, data=buf.getvalue())
    assert not (tmp_path / "assets").exists()


def test_a_huge_scope_is_shown_in_parts(tmp_path):
    """A model without scopes (every op at the model itself) is never laid out flat."""
    from specgraph.check import compare
    from specgraph.page import MAX_ITEMS, build_page

    (tmp_path / "flat.py").write_text(textwrap.dedent('''
        import torch

        class Flat(torch.nn.Module):
            def forward(self, x):
                for _ in range(150):
                    x = torch.tanh(x) * 1.5
                return x

        def make():
            return Flat(), (torch.randn(2, 3),)
    '''))
    ref = f"{tmp_path / 'flat.py'}:make"
    page = build_page(compare(ref, ref, mode="structure"))
    side = page.sides[0]
    parts = [s for s in side["scopes"] if s.get("part")]
    assert len(parts) == 3  # 300 ops in parts of at most MAX_ITEMS
    counts = {p["id"]: sum(n["scope"] == p["id"] for n in side["nodes"]) for p in parts}
    assert max(counts.values()) <= MAX_ITEMS and sum(counts.values()) == 300


def test_hostile_spec_names_and_paper_are_text(browser, tmp_path):
    """A spec whose file name and paper title carry markup: shown as text (statement names
    with markup the spec language refuses, at file:line:col)."""
    spec = (ROOT / "examples/specs/xor.spec.yaml").read_text(encoding="utf-8")
    spec = spec.replace('title: "Learning hides bugs (the XOR + regression toy)"',
                        'title: "</title><script>__pwned=3</script>"')
    path = tmp_path / "<img src=x onerror=__pwned=4>.spec.yaml"
    path.write_text(spec.replace("implementations:", "x_implementations:")
                    .split("x_implementations:")[0], encoding="utf-8")
    out = tmp_path / "check.html"
    code = main(["check", str(ROOT / "examples/xor/model_jax.py") + ":forgot_activation",
                 "--spec", str(path), "--html", str(out)])
    assert code == 1
    html = out.read_text(encoding="utf-8")
    assert "<script>__pwned" not in html and "<img src=x" not in html
    _open(browser, out)
    assert browser.execute_script("return window.__pwned === undefined")
    assert "<img src=x onerror=__pwned=4>" in browser.find_element("css selector", "h1").text
    assert "</title><script>__pwned=3</script>" in \
        browser.find_element("css selector", ".meta").text


def _scale(browser, side: str) -> float:
    return browser.execute_script(
        f"return specgraph.sides[{0 if side == 'lhs' else 1}].t.k")


def test_a_node_without_counterpart_centres_the_other_side_where_it_would_be(browser,
                                                                           xor_report):
    """The relu only lhs has: rhs shows the nearest aligned op and says there is none."""
    from selenium.webdriver.common.by import By

    _open(browser, xor_report)
    data = json.loads(browser.execute_script(
        "return document.getElementById('specgraph-data').textContent"))
    relu = next(n for n in data["sides"][0]["nodes"] if n["op"] == "relu")
    assert relu["st"] == "only" and relu["near"]
    browser.execute_script("specgraph.sides[1].zoom(3); specgraph.sides[1].t.x = -5000;"
                           "specgraph.sides[1].apply()")  # the other side looks elsewhere
    browser.find_element(By.CSS_SELECTOR,
                         f'.panel[data-side=lhs] .g-node[data-id="{relu["id"]}"]').click()
    near = browser.execute_script(
        "const e = document.querySelector('.panel[data-side=rhs] .g-node.near');"
        "return e ? e.dataset.id : null")
    assert near == relu["near"]
    assert _visible_in_panel(browser, "rhs", near)
    note = browser.find_element(By.CSS_SELECTOR, ".panel[data-side=rhs] .bar .note").text
    assert "no counterpart" in note and "relu" in note
    # a node with a counterpart clears the note
    browser.find_element(By.CSS_SELECTOR, '.panel[data-side=lhs] .g-node[data-id="n2"]').click()
    assert browser.find_element(By.CSS_SELECTOR, ".panel[data-side=rhs] .bar .note").text == ""


DEEP = '''
import torch
from torch import nn


class Deep(nn.Module):
    """Forty different layers (no two blocks alike, nothing folds)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8 + k % 2, 8 + (k + 1) % 2),
                                                  nn.Tanh()) for k in range(40))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def make():
    torch.manual_seed(0)
    return Deep(), (torch.randn(2, 8),)
'''


def test_fit_and_open_all_stay_readable_and_keep_the_selection(browser, tmp_path):
    from selenium.webdriver.common.by import By

    (tmp_path / "deep.py").write_text(DEEP)
    ref = f"{tmp_path / 'deep.py'}:make"
    path = _report(tmp_path, ref, ref, expect=0)
    _open(browser, path)
    assert _scale(browser, "lhs") >= 0.55  # 40 blocks: no shrinking to a smudge
    browser.find_element(By.CSS_SELECTOR, ".panel[data-side=lhs] [data-act=open]").click()
    assert _scale(browser, "lhs") >= 0.55
    node = browser.execute_script(
        "return [...document.querySelectorAll('.panel[data-side=lhs] .g-node')]"
        ".map(e => e.dataset.id).filter(id => id.startsWith('n')).pop()")
    browser.execute_script(f"specgraph.select(specgraph.sides[0], '{node}', true)")
    browser.find_element(By.CSS_SELECTOR, ".panel[data-side=rhs] [data-act=open]").click()
    browser.find_element(By.CSS_SELECTOR, ".panel[data-side=lhs] [data-act=open]").click()
    assert _selected(browser, "lhs") == node
    assert _visible_in_panel(browser, "lhs", node)  # open all stays on the selection
    browser.find_element(By.CSS_SELECTOR, ".panel[data-side=lhs] [data-act=fit]").click()
    assert _scale(browser, "lhs") >= 0.55
    # the wheel scrolls the graph (ctrl + wheel zooms)
    before = browser.execute_script("return specgraph.sides[0].t.y")
    browser.execute_script(
        "document.querySelector('.panel[data-side=lhs] svg.graph').dispatchEvent("
        "new WheelEvent('wheel', {deltaY: 300, bubbles: true, cancelable: true}))")
    assert browser.execute_script("return specgraph.sides[0].t.y") == before - 300
    assert _scale(browser, "lhs") >= 0.55
    _shot(browser, "deep-open-all")


LONG = '''
import torch
from torch import nn

NAME = "an_extremely_long_module_name_that_a_generated_model_might_carry_" * 3


class Block(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = act

    def forward(self, x):
        x = torch.tanh(self.fc(x))
        return torch.relu(x) if self.act else x


class Long(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.add_module(NAME, nn.ModuleList(Block(act and k == 3) for k in range(4)))

    def forward(self, x):
        for block in getattr(self, NAME):
            x = block(x)
        return x


def plain():
    torch.manual_seed(0)
    return Long(False), (torch.randn(2, 4),)


def with_relu():
    torch.manual_seed(0)
    return Long(True), (torch.randn(2, 4),)
'''


def test_long_names_stay_inside_the_findings_and_the_fold_labels(browser, tmp_path):
    (tmp_path / "long.py").write_text(LONG)
    ref = str(tmp_path / "long.py")
    path = _report(tmp_path, f"{ref}:plain", f"{ref}:with_relu")
    _open(browser, path)
    overflow = browser.execute_script(
        "const f = document.getElementById('findings'); return f.scrollWidth - f.clientWidth")
    assert overflow <= 0
    fold = browser.execute_script("""
        const f = document.querySelector('.panel[data-side=lhs] .g-fold');
        const r = f.querySelector('rect:not(.back)').getBoundingClientRect();
        const t = f.querySelector('text').getBoundingClientRect();
        return [t.right <= r.right + 1, f.querySelector('title').textContent];""")
    assert fold[0], "the fold's label runs past its box"
    assert "an_extremely_long_module_name" in fold[1] and "identical to" in fold[1]


def test_equations_cells_have_no_scrollbar_and_show_their_marks(browser, xor_report):
    _open(browser, xor_report)
    cells = browser.execute_script("""
        return [...document.querySelectorAll('#equations td')].map(
            td => [td.scrollHeight - td.clientHeight, td.scrollWidth - td.clientWidth]);""")
    assert cells and all(h <= 0 for h, _ in cells), cells
    marks = browser.execute_script("""
        return [...document.querySelectorAll('#equations .d')].map(m => {
            const r = m.getBoundingClientRect(), c = m.closest('td').getBoundingClientRect();
            return r.top >= c.top && r.bottom <= c.bottom && r.height > 0; });""")
    assert marks and all(marks)


def test_error_chart_fits_the_page_with_its_legend_and_layer_names(browser, xor_report):
    _open(browser, xor_report)
    chart = browser.execute_script("""
        const box = document.querySelector('.chart'), svg = document.getElementById('error-chart');
        const legend = box.querySelector('.chart-legend');
        return [svg.getBoundingClientRect().width, box.clientWidth,
                legend.getBoundingClientRect().width <= box.clientWidth, legend.textContent,
                svg.querySelectorAll('text.xl').length, svg.querySelectorAll('polygon.pt.bw').length,
                svg.querySelectorAll('circle.pt.fw').length];""")
    svg_width, box_width, legend_fits, legend, xlabels, backward, forward = chart
    assert svg_width >= box_width - 20  # as wide as the page gives it
    assert legend_fits and "exact" in legend and "backward" in legend
    assert xlabels >= 1 and backward >= 1 and forward >= 1
    # the script prints numbers as the markup does
    from specgraph.renderers.html_chart import fmt_number

    values = [0, 1.23456e-5, 0.000999, 0.0123456, 0.98765, 4.0, 999.9, 12345.0, -2.5e-9]
    assert browser.execute_script(f"return {values}.map(specgraph.fmt)") == \
        [fmt_number(v) for v in values]
