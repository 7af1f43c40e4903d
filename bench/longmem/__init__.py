"""The memory benchmark: LoCoMo and LongMemEval through personabot's real memory path and three
baselines, on any model endpoint (``personabot eval memory``; docs/memory-eval.md).

datasets.py reads both published formats; replay.py plays a conversation through the store,
queue, pipeline, summary and extraction on a manual clock and asks the questions; baselines.py
builds the full-history, window-only and no-memory requests; evidence.py finds the evidence
turns in a request by layer; scoring.py holds the dataset metric and the judge; runner.py runs
and records each question (JSONL, resumable); report.py aggregates; command.py is the CLI's.
"""
