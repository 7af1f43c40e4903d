"""Writes the project's own memory-eval set in both published formats (run from the checkout:
``uv run python tests/data/longmem/make_sets.py``; the JSON files are committed).

One conversation of four sessions between Nora (the user side) and Mira (the bot side), with
questions of each kind: single-hop, multi-hop, temporal, knowledge update, abstention, and a
recent one (in the last six messages). Facts are phrased so that the offline memory model
recognises some of them (bot/llm/offline.py): "my name is", "I work as", "I live in".
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).parent

SESSIONS: list[tuple[datetime, list[tuple[str, str]]]] = [
    (
        datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        [
            ("Nora", "Hi Mira! My name is Nora and I work as a pharmacist at a small clinic."),
            ("Mira", "Lovely to meet you, Nora. How long have you been doing that?"),
            ("Nora", "I live in Porto with my brother Tiago and a grey parrot called Pixel."),
            ("Mira", "A parrot! Does he talk much?"),
            ("Nora", "He whistles the theme of an old cartoon every morning at seven."),
            ("Mira", "That sounds like an alarm clock with feathers."),
        ],
    ),
    (
        datetime(2023, 5, 20, 18, 30, tzinfo=UTC),
        [
            ("Nora", "Yesterday I adopted a tabby kitten and named her Figo after the footballer."),
            ("Mira", "Congratulations! How is she settling in?"),
            ("Nora", "Tiago turned out to be allergic to cats, so he sneezes all day now."),
            ("Mira", "Oh no, poor Tiago. Maybe an air purifier would help."),
        ],
    ),
    (
        datetime(2023, 6, 15, 9, 10, tzinfo=UTC),
        [
            (
                "Nora",
                "Big change: I moved from Porto to Lisbon for a job at the university hospital.",
            ),
            ("Mira", "What a step! How do you like the new city?"),
            ("Nora", "The commute is a twenty minute tram ride along the river, which I adore."),
            ("Mira", "Trams by the river sound lovely."),
        ],
    ),
    (
        datetime(2023, 7, 2, 20, 0, tzinfo=UTC),
        [
            ("Nora", "Today I finished my first pottery class and made a lopsided blue bowl."),
            ("Mira", "Lopsided bowls have character. Will you keep going?"),
            ("Nora", "Yes, the course runs every Thursday evening until September."),
            ("Mira", "Then you will have a whole cupboard of bowls by autumn."),
            ("Nora", "The weather has been hot all week and the flat feels like an oven."),
            ("Mira", "Cold showers and closed shutters, that is my advice."),
            ("Nora", "Anyway, how was your weekend?"),
            ("Mira", "Quiet and sunny, thank you for asking."),
        ],
    ),
]

# (question for LoCoMo, question for LongMemEval, answer, evidence, LoCoMo category,
# LongMemEval question type, id suffix)
QUESTIONS = [
    ("What is the name of Nora's parrot?", "What is the name of my parrot?", "Pixel",
     ["D1:3"], 4, "single-session-user", "parrot"),
    ("Which pet makes Tiago sneeze?", "Which of my pets makes my brother sneeze?",
     "Figo, the tabby kitten", ["D2:1", "D2:3"], 1, "multi-session", "sneeze"),
    ("When did Nora adopt her kitten?", "When did I adopt my kitten?", "19 May 2023",
     ["D2:1"], 2, "temporal-reasoning", "kitten"),
    ("Which city does Nora live in now?", "Which city do I live in now?", "Lisbon",
     ["D1:3", "D3:1"], 4, "knowledge-update", "city"),
    ("On which evening does Nora's pottery course run?",
     "On which evening does my pottery course run?", "Thursday", ["D4:3"], 4,
     "single-session-user", "pottery"),
    ("What is the name of Nora's dog?", "What is the name of my dog?", "", [], 5,
     "single-session-user", "dog_abs"),
]  # fmt: skip


def locomo_date(when: datetime) -> str:
    """LoCoMo's ``1:56 pm on 8 May, 2023``."""
    hour = when.hour % 12 or 12
    half = "pm" if when.hour >= 12 else "am"
    return f"{hour}:{when.minute:02d} {half} on {when.day} {when.strftime('%B')}, {when.year}"


def lme_date(when: datetime) -> str:
    """LongMemEval's ``2023/05/20 (Sat) 02:21``."""
    return when.strftime("%Y/%m/%d (%a) %H:%M")


def locomo() -> list[dict[str, object]]:
    """The set as one LoCoMo sample."""
    conversation: dict[str, object] = {"speaker_a": "Nora", "speaker_b": "Mira"}
    for n, (when, turns) in enumerate(SESSIONS, start=1):
        conversation[f"session_{n}_date_time"] = locomo_date(when)
        conversation[f"session_{n}"] = [
            {"speaker": who, "dia_id": f"D{n}:{k}", "text": text}
            for k, (who, text) in enumerate(turns, start=1)
        ]
    qa = []
    for question, _, answer, evidence, category, _, _ in QUESTIONS:
        item: dict[str, object] = {"question": question, "evidence": evidence, "category": category}
        if category == 5:
            item["adversarial_answer"] = "Biscuit"
        else:
            item["answer"] = answer
        qa.append(item)
    return [{"sample_id": "own-1", "conversation": conversation, "qa": qa}]


def longmemeval() -> list[dict[str, object]]:
    """The set as LongMemEval instances, one per question, each with the whole history."""
    out = []
    for _, question, answer, evidence, _, qtype, suffix in QUESTIONS:
        sessions = []
        for n, (_, turns) in enumerate(SESSIONS, start=1):
            sessions.append(
                [
                    {"role": "user" if who == "Nora" else "assistant", "content": text}
                    | ({"has_answer": True} if f"D{n}:{k}" in evidence else {})
                    for k, (who, text) in enumerate(turns, start=1)
                ]
            )
        out.append(
            {
                "question_id": f"own_{suffix}",
                "question_type": qtype,
                "question": question,
                "answer": answer or "The conversation does not say: no dog was mentioned.",
                "question_date": lme_date(datetime(2023, 7, 3, 10, 0, tzinfo=UTC)),
                "haystack_session_ids": [f"s{n}" for n in range(1, len(SESSIONS) + 1)],
                "haystack_dates": [lme_date(when) for when, _ in SESSIONS],
                "haystack_sessions": sessions,
                "answer_session_ids": sorted({f"s{e[1]}" for e in evidence}),
            }
        )
    return out


def main() -> None:
    """Write both files."""
    for name, data in (("locomo_own.json", locomo()), ("longmemeval_own.json", longmemeval())):
        (HERE / name).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
