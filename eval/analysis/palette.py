"""The colours and names that the report's figures, the terminal trees and the trace viewer share, so a
reward, a search decision or an outcome reads the same wherever it is drawn."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Mark:
    """A name and its colour (hex)."""
    name: str
    color: str


REWARD = "step reward"          # the reward readout, in [0, 1]
ACTION = "p(search)"            # the action readout: the reward agent's probability of searching
SEARCHES = "searches per question"
# Reward 0 -> 1 in equal steps (ColorBrewer RdYlBu: readable for red-green colour blindness).
REWARD_SCALE = ("#d73027", "#fc8d59", "#fee090", "#91bfdb", "#4575b4")
NO_REWARD = "#9e9e9e"           # a step nobody scored (CoT, self-consistency)

SEARCHED = Mark("searched", "#1b9e77")
NOT_SEARCHED = Mark("no search", "#bdbdbd")
KEPT = Mark("kept", "#252525")
PRUNED = Mark("pruned", "#969696")
CORRECT = Mark("correct", "#4575b4")
INCORRECT = Mark("incorrect", "#d73027")
FORCED = Mark("forced", "#e08214")


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def reward_color(reward: float | None) -> str:
    """The scale's colour for a reward, linear between its stops; grey where there is none."""
    if reward is None:
        return NO_REWARD
    x = min(max(reward, 0.0), 1.0) * (len(REWARD_SCALE) - 1)
    i = min(int(x), len(REWARD_SCALE) - 2)
    lo, hi, f = _rgb(REWARD_SCALE[i]), _rgb(REWARD_SCALE[i + 1]), x - i
    return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(lo, hi))


def palette() -> dict:
    """Everything above as plain data, for the viewer's page (its script draws with the same values)."""
    marks = {"searched": SEARCHED, "not_searched": NOT_SEARCHED, "kept": KEPT, "pruned": PRUNED,
             "correct": CORRECT, "incorrect": INCORRECT, "forced": FORCED}
    return {"reward": REWARD, "action": ACTION, "reward_scale": list(REWARD_SCALE), "no_reward": NO_REWARD,
            **{key: asdict(m) for key, m in marks.items()}}
