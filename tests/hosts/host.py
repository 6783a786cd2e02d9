"""An MCP host for the tests of `troupe mcp serve`, on the official Python
SDK (`mcp` from PyPI, installed by .ci/mcp-up).

    host.py SCENARIO stdio COMMAND [ARGS...]
    host.py SCENARIO http URL TOKEN

It plays one scenario against the server, as a main agent would, and
prints one JSON object on stdout: what the server answered (results,
progress, notices, errors). The Rust tests assert on it and on the files
the agents left; this script asserts nothing itself.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

# resources/subscribe is 2025-era, which is what troupe serves.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


class Host:
    def __init__(self) -> None:
        self.logs: list[Any] = []
        self.updated: list[str] = []

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(message.params.uri)


def transport(kind: str, target: list[str]):
    if kind == "stdio":
        return StdioServerParameters(command=target[0], args=target[1:], env=dict(os.environ))
    url, token = target
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})

    @asynccontextmanager
    async def over_http():
        async with http:
            async with streamable_http_client(url, http_client=http) as streams:
                yield streams

    return over_http()


def result(r: types.CallToolResult) -> dict:
    text = "\n".join(c.text for c in r.content if isinstance(c, types.TextContent))
    return {"is_error": bool(r.is_error), "structured": r.structured_content, "text": text}


async def call(client: Client, name: str, arguments: dict, **kw) -> dict:
    return result(await client.call_tool(name, arguments, **kw))


async def listing(client: Client, host: Host) -> dict:
    tools = (await client.list_tools()).tools
    return {
        "tools": [
            {"name": t.name, "input_schema": t.input_schema, "read_only": bool(t.annotations and t.annotations.read_only_hint)}
            for t in tools
        ]
    }


async def blocking(client: Client, host: Host) -> dict:
    progress: list[dict] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": done, "message": message})

    created = await call(
        client,
        "create_sub_agent",
        {"agent_id": 1, "summary": "write a greeting", "task": "write greeting.txt"},
        progress_callback=on_progress,
    )
    return {"created": created, "progress": progress}


async def background(client: Client, host: Host) -> dict:
    started = []
    for n in (1, 2, 3):
        started.append(
            await call(
                client,
                "create_sub_agent",
                {"summary": f"background task {n}", "task": "write a file", "run_in_background": True},
            )
        )
    waits = []
    for _ in range(20):
        waited = await call(client, "wait_sub_agents", {"mode": "any", "timeout_seconds": 30})
        waits.append(waited)
        if not waited["structured"]["running"]:
            break
    # The notices come as messages; a later tool result carries those not
    # yet carried, so one more call after a short pause collects any left.
    with anyio.move_on_after(5):
        while len(host.logs) < 3:
            await anyio.sleep(0.1)
    status = await call(client, "get_sub_agent_status", {})
    return {"started": started, "waits": waits, "logs": host.logs, "status": status}


async def notices(client: Client, host: Host) -> dict:
    started = await call(
        client,
        "create_sub_agent",
        {"summary": "noticed later", "task": "write a file", "run_in_background": True},
    )
    with anyio.move_on_after(60):
        while not host.logs:
            await anyio.sleep(0.1)
    later = await call(client, "get_sub_agent_status", {"agent_ids": [started["structured"]["agent_id"]]})
    again = await call(client, "get_sub_agent_status", {})
    return {"started": started, "logs": host.logs, "later": later, "again": again}


async def terminate(client: Client, host: Host) -> dict:
    started = await call(
        client,
        "create_sub_agent",
        {"agent_id": 1, "summary": "a long task", "task": "write part.txt, then think", "run_in_background": True},
    )
    with anyio.move_on_after(60):
        while True:
            status = await call(client, "get_sub_agent_status", {"agent_ids": [1]})
            if "turn 2" in status["structured"]["agents"][0]["last_action"]:
                break
            await anyio.sleep(0.2)
    stopped = await call(client, "terminate_sub_agent", {"agent_id": 1})
    status = await call(client, "get_sub_agent_status", {"agent_ids": [1]})
    return {"started": started, "stopped": stopped, "status": status}


async def cancel(client: Client, host: Host) -> dict:
    scope = anyio.CancelScope()
    progress: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")
        if message and message.startswith("write_file"):
            scope.cancel()

    with scope:
        await client.call_tool(
            "create_sub_agent",
            {"agent_id": 1, "summary": "cancelled", "task": "write part.txt, then think"},
            progress_callback=on_progress,
        )
    final = None
    with anyio.move_on_after(60):
        while True:
            status = await call(client, "get_sub_agent_status", {"agent_ids": [1]})
            final = status["structured"]["agents"][0]
            if final["status"] != "running":
                break
            await anyio.sleep(0.2)
    after = await call(client, "get_sub_agent_status", {})
    return {"progress": progress, "final": final, "still_answers": not after["is_error"]}


async def team(client: Client, host: Host) -> dict:
    plan = {
        "summary": "two greetings",
        "steps": [
            {"id": "hello", "description": "write hello.txt", "dependencies": []},
            {"id": "world", "description": "write world.txt", "dependencies": ["hello"]},
        ],
    }
    planned = await call(client, "run_team", {"plan": plan})
    goal = await call(client, "run_team", {"goal": "write two greetings", "isolation": "worktree"})
    status = await call(client, "get_run_status", {"run_id": "last"})
    background = await call(client, "run_team", {"plan": plan, "run_in_background": True})
    record = f"troupe://runs/{background['structured']['run_id']}/run"
    await client.subscribe_resource(record)
    with anyio.move_on_after(60):
        while not host.logs or not host.updated:
            await anyio.sleep(0.1)
    followed = await call(client, "get_run_status", {"run_id": background["structured"]["run_id"]})
    return {
        "planned": planned,
        "goal": goal,
        "status": status,
        "background": background,
        "logs": host.logs,
        "updated": host.updated,
        "followed": followed,
    }


async def resources(client: Client, host: Host) -> dict:
    first = await call(client, "create_sub_agent", {"agent_id": 1, "summary": "first", "task": "write a file"})
    listed = [r.uri for r in (await client.list_resources()).resources]
    templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
    read = await client.read_resource("troupe://agents/1/conversation")
    conversation = json.loads(read.contents[0].text)
    second = await call(
        client,
        "create_sub_agent",
        {"agent_id": 2, "summary": "second", "task": "write a file", "run_in_background": True},
    )
    await client.subscribe_resource("troupe://agents/2/conversation")
    with anyio.move_on_after(60):
        while not host.updated:
            await anyio.sleep(0.1)
    missing = None
    try:
        await client.read_resource("troupe://agents/../../etc/passwd")
    except Exception as e:  # the SDK raises the server's error
        missing = str(e)
    return {
        "first": first,
        "listed": listed,
        "templates": templates,
        "conversation_agent": conversation.get("agent_id"),
        "messages": len(conversation.get("messages", [])),
        "second": second,
        "updated": host.updated,
        "escape": missing,
    }


async def crowd(client: Client, host: Host) -> dict:
    answers = []

    async def one(n: int) -> None:
        answers.append(
            await call(
                client,
                "create_sub_agent",
                {"agent_id": n, "summary": f"crowd {n}", "task": "think a while", "run_in_background": True},
            )
        )

    async with anyio.create_task_group() as group:
        for n in range(1, 21):
            group.start_soon(one, n)
    return {"answers": answers}


async def bad_input(client: Client, host: Host) -> dict:
    out: dict[str, Any] = {}
    try:
        await client.call_tool("no_such_tool", {})
        out["unknown_tool"] = "answered"
    except Exception as e:
        out["unknown_tool"] = str(e)
    cases = {
        "missing_task": ("create_sub_agent", {"summary": "s"}),
        "mistyped_id": ("create_sub_agent", {"agent_id": "one", "summary": "s", "task": "t"}),
        "unknown_field": ("create_sub_agent", {"summary": "s", "task": "t", "colour": "red"}),
        "timeout_low": ("create_sub_agent", {"summary": "s", "task": "t", "timeout_seconds": 5}),
        "timeout_above_ceiling": ("create_sub_agent", {"summary": "s", "task": "t", "timeout_seconds": 3600}),
        "dotdot": ("create_sub_agent", {"summary": "s", "task": "t", "deliverables_dir": "../out"}),
        "absolute": ("create_sub_agent", {"summary": "s", "task": "t", "deliverables_dir": "/tmp/out"}),
        "link": ("create_sub_agent", {"summary": "s", "task": "t", "deliverables_dir": "outside/docs"}),
        "git": ("create_sub_agent", {"summary": "s", "task": "t", "deliverables_dir": ".git/hooks"}),
        "empty_summary": ("create_sub_agent", {"summary": " ", "task": "t"}),
        "unknown_agent": ("terminate_sub_agent", {"agent_id": 77}),
        "unknown_wait": ("wait_sub_agents", {"agent_ids": [78]}),
        "unknown_run": ("get_run_status", {"run_id": "run_nope"}),
        "escaping_run": ("get_run_status", {"run_id": "../.."}),
        "goal_and_plan": ("run_team", {"goal": "g", "plan": {"summary": "s", "steps": []}}),
        "invalid_plan": ("run_team", {"plan": {"summary": "s", "steps": [{"id": "a", "description": "d", "dependencies": ["b"]}]}}),
        "apply_above_ceiling": ("run_team", {"goal": "g", "apply": True}),
        "isolation_below_ceiling": ("run_team", {"goal": "g", "isolation": "shared"}),
    }
    for key, (tool, arguments) in cases.items():
        out[key] = await call(client, tool, arguments)
    first = await call(client, "create_sub_agent", {"agent_id": 5, "summary": "runs long", "task": "think", "run_in_background": True})
    out["in_use"] = await call(client, "create_sub_agent", {"agent_id": 5, "summary": "again", "task": "t"})
    await call(client, "terminate_sub_agent", {"agent_id": 5})
    out["first"] = first
    out["still_answers"] = await call(client, "get_sub_agent_status", {})
    return out


async def leave(client: Client, host: Host) -> dict:
    """Starts agent 1 in the background and agent 2 blocking, then goes
    away without a word, as a host that crashed."""
    started = await call(
        client,
        "create_sub_agent",
        {"agent_id": 1, "summary": "left running", "task": "write part.txt, then think", "run_in_background": True},
    )

    async def blocking() -> None:
        await client.call_tool(
            "create_sub_agent", {"agent_id": 2, "summary": "left blocking", "task": "write part.txt, then think"}
        )

    async with anyio.create_task_group() as group:
        group.start_soon(blocking)
        # Leaves once agent 2 wrote its file and waits for the model.
        with anyio.move_on_after(60):
            while True:
                status = await call(client, "get_sub_agent_status", {"agent_ids": [2]})
                agents = status["structured"]["agents"]
                if agents and "turn 2" in agents[0]["last_action"]:
                    break
                await anyio.sleep(0.2)
        print(json.dumps({"started": started}), flush=True)
        os._exit(0)
    return {}


async def terminate_blocking(client: Client, host: Host) -> dict:
    """Terminates agent 1 while a blocking call waits on it, and cancels
    that call at the same moment: two ways to stop one agent."""
    scope = anyio.CancelScope()
    out: dict[str, Any] = {}

    async def blocking() -> None:
        with scope:
            await client.call_tool(
                "create_sub_agent", {"agent_id": 1, "summary": "stopped twice", "task": "write part.txt, then think"}
            )

    async def stopping() -> None:
        out["stopped"] = await call(client, "terminate_sub_agent", {"agent_id": 1})

    async with anyio.create_task_group() as group:
        group.start_soon(blocking)
        with anyio.move_on_after(60):
            while True:
                status = await call(client, "get_sub_agent_status", {"agent_ids": [1]})
                agents = status["structured"]["agents"]
                if agents and "turn 2" in agents[0]["last_action"]:
                    break
                await anyio.sleep(0.2)
        group.start_soon(stopping)
        scope.cancel()
    return out


async def hold(client: Client, host: Host) -> dict:
    """Waits on a blocking create of agent 1 until the server is gone."""
    try:
        await client.call_tool(
            "create_sub_agent", {"agent_id": 1, "summary": "held", "task": "write part.txt, then think"}
        )
    except Exception as e:
        return {"ended": str(e)}
    return {"ended": "answered"}


SCENARIOS = {f.__name__: f for f in (hold, terminate_blocking, listing, blocking, background, notices, terminate, cancel, team, resources, crowd, bad_input, leave)}


async def main() -> None:
    scenario, kind, *target = sys.argv[1:]
    host = Host()
    client = Client(
        transport(kind, target),
        read_timeout_seconds=120,
        logging_callback=host.on_log,
        message_handler=host.on_message,
    )
    async with client:
        report = await SCENARIOS[scenario](client, host)
    print(json.dumps(report))


anyio.run(main)
