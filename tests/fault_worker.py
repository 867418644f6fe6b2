"""A worker process for the fault tests: ``python -m tests.fault_worker MODE STORE ID DIR [ARG]``.

The parent test kills (SIGKILL) or freezes (SIGSTOP) these processes at chosen points of a turn.
The scripted models (and, for the point after the turn's final write, the store's writes) write a
marker file in ``DIR`` when they reach the point, then block there, so the parent can act.

Modes:
  crash POINT   send "I was charged twice"; triage hands off to billing, billing answers. POINT
                picks where the process blocks (and is killed): ``triage`` (in triage's model
                call, before it answers), ``billing`` (in billing's, after the handoff),
                ``final`` (just after the store's final write of the turn, before ``send``
                returns). The marker is ``DIR/POINT``.
  resume NEXT   finish the interrupted turn (waiting for the dead worker's lease to expire); with
                NEXT ``thanks``, then send "Thanks"; print a JSON report of who was called.
  freeze        like ``crash billing``, but billing's model call waits for ``DIR/thaw`` (the
                parent freezes this process meanwhile) and then answers; the turn's late write
                must be refused: print the error as JSON and exit with status 3.
  meet OTHER    send one message without waiting; triage's model call writes ``DIR/<ID>`` and
                waits for ``DIR/<OTHER>``, so both workers' turns run at the same time.
  many NAME:N   write ``DIR/ready-NAME``, wait for ``DIR/go``, then send N messages with
                ``wait=True``; triage answers each; print the answers, and how many times the
                store refused this worker the lease (the other one held it).
  delegate-crash  send "I was charged twice"; triage asks the policy expert (ask_policy) and
                the expert's model call blocks (marker ``DIR/expert``): the parent kills it there.
  delegate-resume  finish the interrupted turn as a fresh worker; print who was called and the
                turn's delegations as JSON.
  open          (STORE is ignored) for each path to an SQLite file read from stdin: make a store
                on it, print ``{"ready": PATH}``, and at the next line ("go") send one message to
                conversation ID; print the answer (or the error) as a JSON line. The parent says
                "go" to several such workers at once: they open the same new file together.

STORE is ``sqlite:PATH`` or ``postgres:PREFIX`` (the DSN comes from the environment variable the
tests use). ``FAULT_WORKER_LEASE_TTL`` sets the host's lease ttl, in seconds. A model call that
waits gives up after ``_PATIENCE`` seconds (the parent failed), so no worker outlives a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, cast

from agent_framework import Agent

from handoff_builder import (
    ConversationBusyError,
    ConversationHost,
    HandoffBuilderError,
    HandoffWorkflowBuilder,
    LeaseLostError,
)
from handoff_builder.stores import (
    ConversationStore,
    PostgresConversationStore,
    SqliteConversationStore,
)
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    handoff_to,
    reply,
    scripted_agent,
)

GOAL = "Refund the double charge."
FIRST = "I was charged twice"
REFUNDED = "Refund issued."
THANKS = "Thanks"
WELCOME = "You're welcome."
LATE = "Late reply from the frozen worker."
REFUSED = 3  # exit status of a worker whose write was refused (lease lost, or busy)
_PATIENCE = 60.0


def open_store(spec: str) -> ConversationStore:
    kind, _, value = spec.partition(":")
    if kind == "sqlite":
        return SqliteConversationStore(value)
    dsn = os.environ["HANDOFF_BUILDER_POSTGRES_DSN"]
    return PostgresConversationStore(dsn, table_prefix=value)


def hang_after_final_write(store: ConversationStore, marker: Path) -> None:
    """Make ``store`` block just after it stored the write that closes a turn.

    Every writing method is wrapped (whatever its parameters): once the write is stored and its
    state row says no turn is open, the marker is written and the process blocks (the parent
    kills it there: the reply is stored, but ``send`` never returns).
    """
    for name in ("append", "acquire_and_append"):
        real = getattr(store, name, None)
        if real is not None:
            setattr(store, name, _blocking_after(real, marker))


def _blocking_after(
    real: Callable[..., Awaitable[Any]], marker: Path
) -> Callable[..., Awaitable[Any]]:
    async def write(*args: Any, **kwargs: Any) -> Any:
        written = await real(*args, **kwargs)
        host = cast(Mapping[str, Any], kwargs.get("state", {})).get("host")
        if isinstance(host, Mapping) and cast(Mapping[str, Any], host).get("turn", 0) is None:
            block_at(marker)
        return written

    return write


def count_busy_answers(store: ConversationStore) -> list[int]:
    """Count the times ``store`` refused a lease (another worker held it): ``[count]``."""
    busy = [0]
    for name in ("acquire", "acquire_and_append"):
        real = getattr(store, name, None)
        if real is not None:
            setattr(store, name, _counting_none(real, busy))
    return busy


def _counting_none(real: Callable[..., Awaitable[Any]], busy: list[int]) -> Callable[..., Any]:
    async def take(*args: Any, **kwargs: Any) -> Any:
        lease = await real(*args, **kwargs)
        busy[0] += lease is None
        return lease

    return take


def host_for(triage: Agent, billing: Agent, store: ConversationStore) -> ConversationHost:
    ttl = float(os.environ.get("FAULT_WORKER_LEASE_TTL", "1"))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    return ConversationHost(builder, store, lease_ttl=ttl)


def block_at(marker: Path) -> None:
    """Write ``marker``, then block the whole process (like a hung call): the parent kills it."""
    marker.write_text("reached", encoding="utf-8")
    time.sleep(_PATIENCE)


def wait_for_file(path: Path, patience: float = _PATIENCE) -> bool:
    """Block (the whole process, like a slow model call) until ``path`` exists."""
    deadline = time.monotonic() + patience
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def hang_at(marker: Path, step: Step) -> Any:
    """A model step that writes ``marker`` and blocks; it answers ``step`` only if never killed."""

    def hang(call: ModelCall) -> Step:
        del call
        block_at(marker)
        return step

    return hang


def report(**fields: Any) -> None:
    print(json.dumps(fields))  # noqa: T201


def calls_of(agent: Agent) -> list[list[str]]:
    return [call.texts for call in client_of(agent).calls]


async def crash(store: ConversationStore, conversation_id: str, where: Path, point: str) -> None:
    marker = where / point
    handoff = handoff_to("billing", goal=GOAL)
    refunded = reply(REFUNDED)
    triage = scripted_agent("triage", hang_at(marker, handoff) if point == "triage" else handoff)
    billing = scripted_agent(
        "billing", hang_at(marker, refunded) if point == "billing" else refunded
    )
    if point == "final":
        hang_after_final_write(store, marker)
    await host_for(triage, billing, store).send(conversation_id, FIRST)
    report(finished=True)  # reached only if the parent failed to kill this process


POLICY_TASK = "Is a double charge refunded in full?"
POLICY_ANSWER = "Double charges are refunded in full within 5 days."
DELEGATED_REPLY = "You will get the duplicate back in full within 5 days."


def delegating_host(triage: Agent, policy: Agent, store: ConversationStore) -> ConversationHost:
    ttl = float(os.environ.get("FAULT_WORKER_LEASE_TTL", "1"))
    builder = HandoffWorkflowBuilder(triage).with_delegate(triage, policy, "refund policy")
    return ConversationHost(builder, store, lease_ttl=ttl)


def asks_then_answers(call: ModelCall) -> Step:
    """Triage: ask the expert first; once its answer is in, answer the user."""
    if call.sees(POLICY_ANSWER):
        return reply(DELEGATED_REPLY)
    return call_tool("ask_policy", task=POLICY_TASK)


async def delegate_crash(store: ConversationStore, conversation_id: str, where: Path) -> None:
    triage = scripted_agent("triage", respond_with=asks_then_answers)
    policy = scripted_agent("policy", hang_at(where / "expert", reply(POLICY_ANSWER)))
    await delegating_host(triage, policy, store).send(conversation_id, FIRST)
    report(finished=True)  # reached only if the parent failed to kill this process


async def delegate_resume(store: ConversationStore, conversation_id: str) -> None:
    triage = scripted_agent("triage", respond_with=asks_then_answers)
    policy = scripted_agent("policy", respond_with=lambda call: reply(POLICY_ANSWER))
    resumed = await delegating_host(triage, policy, store).resume(conversation_id, wait=True)
    report(
        resumed=None if resumed is None else resumed.text,
        agent=None if resumed is None else resumed.active_agent,
        delegations=[]
        if resumed is None
        else [[d.expert, d.task, d.result, d.outcome] for d in resumed.delegations],
        triage_calls=calls_of(triage),
        policy_calls=calls_of(policy),
    )


async def resume(store: ConversationStore, conversation_id: str, follow_up: str) -> None:
    """Finish the turn as a fresh worker would, then (optionally) send the next message."""
    triage = scripted_agent("triage", respond_with=lambda call: handoff_to("billing", goal=GOAL))
    billing = scripted_agent(
        "billing",
        respond_with=lambda call: reply(WELCOME if call.user_text == THANKS else REFUNDED),
    )
    host = host_for(triage, billing, store)
    started = time.monotonic()
    resumed = await host.resume(conversation_id, wait=True)
    waited = time.monotonic() - started
    following = await host.send(conversation_id, THANKS) if follow_up == "thanks" else None
    report(
        resumed=None if resumed is None else resumed.text,
        resumed_agent=None if resumed is None else resumed.active_agent,
        waited=waited,
        following=None if following is None else following.text,
        following_agent=None if following is None else following.active_agent,
        triage_calls=calls_of(triage),
        billing_calls=calls_of(billing),
    )


async def freeze(store: ConversationStore, conversation_id: str, where: Path) -> None:
    def frozen(call: ModelCall) -> Step:
        del call
        (where / "billing").write_text("reached", encoding="utf-8")
        wait_for_file(where / "thaw")  # frozen (SIGSTOP) in here; the lease expires meanwhile
        return reply(LATE)

    triage = scripted_agent("triage", handoff_to("billing", goal=GOAL))
    billing = scripted_agent("billing", frozen)
    try:
        result = await host_for(triage, billing, store).send(conversation_id, FIRST)
    except LeaseLostError as error:
        report(error=type(error).__name__, message=str(error), billing_calls=calls_of(billing))
        await store.close()
        sys.exit(REFUSED)
    report(text=result.text)


async def meet(store: ConversationStore, conversation_id: str, where: Path, other: str) -> None:
    def together(call: ModelCall) -> Step:
        del call
        (where / conversation_id).write_text("in the turn", encoding="utf-8")
        met = wait_for_file(where / other, patience=15)
        return reply(f"{conversation_id} met {other}" if met else f"{conversation_id} alone")

    triage = scripted_agent("triage", together)
    billing = scripted_agent("billing")
    try:
        result = await host_for(triage, billing, store).send(conversation_id, "hello")
    except ConversationBusyError as error:
        report(error=type(error).__name__, message=str(error))
        await store.close()
        sys.exit(REFUSED)
    report(text=result.text)


async def many(store: ConversationStore, conversation_id: str, where: Path, arg: str) -> None:
    name, _, count = arg.partition(":")
    triage = scripted_agent("triage", respond_with=lambda call: reply(f"re: {call.user_text}"))
    billing = scripted_agent("billing")
    host = host_for(triage, billing, store)
    busy = count_busy_answers(store)
    (where / f"ready-{name}").write_text("ready", encoding="utf-8")
    wait_for_file(where / "go")
    answers: list[str] = []
    for number in range(int(count)):
        result = await host.send(conversation_id, f"{name} {number}", wait=True)
        answers.append(result.text)
        await asyncio.sleep(random.uniform(0, 0.01))  # noqa: S311 - a client's pace, not crypto
    report(answers=answers, triage_calls=len(client_of(triage).calls), busy=busy[0])


async def open_new_files(conversation_id: str) -> None:
    """Per path read: make a store and a host on it, say ``ready``, and send at the next line."""
    triage = scripted_agent("triage", respond_with=lambda call: reply("hello"))
    billing = scripted_agent("billing")
    while path := (await asyncio.to_thread(sys.stdin.readline)).strip():
        store = SqliteConversationStore(path)
        host = host_for(triage, billing, store)
        report(ready=path)
        sys.stdout.flush()
        await asyncio.to_thread(sys.stdin.readline)  # "go": the other workers read it too
        try:
            result = await host.send(conversation_id, "hi")
            report(text=result.text)
        except HandoffBuilderError as error:
            report(error=type(error).__name__, message=str(error))
        finally:
            await store.close()
        sys.stdout.flush()


async def main(mode: str, spec: str, conversation_id: str, where: str, arg: str = "-") -> None:
    if mode == "open":
        await open_new_files(conversation_id)
        return
    store = open_store(spec)
    folder = Path(where)
    if mode == "crash":
        await crash(store, conversation_id, folder, arg)
    elif mode == "resume":
        await resume(store, conversation_id, arg)
    elif mode == "freeze":
        await freeze(store, conversation_id, folder)
    elif mode == "meet":
        await meet(store, conversation_id, folder, arg)
    elif mode == "many":
        await many(store, conversation_id, folder, arg)
    elif mode == "delegate-crash":
        await delegate_crash(store, conversation_id, folder)
    elif mode == "delegate-resume":
        await delegate_resume(store, conversation_id)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
