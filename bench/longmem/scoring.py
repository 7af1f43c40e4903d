"""Scoring an answer: the dataset's own metric where it has one, and an LLM judge.

- LoCoMo: token F1 of the answer against the gold answer (lower-cased, punctuation and
  articles removed, no stemming); an abstention (adversarial) question scores 1 when the
  answer abstains ("I don't know", "not mentioned"...), else 0.
- LongMemEval and every question: the LLM judge below, CORRECT or WRONG. The prompt is
  printed in docs/memory-eval.md#the-judge (tests/bench/test_longmem.py checks that the two
  are the same).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Final

from bot.core.llm import BaseLLM, ChatMessage, ModelRequest, TextBlock

ABSTAINING: Final = (
    "don't know",
    "do not know",
    "not mentioned",
    "no information",
    "not enough information",
    "doesn't say",
    "does not say",
    "can't tell",
    "cannot tell",
    "no record",
)

JUDGE_SYSTEM: Final = (
    "You grade answers of a chat assistant about its own past conversations. Reply with "
    "exactly one word: CORRECT or WRONG."
)
JUDGE_PROMPT: Final = """Question: {question}
Gold answer: {gold}
Response: {response}
Abstention question: {abstain}

Grade the response against the gold answer.
- CORRECT if the response states the gold answer or an equivalent (the same date in another
  format, a paraphrase, a superset that does not contradict it). For a question about the
  latest value of something that changed, only the latest value is correct.
- For an abstention question (yes above), CORRECT only if the response says it does not know
  or that the conversation does not say; any invented answer is WRONG.
- Otherwise WRONG.
Reply with CORRECT or WRONG."""

_FIELDS: Final = re.compile(
    r"Question: (?P<q>.*)\nGold answer: (?P<g>.*)\nResponse: (?P<r>.*)\n"
    r"Abstention question: (?P<a>yes|no)\n",
    re.S,
)


def judge_fields(prompt: str) -> tuple[str, str, str, bool]:
    """The question, gold answer, response and abstention flag of a judge prompt."""
    m = _FIELDS.search(prompt)
    if m is None:
        raise ValueError("not a judge prompt")
    return m["q"], m["g"], m["r"], m["a"] == "yes"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def judge_request(
    model: str, question: str, gold: str, response: str, abstain: bool
) -> ModelRequest:
    """The judge's request (temperature 0, a few tokens)."""
    text = JUDGE_PROMPT.format(
        question=_one_line(question),
        gold=_one_line(gold) or "(none: the conversation does not say)",
        response=_one_line(response),
        abstain="yes" if abstain else "no",
    )
    return ModelRequest(
        model=model,
        system=(TextBlock(JUDGE_SYSTEM),),
        messages=(ChatMessage.of("user", text),),
        max_tokens=8,
        temperature=0.0,
    )


@dataclass(frozen=True, slots=True)
class Judge:
    """The LLM judge: a model and its name."""

    llm: BaseLLM
    model: str

    async def grade(self, question: str, gold: str, response: str, abstain: bool) -> bool | None:
        """Whether the judge says CORRECT (None: its answer says neither)."""
        return verdict(await self.ask(question, gold, response, abstain))

    async def ask(self, question: str, gold: str, response: str, abstain: bool) -> str:
        """The judge's answer as it wrote it."""
        request = judge_request(self.model, question, gold, response, abstain)
        return (await self.llm.complete(request)).text


#: The verdict's word, however a model wraps it ("**CORRECT**", "Verdict: WRONG").
_VERDICT: Final = re.compile(r"\b(CORRECT|INCORRECT|WRONG)\b", re.IGNORECASE)


def verdict(answer: str) -> bool | None:
    """The judge's first verdict word: CORRECT is True, WRONG or INCORRECT False; None when
    it wrote neither (reported as unjudged, not as wrong)."""
    found = _VERDICT.search(answer)
    return None if found is None else found.group(1).upper() == "CORRECT"


def abstains(answer: str) -> bool:
    """Whether the answer says it does not know."""
    low = answer.lower().replace("’", "'")
    return any(phrase in low for phrase in ABSTAINING)


def _normal_tokens(text: str) -> list[str]:
    text = text.lower()
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    return [w for w in text.split() if w not in ("a", "an", "the", "and")]


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD-style token F1 (LoCoMo's QA metric, without stemming)."""
    pred, ref = _normal_tokens(prediction), _normal_tokens(gold)
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def dataset_score(dataset: str, prediction: str, gold: str, abstain: bool) -> float | None:
    """The dataset's own metric (None: the dataset's metric is the judge)."""
    if dataset != "locomo":
        return None
    if abstain:
        return 1.0 if abstains(prediction) else 0.0
    return token_f1(prediction, gold)
