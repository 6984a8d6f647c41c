"""Report sections as Markdown: a title, tables, figure links, and what is missing to complete it."""
from __future__ import annotations

from dataclasses import dataclass, field
import math
from typing import Any, Sequence


@dataclass
class Section:
    title: str
    body: list[str] = field(default_factory=list)       # Markdown blocks, in order
    missing: list[str] = field(default_factory=list)    # runs (or data) the section lacks, one line each

    def render(self) -> str:
        parts = [f"## {self.title}", *self.body]
        if self.missing:
            parts.append("**Missing** (this section is incomplete without them):\n\n"
                         + "\n".join(f"- {m}" for m in self.missing))
        return "\n\n".join(parts)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def accuracy(acc: float, stderr: float, n: int | None = None) -> str:
    return f"{acc:.3f} ± {stderr:.3f}" + (f" (n={n})" if n is not None else "")


def mean_se(xs: Sequence[float]) -> tuple[float, float] | None:
    """Mean and its standard error (sample standard deviation / sqrt n); None for no values."""
    if not xs:
        return None
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def eval_command(benchmark: str, policy: str, method: str, extra: str = "", name: str | None = None) -> str:
    """The ``pra eval`` call that would make a missing run, writing to runs/BENCHMARK/POLICY/NAME: on a
    seeded sample under every cyclic rotation of the options, so that it pairs with the others."""
    tail = f" {extra}" if extra else ""
    return (f"`pra eval --benchmark {benchmark} --policy {policy} --method {method}{tail} --permute cyclic "
            f"--sample 200 --seed 0 --out runs/{benchmark}/{policy}/{name or method}`")
