"""``python -m corpora.build medcorp-mini``: build the embedded corpus and its shipped dense index."""
from __future__ import annotations

import sys

from corpora.builders import build_corpus
from corpora.index import build_index


def build_medcorp_mini() -> None:
    manifest = build_corpus("medcorp-mini")
    print(f"medcorp-mini: {manifest.count} passages {manifest.sources}, sha256 {manifest.sha256[:12]}")
    print(f"index: {build_index('medcorp-mini', 'minilm-l6-v2', 'flat')}")


if __name__ == "__main__":
    if sys.argv[1:] != ["medcorp-mini"]:
        sys.exit("usage: python -m corpora.build medcorp-mini")
    build_medcorp_mini()
