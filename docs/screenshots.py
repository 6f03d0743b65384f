"""Make the README's report screenshots: three reports, each with its first finding focused.

    python docs/screenshots.py        # writes docs/report-*.png (needs chromium)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "report-xor": ["examples/xor/model_torch.py:correct",
                   "examples/xor/model_jax.py:forgot_activation"],
    "report-cnn-padding": ["examples/report/cnn_padding.py:torch_cnn",
                           "examples/report/cnn_padding.py:flax_cnn"],
    "report-transformer-native": ["examples/report/transformer.py:torch_block",
                                  "examples/report/transformer.py:flax_block", "--native"],
}


def main() -> int:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from specgraph.cli import main as cli

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--window-size=1500,1000", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, args in CASES.items():
                page = Path(tmp) / f"{name}.html"
                if cli(["report", *args, "-o", str(page)]) not in (0, 1):
                    return 2
                browser.get(page.as_uri())
                browser.execute_script("specgraph.finding(0)")
                time.sleep(0.3)
                browser.save_screenshot(str(ROOT / "docs" / f"{name}.png"))
                print(f"wrote docs/{name}.png")
    finally:
        browser.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
