"""The HTML report of BERT-base-sized pairs (PyTorch against its Flax port, 12 and 48
layers, numbers compared): its size, the time headless Chromium takes to reach the load event
(the page lays out its initial view before that), and what making the page costs next to the
comparison it shows, measured side by side in one run.

    python -m bench.report [--layers 12,48] [--loads 5] [--no-numeric]

Prints one line per pair and, last, ``report: 12 layers S MB, load L s; ...`` (targets: 12
layers under 3 MB and 1 s, 48 layers under 10 MB). Needs Debian's chromium and
chromium-driver (``make test`` installs them).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        raise SystemExit("bench.report needs chromium and chromium-driver (make test "
                         "installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1600,1300"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def _load_times(browser, path: Path, loads: int) -> tuple[float, list[str]]:
    """The median time to the load event over ``loads`` fresh navigations, and the console
    errors."""
    times = []
    for _ in range(loads):
        browser.get("about:blank")
        browser.get(path.as_uri())
        times.append(browser.execute_script(
            "return performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000.0)
        assert browser.execute_script("return document.body.dataset.ready") == "1"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    return statistics.median(times), errors


def measure(layers: int, numeric: bool, loads: int, browser, folder: Path) -> dict[str, float]:
    from specgraph.check import compare
    from specgraph.page import build_page
    from specgraph.renderers import get_renderer
    from specgraph.renderers.model_explorer import model_explorer_files

    pair = str(HERE / "report_pair.py")
    start = time.perf_counter()
    report = compare(f"{pair}:torch_bert{layers}", f"{pair}:flax_bert{layers}",
                     mode="both" if numeric else "structure")
    compared = time.perf_counter() - start
    start = time.perf_counter()
    html = get_renderer("html").render(build_page(report))
    made = time.perf_counter() - start
    start = time.perf_counter()
    explorer = sum(map(len, model_explorer_files(report).values()))
    explorer_made = time.perf_counter() - start
    path = folder / f"bert{layers}.html"
    path.write_text(html, encoding="utf-8")
    load, errors = _load_times(browser, path, loads)
    if errors:
        raise SystemExit(f"the {layers}-layer report logged errors: {errors}")
    return {"layers": layers, "mb": len(html.encode()) / 1e6, "load": load,
            "compare": compared, "make": made, "nodes": len(report.alignment.lhs.nodes),
            "explorer_mb": explorer / 1e6, "explorer_make": explorer_made,
            "equivalent": report.equivalent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="12,48")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--no-numeric", action="store_true")
    args = parser.parse_args()
    browser = _browser()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in (int(x) for x in args.layers.split(",")):
                row = measure(n, not args.no_numeric, args.loads, browser, Path(tmp))
                rows.append(row)
                print(f"{n} layers ({row['nodes']} nodes a side, "
                      f"{'equivalent' if row['equivalent'] else 'DIFFERENT'}): "
                      f"{row['mb']:.2f} MB, load event {row['load']:.2f} s (median of "
                      f"{args.loads}); compare {row['compare']:.1f} s, page "
                      f"{row['make']:.2f} s (page/compare {row['make'] / row['compare']:.3f}); "
                      f"Model Explorer files {row['explorer_mb']:.2f} MB in "
                      f"{row['explorer_make']:.2f} s",
                      flush=True)
    finally:
        browser.quit()
    print("report: " + "; ".join(f"{r['layers']} layers {r['mb']:.2f} MB, load "
                                 f"{r['load']:.2f} s" for r in rows))


if __name__ == "__main__":
    main()
