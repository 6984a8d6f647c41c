from pra.prompts import policy_messages, steps_prefix
from pra.steps import extract_answer, split_steps
from pra.types import Question

Q = Question("q1", "Which vitamin prevents scurvy?", {"A": "A", "B": "B12", "C": "C", "D": "D"}, "C", "t")


def test_split_steps_numbered_and_preamble():
    text = "Think first.\nStep 1: Scurvy is collagen failure.\nStep 2:  Needs vitamin C.\n step 3: so the answer is (C)"
    assert split_steps(text) == ["Think first.", "Scurvy is collagen failure.", "Needs vitamin C.",
                                 "so the answer is (C)"]


def test_split_steps_empty_and_markers_only():
    assert split_steps("") == []
    assert split_steps("Step 1:\nStep 2:") == []


def test_extract_answer_takes_last_valid_letter():
    assert extract_answer("the answer is (B) ... no wait, the answer is (C).", Q.letters) == "C"
    assert extract_answer("The answer is (c)", Q.letters) == "C"
    assert extract_answer("So the answer is: (D)", Q.letters) == "D"


def test_extract_answer_rejects_letters_outside_the_options():
    yes_no = ["A", "B"]
    assert extract_answer("the answer is (C)", yes_no) is None
    assert extract_answer("the answer is (E)", Q.letters) is None


def test_extract_answer_loose_forms_and_answerless():
    assert extract_answer("Answer: B", Q.letters) == "B"
    assert extract_answer("The answer is D. Striae of Retzius.", Q.letters) == "D"
    assert extract_answer("Identify the correct option.", Q.letters) is None
    assert extract_answer("", Q.letters) is None


def test_prompt_layout():
    chat = policy_messages(Q, chat=True)
    assert [m.role for m in chat] == ["system", "user"]
    assert "Step N:" in chat[1].content and "the answer is (X)" in chat[1].content
    assert "C. C" in chat[1].content and "Example" not in chat[1].content
    plain = policy_messages(Q, chat=False, docs=[("Scurvy", "Vitamin C deficiency.")])
    assert len(plain) == 1 and "Example" in plain[0].content
    body = plain[0].content
    assert body.index("Vitamin C deficiency") < body.index(Q.question)   # documents before the question
    assert steps_prefix(["a", "b"], 3) == "Step 1: a\nStep 2: b\nStep 3:"
    assert steps_prefix([], 1) == "Step 1:"
