"""A hosted conversation service on PostgreSQL: two worker processes serve one conversation.

Run with: HANDOFF_BUILDER_POSTGRES_DSN=postgresql://user@host/db python samples/postgres_workers.py
Extras: postgres

Each worker is a separate process with its own ConversationHost on the same database. Both get a
message for the same conversation at the same time: the conversation's lock lets one turn run at
a time (the other waits), and both messages land in the conversation's log, in order, with the
active agent remembered between them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path

from agent_framework import Message

from handoff_builder import ConversationHost, HandoffWorkflowBuilder
from handoff_builder.testing import ModelCall, Step, handoff_to, reply, scripted_agent

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import extra, log_to_stderr, sample_name

with extra("postgres"):
    from handoff_builder.stores import PostgresConversationStore

ROOT = Path(__file__).resolve().parent.parent
DSN_VARIABLE = "HANDOFF_BUILDER_POSTGRES_DSN"


def support_desk() -> HandoffWorkflowBuilder:
    def billing_answers(call: ModelCall) -> Step:
        return reply(f"billing handled: {call.user_text}")

    triage = scripted_agent("triage", respond_with=lambda _: handoff_to("billing", goal="Billing."))
    billing = scripted_agent("billing", respond_with=billing_answers, description="billing")
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing)


async def worker(dsn: str, prefix: str, conversation: str, message: str) -> None:
    store = PostgresConversationStore(dsn, table_prefix=prefix)
    turn = await ConversationHost(support_desk(), store).send(conversation, message, wait=True)
    print(f"[worker {os.getpid()}] {turn.active_agent}: {turn.text}")
    await store.close()


async def main(dsn: str) -> list[str]:
    prefix = f"sample_{uuid.uuid4().hex[:8]}_"
    conversation = "customer-7"
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--worker", dsn, prefix,
            conversation, text, cwd=ROOT,
        )
        for text in ("Why was I charged twice?", "Also, can I get a paper invoice?")
    ]  # fmt: skip
    for process in workers:
        if await asyncio.wait_for(process.wait(), timeout=60) != 0:
            raise RuntimeError(f"worker {process.pid} failed")
    store = PostgresConversationStore(dsn, table_prefix=prefix)
    record = await store.load(conversation)
    await store.drop_tables()
    await store.close()
    if record is None:
        raise RuntimeError("the conversation was not stored")
    texts = [str(m["contents"][0].get("text", "")) for m in record.messages if m["contents"]]
    print(f"stored {len(record.messages)} messages, {record.version} writes:")
    tools: dict[str, str] = {}
    for message in record.messages:
        print(f"  {describe(Message.from_dict(message), tools)}")
    return texts


def describe(message: Message, tools: dict[str, str]) -> str:
    """One stored message in a line: who wrote it, and its text or the tool call it holds.

    ``tools`` maps the call ids seen so far to their tools' names (a result names its call's).
    """
    for content in message.contents:
        if content.type == "function_call" and content.name:
            tools[str(content.call_id)] = content.name
            return f"{message.author_name}: calls {content.name}({content.arguments})"
        if content.type == "function_result":
            return f"tool: {tools.get(str(content.call_id), '?')} returned {content.result!r}"
    return f"{message.author_name or message.role}: {message.text}"


def parse_arguments() -> argparse.Namespace:
    """The command line: nothing of its own but ``--help`` (``--worker`` is how a worker starts)."""
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog=f"Set {DSN_VARIABLE} to the PostgreSQL address to use.",
    )
    parser.add_argument(  # internal: main() starts each worker process with it
        "--worker",
        nargs=4,
        metavar=("DSN", "PREFIX", "CONVERSATION", "MESSAGE"),
        help=argparse.SUPPRESS,
    )
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_arguments()
    log_to_stderr()
    if arguments.worker:
        asyncio.run(worker(*arguments.worker))
    else:
        address = os.environ.get(DSN_VARIABLE)
        if not address:
            sys.exit(f"{sample_name()}: Set {DSN_VARIABLE} to a PostgreSQL address, e.g. "
                     "postgresql://postgres@127.0.0.1:5432/test")  # fmt: skip
        asyncio.run(main(address))
