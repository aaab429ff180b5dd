"""Writes `tests/search/data/chitchat_facts_dev_slice.json`, the slice of the facts set the tests search.

The rule: the development half of `bench._chitchat_facts`; each conversation cut after the chat of its
last question (a question only needs the chats up to its own); the conversations with the fewest
messages so cut, smallest first, until `QUESTIONS` questions are in. Same layout as
`chitchat_dev_slice.json`: runs of (role, text) turns, questions with the (run, position) of the turn
that asked and of the evidence.

    python bench/slice_facts.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic_ai.messages import ModelRequest, TextPart, UserPromptPart

from bench._chitchat_facts import load

QUESTIONS = 16
OUT = Path(__file__).resolve().parent.parent / 'tests' / 'search' / 'data' / 'chitchat_facts_dev_slice.json'


def main() -> None:
    cut: list[tuple[int, str, list[object], list[dict[str, object]]]] = []
    for conversation in load('dev'):
        last = max(question.asked[0] for question in conversation.questions)
        runs: list[object] = []
        for run_id, messages in conversation.runs:
            if run_id > last:
                break
            turns: list[list[str]] = []
            for message in messages:
                part = message.parts[0]
                assert isinstance(part, UserPromptPart | TextPart)
                assert isinstance(part.content, str)
                turns.append(['user' if isinstance(message, ModelRequest) else 'assistant', part.content])
            runs.append([run_id, turns])
        questions: list[dict[str, object]] = [
            {'text': q.text, 'asked': list(q.asked), 'evidence': list(q.evidence)} for q in conversation.questions
        ]
        size = sum(len(turns) for _, turns in runs)  # pyright: ignore[reportUnknownArgumentType]
        cut.append((size, conversation.conversation_id, runs, questions))
    cut.sort(key=lambda item: (item[0], item[1]))
    chosen: list[dict[str, object]] = []
    count = 0
    for _, conversation_id, runs, questions in cut:
        if count >= QUESTIONS:
            break
        chosen.append({'conversation_id': conversation_id, 'runs': runs, 'questions': questions})
        count += len(questions)
    source = (
        'chitchat-dataset 0.9.0 (BYU PCC Chit-Chat Challenge corpus), MIT licence; see LICENSE-chitchat. '
        'Made by bench/slice_facts.py from bench/_chitchat_facts.py (development half).'
    )
    OUT.write_text(json.dumps({'source': source, 'conversations': chosen}, ensure_ascii=False, indent=0) + '\n')
    print(f'{OUT}: {len(chosen)} conversations, {count} questions')


if __name__ == '__main__':
    main()
