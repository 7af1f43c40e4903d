"""The memory eval harness (bench/longmem, docs/memory-eval.md) on the project's own set
(tests/data/longmem), end to end through personabot's real path with a model that answers
only from its prompt: readers, evidence-in-prompt by layer, the baselines, scoring, resume,
the report and the command line."""

from __future__ import annotations

import argparse
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.longmem.command import eval_memory
from bench.longmem.datasets import DatasetError, load
from bench.longmem.evidence import present
from bench.longmem.replay import Setup, exchanges, replay
from bench.longmem.report import markdown, summary
from bench.longmem.runner import Models, RunOptions, run
from bench.longmem.scoring import (
    JUDGE_PROMPT,
    JUDGE_SYSTEM,
    Judge,
    abstains,
    judge_fields,
    judge_request,
    token_f1,
)
from bot.app import cli, eval_commands
from bot.llm.offline import OfflineLLM
from memory.assemble import Budget
from memory.retention.worker import RetentionPolicy
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.openai_api import FakeOpenAIAPI
from tests.fakes.reader_llm import KeywordJudge, ReaderLLM

DATA = Path(__file__).parents[1] / "data" / "longmem"
LOCOMO = DATA / "locomo_own.json"
LONGMEMEVAL = DATA / "longmemeval_own.json"
# A window of six messages: session 4's last six are in it, nothing earlier.
SETUP = Setup(budget=Budget(window_messages=6))


def _models(reader: ReaderLLM | None = None) -> Models:
    return Models(reader or ReaderLLM(), OfflineLLM(), Judge(KeywordJudge(), "judge"))


def _by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["question_id"].rsplit("-", 1)[-1].removeprefix("own_"): r for r in rows}


# -- readers ---------------------------------------------------------------------------------


def test_locomo_reader_maps_speakers_dates_categories_and_evidence() -> None:
    [conv] = load(LOCOMO)
    assert (conv.user_name, conv.bot_name) == ("Nora", "Mira")
    assert len(conv.sessions) == 4
    assert conv.sessions[0].start == datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()
    first = conv.sessions[0].utterances
    assert [u.role for u in first[:2]] == ["user", "assistant"]
    assert first[2].ref == "D1:3" and "Pixel" in first[2].text
    cats = [q.category for q in conv.questions]
    assert cats == ["single-hop", "multi-hop", "temporal", "single-hop", "single-hop", "abstention"]
    assert conv.questions[1].evidence == ("D2:1", "D2:3")
    assert conv.questions[-1].abstain and conv.questions[-1].answer == ""


def test_longmemeval_reader_takes_evidence_from_has_answer_turns() -> None:
    convs = load(LONGMEMEVAL)
    assert len(convs) == 6 and all(len(c.questions) == 1 for c in convs)
    update = next(c for c in convs if c.id == "own_city")
    [q] = update.questions
    assert q.category == "knowledge-update" and q.answer == "Lisbon"
    assert q.evidence == ("s1:2", "s3:0")
    assert "Porto" in update.texts()["s1:2"]
    assert q.asked_at == datetime(2023, 7, 3, 10, 0, tzinfo=UTC).timestamp()
    assert next(c for c in convs if c.id == "own_dog_abs").questions[0].abstain


def test_locomo_evidence_ids_are_split_and_unknown_ones_left_out(tmp_path: Path) -> None:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    data[0]["qa"][0]["evidence"] = ["D1:3; D2:1", "D9:99"]
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(data), encoding="utf-8")
    [conv] = load(odd)
    assert conv.questions[0].evidence == ("D1:3", "D2:1")


def test_a_file_in_neither_format_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"question": "?"}]), encoding="utf-8")
    with pytest.raises(DatasetError, match="neither LoCoMo"):
        load(bad)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"conversation": {"speaker_a": "A"}, "qa": []}]), "utf-8")
    with pytest.raises(DatasetError, match="speaker_b"):
        load(broken)


def test_sessions_become_exchanges_with_an_opener_and_a_closer() -> None:
    [conv] = load(LOCOMO)
    pairs = exchanges(conv.sessions[0].utterances)
    assert [len(said) for said, _ in pairs] == [1, 1, 1]
    assert pairs[0][1].startswith("Lovely to meet you")
    bot_first = tuple(reversed(conv.sessions[0].utterances[:2]))
    [(opener, reply), (said, closer)] = exchanges(bot_first)
    assert opener[0].text == "Hi!" and reply.startswith("Lovely")
    assert said[0].text.startswith("Hi Mira") and closer == "OK."


# -- evidence and scoring --------------------------------------------------------------------


def test_evidence_matches_verbatim_text_or_a_distinctive_fragment() -> None:
    said = "I live in Porto with my brother Tiago and a grey parrot called Pixel."
    memory = '{"semantic": {"location": ["Porto with my brother Tiago and a grey parrot"]}}'
    assert present(said, f"earlier: {said}")
    assert present(said, memory)  # the fragment the memory model kept
    assert not present(said, "I live in a flat with my parents.")  # stopwords alone: no match
    assert not present(said, "")


def test_scores_token_f1_abstention_and_judge_prompt() -> None:
    assert token_f1("Pixel", "Pixel") == 1.0
    assert token_f1("his name is Pixel", "Pixel") == pytest.approx(0.4)
    assert token_f1("Figo", "Pixel") == 0.0
    assert abstains("Sorry, I don't know.") and not abstains("Pixel")
    request = judge_request("judge", "Which city?", "Lisbon", "Lisbon,\nnow", abstain=False)
    assert judge_fields(request.messages[-1].text) == (
        "Which city?",
        "Lisbon",
        "Lisbon, now",
        False,
    )


def test_the_docs_print_the_judge_prompt_as_it_is_sent() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "memory-eval.md").read_text(encoding="utf-8")
    assert f"```text\n{JUDGE_SYSTEM}\n```" in doc
    assert f"```text\n{JUDGE_PROMPT}\n```" in doc


# -- end to end ------------------------------------------------------------------------------


async def test_locomo_run_evidence_by_layer_and_baselines(tmp_path: Path) -> None:
    """Full history carries every evidence turn, no memory none, the window only the recent
    one; personabot's user memory carries a session-1 fact into a later chat session."""
    rows = await run(load(LOCOMO), _models(), RunOptions(setup=SETUP), tmp_path / "r.jsonl",
                     resume=False)  # fmt: skip
    q = _by_id(rows)
    assert set(q) == {"q0", "q1", "q2", "q3", "q4", "q5"}
    with_evidence = [r for r in rows if r["evidence_refs"]]
    assert all(r["ways"]["full_history"]["evidence_in_prompt"] for r in with_evidence)
    assert not any(r["ways"]["no_memory"]["evidence_in_prompt"] for r in with_evidence)
    window = {k: r["ways"]["window_only"]["evidence_in_prompt"] for k, r in q.items()}
    assert window == {"q0": False, "q1": False, "q2": False, "q3": False, "q4": True, "q5": None}
    ours = q["q0"]["ways"]["personabot"]  # the parrot, told in session 1
    assert ours["evidence"] == {"D1:3": ["facts"]}
    assert "memory" in ours["layers"]
    assert ours["judge"] is True  # the reader found Pixel in the facts
    assert q["q0"]["ways"]["no_memory"]["judge"] is False
    assert q["q5"]["ways"]["no_memory"]["judge"] is True  # abstaining is right for the dog
    assert q["q5"]["ways"]["no_memory"]["score"] == 1.0
    assert q["q4"]["ways"]["window_only"]["score"] > 0  # LoCoMo's F1 against "Thursday"
    for way in ("personabot", "full_history", "window_only", "no_memory"):
        figures = q["q0"]["ways"][way]
        assert figures["input_tokens"] > 0 and figures["cost_cached"] > 0
    assert (
        q["q0"]["ways"]["no_memory"]["input_tokens"]
        < q["q0"]["ways"]["personabot"]["input_tokens"]
        < q["q0"]["ways"]["full_history"]["input_tokens"]
    )
    figures = summary(rows, ("personabot", "full_history", "window_only", "no_memory"))
    assert figures["full_history"]["evidence_in_prompt"] == 1.0
    assert figures["no_memory"]["evidence_in_prompt"] == 0.0
    assert figures["window_only"]["evidence_by_layer"]["window"] == pytest.approx(1 / 5)
    assert figures["personabot"]["evidence_by_layer"]["facts"] > 0
    assert figures["personabot"]["memory_input_tokens_per_question"] > 0  # extraction ran
    assert q["q0"]["replay"]["memory_calls"]["extract"] >= 3  # after each quiet gap
    assert figures["full_history"]["memory_input_tokens_per_question"] is None
    table = markdown(figures, "own set")
    assert "| full_history | 6 |" in table and "abstention" in table


async def test_one_long_session_keeps_early_turns_in_the_summary(tmp_path: Path) -> None:
    """With sessions that never end, old messages are folded into the rolling summary, and
    the evidence metric finds them there."""
    setup = Setup(budget=Budget(window_messages=6), session_idle_seconds=None)
    options = RunOptions(setup=setup, ways=("personabot",), limit=1)
    [row] = await run(load(LOCOMO), _models(), options, tmp_path / "r.jsonl", resume=False)
    ours = row["ways"]["personabot"]
    assert "summary" in ours["layers"]
    assert "summary" in ours["evidence"]["D1:3"]


def _messages(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        return int(con.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    finally:
        con.close()


async def test_retention_runs_in_the_replay_and_user_memory_outlives_it(tmp_path: Path) -> None:
    """Sessions closed over 30 days before the question are deleted by the retention worker;
    the facts learned from them stay (the parrot test above answers from them)."""
    [conv] = load(LOCOMO)
    until = conv.questions[0].asked_at
    kept, aged = tmp_path / "kept.sqlite3", tmp_path / "aged.sqlite3"
    off = Setup(budget=SETUP.budget, retention=RetentionPolicy(days=0))
    await replay(conv, off, kept, memory_llm=OfflineLLM(), until=until)
    await replay(conv, SETUP, aged, memory_llm=OfflineLLM(), until=until)
    assert _messages(kept) == 22  # 11 exchanges, the user's messages and the replies
    assert 0 < _messages(aged) < _messages(kept)


async def test_resume_skips_questions_already_done(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    first = ReaderLLM()
    rows = await run(load(LOCOMO), _models(first), RunOptions(setup=SETUP, limit=2), results,
                     resume=False)  # fmt: skip
    assert len(rows) == 2 and first.calls == 2 * 4
    with results.open("a", encoding="utf-8") as f:
        f.write('{"question_id": "own-1-q2", "ways"')  # a line torn by an interruption
    again = ReaderLLM()
    rows = await run(load(LOCOMO), _models(again), RunOptions(setup=SETUP), results, resume=True)
    assert again.calls == 4 * 4
    assert sorted(r["question_id"] for r in rows) == [f"own-1-q{i}" for i in range(6)]


async def test_longmemeval_run_uses_the_judge_and_each_own_history(tmp_path: Path) -> None:
    rows = await run(load(LONGMEMEVAL), _models(), RunOptions(setup=SETUP), tmp_path / "r.jsonl",
                     resume=False)  # fmt: skip
    q = {r["question_id"]: r for r in rows}
    assert len(q) == 6
    assert all(w["score"] is None for r in rows for w in r["ways"].values())  # judge only
    pottery = q["own_pottery"]["ways"]
    assert pottery["window_only"]["evidence"] == {"s4:2": ["window"]}
    assert pottery["window_only"]["judge"] is True
    assert q["own_parrot"]["ways"]["personabot"]["evidence"] == {"s1:2": ["facts"]}


def test_the_command_line_writes_json_markdown_and_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval.json"
    argv = ["eval", "memory", str(LOCOMO), "--provider", "offline", "--offline-memory"]
    assert cli.main([*argv, "--out", str(out), "--limit", "2", "--no-judge"]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["summary"]) == {"personabot", "full_history", "window_only", "no_memory"}
    assert data["summary"]["full_history"]["evidence_in_prompt"] == 1.0
    assert len(data["questions"]) == 2
    assert out.with_suffix(".md").read_text(encoding="utf-8").startswith("## Memory eval")
    assert len(out.with_suffix(".jsonl").read_text(encoding="utf-8").splitlines()) == 2
    assert "| personabot | 2 |" in capsys.readouterr().out
    missing = tmp_path / "nothing.json"
    elsewhere = ["--out", str(tmp_path / "other.json")]
    assert cli.main(["eval", "memory", str(missing), "--provider", "offline", *elsewhere]) == 2
    assert "nothing.json" in capsys.readouterr().err  # the dataset named, not the outputs


def _eval_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    eval_commands.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["eval", "memory", *argv])


async def test_a_local_model_through_an_openai_compatible_endpoint(tmp_path: Path) -> None:
    """The flags reach the endpoint through the real SDK: every way's question and the judge."""
    async with FakeOpenAIAPI(reply_text="Pixel") as api:
        args = _eval_args(
            str(LOCOMO), "--provider", "openai", "--base-url", api.api_url,
            "--model", "local-model", "--offline-memory", "--limit", "1",
            "--out", str(tmp_path / "local.json"),
        )  # fmt: skip
        assert await eval_memory(args) == 0
        models = {r.body["model"] for r in api.requests}
        asked = [r for r in api.requests if r.last_user_text.endswith("Nora's parrot?")]
    assert models == {"local-model"} and len(asked) == 4  # personabot and three baselines
    assert len(api.requests) == 8  # and the judge's four verdicts
    data = json.loads((tmp_path / "local.json").read_text(encoding="utf-8"))
    assert data["questions"][0]["ways"]["personabot"]["answer"] == "Pixel"
    assert data["summary"]["personabot"]["dataset_score"] == 1.0


async def test_claude_through_the_messages_api_with_cache_breakpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The anthropic provider: the key from the environment, personabot's request with its
    breakpoints, the judge's verdict read back."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    async with FakeMessagesAPI(reply_text="CORRECT") as api:
        args = _eval_args(
            str(LOCOMO), "--provider", "anthropic", "--base-url", api.base_url,
            "--model", "claude-test", "--offline-memory", "--limit", "1",
            "--ways", "personabot,no_memory", "--out", str(tmp_path / "claude.json"),
        )  # fmt: skip
        assert await eval_memory(args) == 0
        ours = next(r for r in api.requests if "user_memory" in json.dumps(r.body))
    assert ours.body["model"] == "claude-test"
    assert ("system", 1) in ours.cache_breakpoints  # after the pin and the user memory
    data = json.loads((tmp_path / "claude.json").read_text(encoding="utf-8"))
    assert data["summary"]["personabot"]["judge_accuracy"] == 1.0
    assert set(data["summary"]) == {"personabot", "no_memory"}


async def test_a_judge_of_the_configured_provider_uses_the_endpoint_given_on_the_line(
    tmp_path: Path,
) -> None:
    """[llm] is an OpenAI-compatible endpoint; the run names another one with --base-url (no
    --provider) and --judge-provider openai, the configured provider: the judge is that same
    provider, so it follows --base-url too, not [llm]'s endpoint."""
    async with FakeOpenAIAPI(reply_text="CORRECT") as given, FakeOpenAIAPI() as configured:
        config = tmp_path / "personabot.toml"
        config.write_text(
            f'[llm]\nprovider = "openai"\nbase_url = "{configured.api_url}"\n'
            '[[personas]]\nid = "mira"\nname = "Mira"\nsystem = "You are Mira."\n'
            'first_message = ["Hi."]\n',
            encoding="utf-8",
        )
        args = _eval_args(
            str(LOCOMO), "--config", str(config), "--base-url", given.api_url,
            "--judge-provider", "openai", "--offline-memory", "--ways", "no_memory",
            "--limit", "1", "--out", str(tmp_path / "eval.json"),
        )  # fmt: skip
        assert await eval_memory(args) == 0
        assert configured.requests == []
        assert len(given.requests) == 2  # the answer and the verdict


async def test_a_question_s_own_turn_starts_no_paid_memory_work(tmp_path: Path) -> None:
    """Each question is asked on a copy of the replayed store, thrown away after: a summary
    its turn would start (the window full) is never asked of the memory model, whose every
    call is then the replay's, as reported."""
    config = tmp_path / "personabot.toml"
    config.write_text(
        '[memory]\nwindow_messages = 5\n[[personas]]\nid = "mira"\nname = "Mira"\n'
        'system = "You are Mira."\nfirst_message = ["Hi."]\n',
        encoding="utf-8",
    )
    async with FakeOpenAIAPI(reply_text="Pixel") as api:
        args = _eval_args(
            str(LOCOMO), "--config", str(config), "--provider", "openai",
            "--base-url", api.api_url, "--ways", "personabot", "--no-judge", "--limit", "4",
            "--session-idle-minutes", "0", "--out", str(tmp_path / "eval.json"),
        )  # fmt: skip
        assert await eval_memory(args) == 0
        data = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
        replayed = data["questions"][0]["replay"]["memory_calls"]
        assert sum(replayed.values()) > 0  # the replay's own summaries
        assert len(api.requests) == len(data["questions"]) + sum(replayed.values())


async def test_the_memory_model_failing_during_the_replay_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The memory model (here the endpoint under test) refuses a summary while the history is
    replayed: personabot's memory keeps what it had and the run goes on, and the result says
    so (per question, and on the console), instead of weaker figures with no trace."""
    config = tmp_path / "personabot.toml"
    config.write_text(
        '[memory]\nwindow_messages = 5\n[[personas]]\nid = "mira"\nname = "Mira"\n'
        'system = "You are Mira."\nfirst_message = ["Hi."]\n',
        encoding="utf-8",
    )
    async with FakeOpenAIAPI(reply_text="Pixel") as api:
        api.fail_next(status=400)  # the replay's first memory call
        args = _eval_args(
            str(LOCOMO), "--config", str(config), "--provider", "openai",
            "--base-url", api.api_url, "--ways", "personabot", "--no-judge", "--limit", "1",
            "--session-idle-minutes", "0", "--out", str(tmp_path / "eval.json"),
        )  # fmt: skip
        assert await eval_memory(args) == 0
    data = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    assert sum(data["questions"][0]["replay"]["memory_failures"].values()) == 1
    assert "the memory model failed 1 times while replaying" in capsys.readouterr().err
