"""LoCoMo and LongMemEval in their published JSON formats, read into one plain shape.

LoCoMo (``locomo10.json``): a list of samples ``{sample_id, conversation: {speaker_a,
speaker_b, session_N: [{speaker, dia_id, text}], session_N_date_time}, qa: [{question,
answer, evidence: [dia_id], category}]}``; categories 1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop, 5 adversarial (the answer is absent: the right answer is to abstain).

LongMemEval (``longmemeval_s.json``, ``longmemeval_oracle.json``): a list of instances
``{question_id, question_type, question, answer, question_date, haystack_session_ids,
haystack_dates, haystack_sessions: [[{role, content, has_answer?}]], answer_session_ids}``; a
question id ending in ``_abs`` is an abstention question. Each instance has its own history.

Mapping onto a private chat (docs/memory-eval.md#mapping): the user side (LoCoMo's speaker_a,
LongMemEval's ``user``) writes the user's messages, the other side (speaker_b, ``assistant``)
is replayed as the bot's replies. Evidence turns are named by a reference: LoCoMo's dia_id,
LongMemEval's ``<session id>:<turn index>`` of each ``has_answer`` turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from bot.core.errors import PersonabotError

Role = Literal["user", "assistant"]

LOCOMO_CATEGORIES: Final[Mapping[int, str]] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "abstention",
}
#: LoCoMo has no question date: questions are asked this long after the last session began.
LOCOMO_QUESTION_DELAY: Final = 86_400.0
ABSTENTION: Final = "abstention"


class DatasetError(PersonabotError):
    """A dataset file that is not in the published format (the message says where)."""


@dataclass(frozen=True, slots=True)
class Utterance:
    """One turn of a dataset session: who wrote it (user side or bot side) and its text."""

    role: Role
    text: str
    ref: str  # the dataset's name for the turn (evidence refers to it)


@dataclass(frozen=True, slots=True)
class DatasetSession:
    """A dataset session: a chat session starting at ``start`` (epoch seconds)."""

    id: str
    start: float
    utterances: tuple[Utterance, ...]


@dataclass(frozen=True, slots=True)
class Question:
    """A question with its expected answer, category and evidence turns (refs)."""

    id: str
    text: str
    answer: str
    category: str
    evidence: tuple[str, ...]
    asked_at: float

    @property
    def abstain(self) -> bool:
        """Whether the right answer is that the conversation does not say."""
        return self.category == ABSTENTION or self.id.endswith("_abs")


@dataclass(frozen=True, slots=True)
class Conversation:
    """One history and the questions asked after it."""

    id: str
    dataset: str
    user_name: str
    bot_name: str
    sessions: tuple[DatasetSession, ...]
    questions: tuple[Question, ...]

    def texts(self) -> dict[str, str]:
        """Every turn's text by its ref."""
        return {u.ref: u.text for s in self.sessions for u in s.utterances}


# -- dates -----------------------------------------------------------------------------------

_LOCOMO_DATE: Final = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})"
)
_LME_DATE: Final = re.compile(r"(\d{4})/(\d{2})/(\d{2})(?:\s*\(\w+\))?\s*(\d{1,2}):(\d{2})")


def locomo_time(text: str) -> float:
    """``"1:56 pm on 8 May, 2023"`` as epoch seconds (UTC)."""
    m = _LOCOMO_DATE.search(text.strip())
    if m is None:
        raise DatasetError(f"not a LoCoMo date: {text!r}")
    hour, minute, half, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    try:
        when = datetime.strptime(f"{day} {month} {year}", "%d %B %Y")
    except ValueError:
        when = datetime.strptime(f"{day} {month} {year}", "%d %b %Y")
    return when.replace(hour=h, minute=int(minute), tzinfo=UTC).timestamp()


def longmemeval_time(text: str) -> float:
    """``"2023/05/20 (Sat) 02:21"`` as epoch seconds (UTC)."""
    m = _LME_DATE.search(text.strip())
    if m is None:
        raise DatasetError(f"not a LongMemEval date: {text!r}")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp()


# -- readers ---------------------------------------------------------------------------------


def load(path: Path) -> list[Conversation]:
    """Read either dataset from ``path``, telling them apart by their fields; anything not in
    the published format (a field of the wrong type, a date that is no date, an id used
    twice) is a DatasetError naming where, before any model call."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise DatasetError(f"{path}: expected a JSON list of samples (objects)")
    if "conversation" in data[0]:
        reader = read_locomo
    elif "haystack_sessions" in data[0]:
        reader = read_longmemeval
    else:
        raise DatasetError(
            f"{path}: neither LoCoMo (conversation, qa) nor LongMemEval (haystack_*)"
        )
    try:
        conversations = reader(data)
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    _unique(conversations, path)
    return conversations


def _unique(conversations: Sequence[Conversation], path: Path) -> None:
    """Conversation and question ids name a replay's store and a result line: one each."""
    for kind, ids in (
        ("sample", [c.id for c in conversations]),
        ("question", [q.id for c in conversations for q in c.questions]),
    ):
        seen: set[str] = set()
        for one in ids:
            if one in seen:
                raise DatasetError(f"{path}: {kind} id {one!r} appears twice")
            seen.add(one)


def _checked(
    where: str, read: Callable[[Mapping[str, Any], int], Conversation], item: Any, i: int
) -> Conversation:
    """``read(item, i)``, with a field of the wrong type or value as a DatasetError naming
    where."""
    try:
        return read(item, i)
    except DatasetError as exc:
        raise DatasetError(f"{where}: {exc}") from exc
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
        raise DatasetError(f"{where}: {type(exc).__name__}: {exc}") from exc


def _field(item: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in item:
        raise DatasetError(f"{where}: no {key!r}")
    return item[key]


def _session_numbers(conv: Mapping[str, Any]) -> list[int]:
    found = (re.fullmatch(r"session_(\d+)", k) for k in conv)
    return sorted(int(m.group(1)) for m in found if m)


def _locomo_text(turn: Mapping[str, Any]) -> str:
    text = str(turn.get("text", ""))
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def _refs(raw: Sequence[Any], known: set[str]) -> tuple[str, ...]:
    """Evidence dia_ids that name a turn of the conversation: a few published entries hold
    two ids in one string ("D8:6; D9:17") or name no turn at all; those are split or left out
    (a question left with none counts as one without evidence)."""
    refs = (r for item in raw for r in re.split(r"[;,\s]+", str(item)) if r)
    return tuple(dict.fromkeys(r for r in refs if r in known))


def read_locomo(data: Sequence[Mapping[str, Any]]) -> list[Conversation]:
    """LoCoMo samples as conversations (speaker_a is the user, speaker_b the bot)."""
    return [
        _checked(f"sample {sample.get('sample_id', i)}", _locomo_sample, sample, i)
        for i, sample in enumerate(data)
    ]


def _locomo_sample(sample: Mapping[str, Any], i: int) -> Conversation:
    sample_id = str(sample.get("sample_id", i))
    conv = _field(sample, "conversation", "the sample")
    user, bot = (
        str(_field(conv, "speaker_a", "conversation")),
        str(_field(conv, "speaker_b", "conversation")),
    )
    sessions = []
    for n in _session_numbers(conv):
        turns = conv[f"session_{n}"] or []
        if not isinstance(turns, list):
            raise DatasetError(f"session_{n} is not a list of turns")
        start = locomo_time(str(_field(conv, f"session_{n}_date_time", "conversation")))
        sessions.append(
            DatasetSession(
                f"session_{n}", start, tuple(_locomo_turn(t, user, bot, n) for t in turns)
            )
        )
    if not sessions:
        raise DatasetError("no sessions")
    # Replayed in date order (a file whose numbers and dates disagree is replayed as dated);
    # the questions come a day after the latest session.
    sessions.sort(key=lambda s: s.start)
    asked = sessions[-1].start + LOCOMO_QUESTION_DELAY
    known = {u.ref for s in sessions for u in s.utterances}
    questions = tuple(
        Question(
            id=f"{sample_id}-q{j}",
            text=str(_field(qa, "question", f"qa {j}")),
            answer=str(qa.get("answer", "")),
            category=_locomo_category(qa.get("category", 0), j),
            evidence=_refs(qa.get("evidence") or (), known),
            asked_at=asked,
        )
        for j, qa in enumerate(_field(sample, "qa", "the sample"))
    )
    return Conversation(sample_id, "locomo", user, bot, tuple(sessions), questions)


def _locomo_turn(turn: Mapping[str, Any], user: str, bot: str, n: int) -> Utterance:
    """One turn; a speaker who is neither side is refused rather than guessed (a user's own
    words replayed as the bot's would never be learned about the user)."""
    ref = str(_field(turn, "dia_id", f"session_{n}"))
    speaker = turn.get("speaker")
    if speaker not in (user, bot):
        raise DatasetError(
            f"session_{n} turn {ref}: speaker {speaker!r} is neither {user!r} nor {bot!r}"
        )
    return Utterance("user" if speaker == user else "assistant", _locomo_text(turn), ref)


def _locomo_category(raw: Any, j: int) -> str:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise DatasetError(f"qa {j}: category {raw!r} is not a number 1-5")
    try:
        number = int(raw)
    except ValueError:
        raise DatasetError(f"qa {j}: category {raw!r} is not a number 1-5") from None
    return LOCOMO_CATEGORIES.get(number, "other")


def read_longmemeval(data: Sequence[Mapping[str, Any]]) -> list[Conversation]:
    """LongMemEval instances as conversations, one question each (sessions in date order)."""
    return [
        _checked(f"question {item.get('question_id', i)}", _longmemeval_item, item, i)
        for i, item in enumerate(data)
    ]


def _longmemeval_item(item: Mapping[str, Any], i: int) -> Conversation:
    qid = str(_field(item, "question_id", f"instance {i}"))
    where = "the instance"
    ids = _field(item, "haystack_session_ids", where)
    dates = _field(item, "haystack_dates", where)
    bodies = _field(item, "haystack_sessions", where)
    if not len(ids) == len(dates) == len(bodies):
        raise DatasetError("haystack ids, dates and sessions differ in length")
    if not bodies:
        raise DatasetError("no sessions")
    sessions = []
    evidence = []
    for sid, date, body in zip(ids, dates, bodies, strict=True):
        utterances = []
        for k, turn in enumerate(body):
            ref = f"{sid}:{k}"
            role = str(_field(turn, "role", where))
            if role not in ("user", "assistant"):
                raise DatasetError(f"session {sid} turn {k}: role {role!r}")
            utterances.append(Utterance(role, str(turn.get("content", "")), ref))  # type: ignore[arg-type]
            if turn.get("has_answer"):
                evidence.append(ref)
        sessions.append(DatasetSession(str(sid), longmemeval_time(str(date)), tuple(utterances)))
    sessions.sort(key=lambda s: s.start)  # the oracle file is not sorted
    category = "abstention" if qid.endswith("_abs") else str(item.get("question_type", ""))
    question = Question(
        id=qid,
        text=str(_field(item, "question", where)),
        answer=str(_field(item, "answer", where)),
        category=category,
        evidence=tuple(evidence),
        asked_at=longmemeval_time(str(_field(item, "question_date", where))),
    )
    return Conversation(qid, "longmemeval", "User", "Assistant", tuple(sessions), (question,))
