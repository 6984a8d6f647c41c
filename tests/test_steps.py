import pytest
from hypothesis import given, strategies as st

from pra.backends.base import cut_at_stop
from pra.prompts import BASE_EXAMPLES, PROMPT_KINDS, copies_example, policy_messages, policy_prompt_id, steps_prefix
from pra.steps import ANSWER_RE, CONNECTIVES, STEP_STOPS, extract_answer, split_steps
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
    assert len(plain) == 1 and all(example in plain[0].content for example in BASE_EXAMPLES)
    # one worked example per answer letter, so that the examples teach no letter
    assert sorted(extract_answer(example, "ABCD") for example in BASE_EXAMPLES) == list("ABCD")
    body = plain[0].content
    assert body.index("Vitamin C deficiency") < body.index(Q.question)   # documents before the question
    assert steps_prefix(["a", "b"], 3) == "Step 1: a\nStep 2: b\nStep 3:"
    assert steps_prefix([], 1) == "Step 1:"


def test_policy_prompt_id_follows_what_the_policy_reads(monkeypatch):
    ids = {(chat, kind): policy_prompt_id(chat, kind) for chat in (True, False) for kind in PROMPT_KINDS}
    assert len(set(ids.values())) == 8
    import pra.prompts as prompts
    monkeypatch.setattr(prompts, "BASE_EXAMPLES", BASE_EXAMPLES[:1])
    # another worked example changes the base model's step prompts, not its direct answer or a chat prompt
    changed = {key for key, value in ids.items() if policy_prompt_id(*key) != value}
    assert changed == {(False, "steps"), (False, "docs"), (False, "examples")}
    monkeypatch.setattr(prompts, "SYSTEM", "Another system prompt.")
    assert policy_prompt_id(True, "direct") != ids[True, "direct"]


def test_copies_example_takes_six_words_in_a_row_not_the_answer_clause():
    assert copies_example(["Hmm.", "The wrist extensors are supplied by the radial nerve here."])
    assert not copies_example(["It is supplied by the radial nerve."])         # five words in a row
    assert not copies_example(["Thus, so the answer is (B)."]) and not copies_example([])


# Steps SmolLM2-135M-Instruct wrote (eval/data/qwc_pool.jsonl, greedy traces on medmcqa-train) and forms
# from the issue, with the letter a reader takes from them.
REAL_OUTPUTS = [
    ("Determine the answer\nThe answer is D.", "D"),
    ("Determine the options\nA) No test is required now, so the answer is A.\nB) Ultra sound at this point "
     "will definitely tell her that next baby will be down syndromic or not.\nC) Amniotic", "A"),
    ("Conclude the answer.\n\nThe answer is C.\n\nC. Constriction of the afferent aeriomlle decreases the "
     "blood flow to the glomerulas.", "C"),
    ("Conclude the answer.\n\nThe answer is (D).", "D"),
    ("Choose the correct option\nThe correct option is D.\n\nThe answer is D.", "D"),
    ("Conclude the answer.\n\nThe answer is C. Choice of the dentist.", "C"),
    ("Identify the correct option.", None),
    ("Conclude with the answer.\n\nAxonal transport is a process that involves the transport of axonal", None),
    ("Thus the answer is option D", "D"),
    ("The answer is D: Left ventricular failure.", "D"),
    ("The correct option is (B)", "B"),
    ("The answer is A patient with these findings needs a biopsy.", None),
    ("The answer is A because scurvy is vitamin C deficiency.", "A"),
    ("So the answer would be **B**.", "B"),
    ("Answer: D", "D"),
]


@pytest.mark.parametrize("text,letter", REAL_OUTPUTS)
def test_extract_answer_reads_what_models_write(text, letter):
    assert extract_answer(text, Q.letters) == letter


def test_step_stops_keep_an_answer_written_after_the_step():
    text, _ = cut_at_stop("Scurvy is vitamin C deficiency.\nAnswer: C\nStep 2: more", STEP_STOPS)
    assert extract_answer(text, Q.letters) == "C"


LETTER = st.sampled_from("ABCD")
FILLER = st.text(st.characters(codec="ascii", exclude_characters="()"), max_size=40).filter(
    lambda t: not ANSWER_RE.search(t))
FORMS = ["the answer is ({})", "The answer is {}.", "Answer: {}", "the answer is option {}",
         "The answer is {}: because", "The correct option is ({})", "the answer is: ({})"]


@given(before=FILLER, letter=LETTER, form=st.sampled_from(FORMS), after=st.sampled_from(["", " Done.", "\n"]))
def test_extract_answer_finds_any_form_anywhere(before, letter, form, after):
    assert extract_answer(before + " " + form.format(letter) + after, Q.letters) == letter


@given(first=LETTER, last=LETTER, middle=FILLER)
def test_extract_answer_takes_the_last_statement(first, last, middle):
    text = f"the answer is ({first}). {middle} Wait, the answer is ({last})."
    assert extract_answer(text, Q.letters) == last


@given(st.text(max_size=200))
def test_extract_answer_is_total_and_returns_an_option(text):
    assert extract_answer(text, Q.letters) in (None, *Q.letters)


@given(word=st.from_regex(r"[a-z]{3,10}", fullmatch=True).filter(lambda w: w not in CONNECTIVES))
def test_an_article_after_answer_is_no_letter(word):
    assert extract_answer(f"The answer is A {word} with fever.", Q.letters) is None
