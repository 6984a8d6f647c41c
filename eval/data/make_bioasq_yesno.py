"""Rebuild ``bioasq_yesno.json`` from the BioASQ Task B golden sets (13 MB across Task7B..Task11B).

Only the yes/no questions are evaluated, so the shipped file keeps those, in the same golden JSON format
(``{"questions": [...]}``) with just the fields the loader and retrieval need. Questions are read in task
and batch order (7B1, 7B2, ..., 11B4) and deduplicated by id, first occurrence kept; one question per
line so diffs stay readable.

    python eval/data/make_bioasq_yesno.py /work/shared/data/benchmarks/bioasq [OUT]
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

KEEP = ("id", "body", "type", "exact_answer", "snippets", "documents")


def batch_key(path: Path) -> tuple[int, int]:
    """``10B3_golden.json`` -> (10, 3): numeric order, so 7B sorts before 10B."""
    task, batch = re.match(r"(\d+)B(\d+)_golden\.json$", path.name).groups()
    return int(task), int(batch)


def yesno_questions(src: Path) -> list[dict]:
    files = sorted(src.glob("*/*_golden.json"), key=batch_key)
    if not files:
        raise SystemExit(f"no */*_golden.json under {src}")
    seen: dict[str, dict] = {}
    for path in files:
        for q in json.loads(path.read_text(encoding="utf-8"))["questions"]:
            if q["type"] == "yesno" and q["id"] not in seen:
                out = {k: q[k] for k in KEEP}
                out["snippets"] = [{"text": s["text"], "document": s["document"]} for s in q["snippets"]]
                seen[q["id"]] = out
    return list(seen.values())


def write(questions: list[dict], out: Path) -> None:
    lines = ",\n".join(json.dumps(q, ensure_ascii=False) for q in questions)
    out.write_text('{"questions": [\n' + lines + "\n]}\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    target = Path(sys.argv[2]) if len(sys.argv) == 3 else Path(__file__).parent / "bioasq_yesno.json"
    qs = yesno_questions(Path(sys.argv[1]))
    write(qs, target)
    print(f"{len(qs)} yes/no questions -> {target}")
