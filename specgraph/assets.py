"""Third-party files the HTML report inlines, fetched once from their registry and verified.

The report lays each scope out in the browser with dagre (MIT, from npm): the page is one
offline file, so the library is inlined into it. specgraph does not carry dagre's code; the
project's setup (``make``, or ``python -m specgraph.assets``) downloads the pinned release
from registry.npmjs.org, checks it against the registry's sha512 integrity, and keeps the
browser bundle and its license beside the package (or in the user's cache folder where the
package folder cannot be written). Nothing is downloaded while a report is made.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specgraph.errors import SpecgraphError

__all__ = ["Asset", "DAGRE", "AssetMissingError", "load", "fetch", "main"]


class AssetMissingError(SpecgraphError):
    """A file the report inlines is not installed."""


@dataclass(frozen=True)
class Asset:
    """A pinned npm release and the files of its tarball the report uses.

    Attributes:
        name / version: the npm package and its release.
        integrity: the registry's ``sha512-...`` of the tarball.
        script: the browser bundle's path inside the tarball.
        license: the license file's path inside the tarball.
    """

    name: str
    version: str
    integrity: str
    script: str
    license: str

    @property
    def url(self) -> str:
        base = self.name.rsplit("/", 1)[-1]
        return f"https://registry.npmjs.org/{self.name}/-/{base}-{self.version}.tgz"

    @property
    def stem(self) -> str:
        return f"{self.name.rsplit('/', 1)[-1]}-{self.version}"


DAGRE = Asset(
    name="@dagrejs/dagre", version="3.1.3",
    integrity="sha512-X4aUTwOReZvthaZWOVHqlJ52/ZdhZFEM4+Lh/uR4XooUSLE6p71bcy7MPGzYnNUcNh+nj+i"
              "/qJQpCMIdQnSmrg==",
    script="package/dist/dagre.min.js", license="package/LICENSE")


def _folders() -> list[Path]:
    """Where assets are kept, the first writable one used for fetching."""
    env = os.environ.get("SPECGRAPH_ASSETS")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specgraph"
    return [Path(env)] if env else [Path(__file__).parent / "_assets", cache]


def load(asset: Asset = DAGRE) -> tuple[str, str]:
    """The asset's script and license text.

    Raises:
        AssetMissingError: it was never fetched.
    """
    for folder in _folders():
        script, lic = folder / f"{asset.stem}.js", folder / f"{asset.stem}.LICENSE"
        if script.is_file() and lic.is_file():
            return script.read_text(encoding="utf-8"), lic.read_text(encoding="utf-8")
    raise AssetMissingError(
        f"the HTML report needs {asset.name} {asset.version} (MIT, from npm) and it is not "
        "installed; run `python -m specgraph.assets` once (it downloads it from "
        "registry.npmjs.org) or `make venv`")


def _verify(data: bytes, asset: Asset) -> None:
    algo, _, want = asset.integrity.partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != want:
        raise SpecgraphError(f"the download of {asset.name} {asset.version} does not match "
                             f"the registry's {algo} integrity; try again, or check what "
                             "sits between this machine and registry.npmjs.org")


def _member(tar: tarfile.TarFile, name: str) -> str:
    info = tar.getmember(name)
    handle = tar.extractfile(info) if info.isfile() else None
    if handle is None:
        raise SpecgraphError(f"{name} is not a file in the downloaded tarball")
    return handle.read().decode("utf-8")


def _strip_source_map(script: str) -> str:
    """The bundle without its ``sourceMappingURL`` comment: an inlined page points at no
    other file."""
    lines = script.rstrip("\n").split("\n")
    return "\n".join(x for x in lines if not x.startswith("//# sourceMappingURL=")) + "\n"


def fetch(asset: Asset = DAGRE, *, data: bytes | None = None) -> Path:
    """Download (or take ``data``), verify and install ``asset``; returns its folder."""
    if data is None:
        with urllib.request.urlopen(asset.url, timeout=60) as response:  # noqa: S310
            data = response.read()
    _verify(data, asset)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        script = _strip_source_map(_member(tar, asset.script))
        lic = _member(tar, asset.license)
    for folder in _folders():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{asset.stem}.LICENSE").write_text(lic, encoding="utf-8")
            (folder / f"{asset.stem}.js").write_text(script, encoding="utf-8")
            return folder
        except OSError:
            continue
    raise SpecgraphError(f"no folder to keep {asset.name} in is writable: "
                         f"{', '.join(map(str, _folders()))}; set SPECGRAPH_ASSETS to one")


def main() -> int:
    """``python -m specgraph.assets``: fetch what the report inlines unless it is there."""
    try:
        load(DAGRE)
        print(f"{DAGRE.name} {DAGRE.version}: installed")
        return 0
    except AssetMissingError:
        pass
    try:
        folder = fetch(DAGRE)
    except (OSError, SpecgraphError) as e:
        print(f"specgraph: could not fetch {DAGRE.name} {DAGRE.version} from "
              f"registry.npmjs.org: {e}", file=sys.stderr)
        return 2
    print(f"{DAGRE.name} {DAGRE.version}: installed in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
