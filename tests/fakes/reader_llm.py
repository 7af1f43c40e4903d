"""Scripted models for the memory eval (bench/longmem): answers that depend only on the prompt.

``ReaderLLM`` answers a question with the sentence of its memory layers (the window messages,
the summary and user-memory blocks; not the persona pin) that shares the most content words
with the question, or "I don't know" when none shares any. ``KeywordJudge`` grades like the
LLM judge would for such answers: CORRECT when every content word of the gold answer is in
the response (an abstention question: when the response says it does not know).
"""

from __future__ import annotations

import re

from bench.longmem.evidence import STOPWORDS, words
from bench.longmem.scoring import judge_fields
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, TextBlock, Usage

_SENTENCE = re.compile(r"[^.!?\n]+")


def _content(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS}


class ReaderLLM(BaseLLM):
    """Answers from its prompt's memory layers only; counts its calls."""

    name = "reader"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        """The best-matching sentence, or "I don't know"."""
        self.calls += 1
        question = request.messages[-1].text if request.messages else ""
        wanted = _content(question)
        tags = ("<user_memory>", "<conversation_summary>")
        memory = [b.text for b in request.system if any(tag in b.text for tag in tags)]
        memory += [
            b.text for m in request.messages[:-1] for b in m.blocks if isinstance(b, TextBlock)
        ]
        best, score = "I don't know.", 0
        for text in memory:
            for sentence in _SENTENCE.findall(text):
                overlap = len(wanted & _content(sentence))
                if overlap > score:
                    best, score = sentence.strip(), overlap
        return ModelResult(best, Usage(len(question) // 3, len(best) // 3), "reader", "end_turn")


class KeywordJudge(BaseLLM):
    """Grades the judge prompt by keywords of the gold answer."""

    name = "keyword-judge"

    async def complete(self, request: ModelRequest) -> ModelResult:
        """CORRECT or WRONG."""
        _question, gold, response, abstain = judge_fields(request.messages[-1].text)
        if abstain:
            ok = "don't know" in response.lower() or "do not know" in response.lower()
        else:
            ok = bool(_content(gold)) and _content(gold) <= _content(response)
        verdict = "CORRECT" if ok else "WRONG"
        return ModelResult(verdict, Usage(10, 1), "keyword-judge", "end_turn")
