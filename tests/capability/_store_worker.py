"""A process that saves turns to one conversation of a shared store, retrying on conflicts.

`python _store_worker.py BACKEND STORE_DIR NAME TURNS ACK_FILE`: each turn loads the
conversation (or starts it), adds a request and a response naming `NAME` and the turn, saves it,
and only then appends `NAME TURN` to `ACK_FILE` (flushed and synced): every line there is a save
the store acknowledged. A `ConversationConflict` (another process saved first) loads again.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from backends import make_log
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from capability import EventLogConversationStore

CONVERSATION = 'shared'


async def main(backend: str, store_dir: str, name: str, turns: int, ack_file: str) -> None:
    log = make_log(backend, Path(store_dir))
    store = EventLogConversationStore(log)
    with open(ack_file, 'a') as acks:
        for turn in range(turns):
            while True:
                conversation = await store.load(CONVERSATION) or Conversation(conversation_id=CONVERSATION)
                conversation.messages.extend(
                    [
                        ModelRequest(parts=[UserPromptPart(f'{name} turn {turn}')]),
                        ModelResponse(parts=[TextPart(f'answer {name} {turn}')]),
                    ]
                )
                try:
                    await store.save(conversation)
                except ConversationConflict:
                    continue
                break
            acks.write(f'{name} {turn}\n')
            acks.flush()
            os.fsync(acks.fileno())
    log.close()


if __name__ == '__main__':
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
