"""Each question's beam search as a ``rich`` tree in the terminal: every candidate step with its reward,
action readout, search and passages, kept or pruned, and the final answer against gold."""
from __future__ import annotations

from rich.console import Console, Group
from rich.text import Text
from rich.tree import Tree

from eval.analysis import palette
from eval.analysis.viewer.trees import QuestionTree, RunTrees, TreeNode

TEXT_CHARS = 160       # a step's text is cut here; the viewer page shows it whole


def _outcome(q: QuestionTree) -> Text:
    mark = palette.CORRECT if q.correct else palette.INCORRECT
    line = Text.assemble(("answer ", "bold"), (f"{q.prediction}", "bold"), f"  gold {q.gold}  ",
                         (mark.name, f"bold {mark.color}"))
    if q.forced:
        line.append(f"  {palette.FORCED.name}", style=palette.FORCED.color)
    return line


def _label(node: TreeNode, trees: RunTrees) -> Group:
    status = palette.KEPT if node.kept else palette.PRUNED
    head = Text.assemble((f"step {node.depth} ", "bold"), (f"{status.name:6s} ", status.color))
    if node.reward is not None:
        head.append(f"{palette.REWARD} ")
        head.append(f"{node.reward:.2f}", style=f"bold {palette.reward_color(node.reward)}")
    if node.action is not None:
        head.append(f"  {palette.ACTION} {node.action:.2f}")
    search = palette.SEARCHED if node.searched else palette.NOT_SEARCHED
    head.append(f"  {search.name}", style=search.color)
    if node.answer:
        head.append(f"  -> answer {node.answer}" + (f" ({palette.FORCED.name})" if node.forced else ""),
                    style="bold" if node.chosen else "")
    if node.dropped:
        head.append("  (dropped by a later prune)", style=palette.PRUNED.color)
    text = " ".join(node.text.split())
    body = Text(text[:TEXT_CHARS] + ("..." if len(text) > TEXT_CHARS else "") or "(empty step)",
                style="" if node.kept else "dim")
    lines = [head, body]
    if node.doc_ids:
        lines.append(Text("passages: " + " | ".join(trees.title(d) for d in node.doc_ids),
                          style=f"italic {palette.SEARCHED.color}"))
    return Group(*lines)


def question_tree(q: QuestionTree, trees: RunTrees, number: str = "") -> Tree:
    """The question and its options at the root, the candidate steps below their parents."""
    options = "\n".join(f"  {k}. {v}" for k, v in q.options.items())
    root = Tree(Group(Text(f"Question {number}{q.id}", style="bold"), Text(q.question), Text(options),
                      Text(f"{len(q.nodes)} candidate steps ranked, {sum(n.kept for n in q.nodes)} kept, "
                           f"{q.searches} searches", style="dim")))
    branches = {}
    for i, node in enumerate(q.nodes):
        parent = root if node.parent is None else branches[node.parent]
        branches[i] = parent.add(_label(node, trees))
    root.add(_outcome(q))
    return root


def legend(trees: RunTrees) -> str:
    """What the trees' words mean; the reward agent's readouts only where a reward agent scored the steps."""
    scored = any(n.reward is not None for q in trees.questions for n in q.nodes)
    parts = []
    if scored:
        parts += [f"{palette.REWARD}: the reward agent's score of a step, 0 to 1 (a trace's score aggregates its "
                  f"steps'; the beam-width best traces survive each cut)",
                  f"{palette.ACTION}: the agent's probability that the step needs evidence"]
    if any(n.searched or n.action is not None for q in trees.questions for n in q.nodes):
        parts.append(f"{palette.SEARCHED.name}: passages were retrieved for the step and the agent read them")
    parts += [f"{palette.FORCED.name}: no answer written within the step limit, so the answer letter was read "
              "from the policy's logits",
              "options none: each question asked once, its options in their original order (--permute)"]
    return "legend:\n" + "\n".join(f"  {p}" for p in parts)


def print_trees(trees: RunTrees, console: Console | None = None) -> None:
    console = console or Console()
    for i, q in enumerate(trees.questions, 1):
        console.print(question_tree(q, trees, f"{i}/{len(trees.questions)}: "))
        console.print()
    if trees.questions:
        console.print(legend(trees), style="dim", soft_wrap=True)
    for note in trees.notes:
        console.print(Text(f"note: {note}", style="dim"))      # a Text: names with [brackets] are not markup
