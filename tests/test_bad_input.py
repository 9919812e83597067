"""Bad input, property-based: arbitrary JSON thrown at every tool of one long-lived server over stdio.

The server is spoken to in raw JSON-RPC lines (a thread reads its stdout), so any JSON can be sent, including what
the SDK's client would refuse to encode (lone surrogates, nesting deeper than its parser allows). After every call:
the server answered in time and is alive; the answer is a result valid against the tool's output schema or an
`isError` naming the problem; a failed call changed nothing; the memory file parses with no skipped line, is exactly
what our encoder writes for it, and matches what `read_graph` returns.

The number of generated calls tried is printed on the terminal at the end of the module.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import server_env
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from memory_server.graph import Entity, KnowledgeGraph, decode_line, encode_entity, encode_relation

ANSWER_TIMEOUT = 30.0  # seconds: a hang detector; the first search waits for the model, seconds on a loaded machine
MAX_FILE = 200_000  # bytes, and records: past either, the graph is emptied through the tools to keep calls fast
MAX_RECORDS = 300
MUTATING = {
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
}
TRIED: Counter[str] = Counter()  # outcome of each generated tool call -> count, over the whole module
EXAMPLES: Counter[str] = Counter()  # test -> generated examples run
HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


# ---- a raw JSON-RPC client -------------------------------------------------------------------------------------


class RawServer:
    """One `python -m memory_server` process, fed JSON-RPC lines on stdin, its stdout read by a thread."""

    def __init__(self, folder: Path, *args: str) -> None:
        (folder / "memory").mkdir(parents=True, exist_ok=True)
        self.memory = folder / "memory" / "memory.jsonl"
        self.log = folder / "stderr.log"  # not beside the memory file, where the server may watch for changes
        users = {name: folder / name.lower() for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")}
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "memory_server", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                # No result budget: the file is checked against read_graph's whole answer, huge texts included.
                env=server_env(MEMORY_FILE_PATH=self.memory, MEMORY_MAX_RESULT_TOKENS="0", **users),
            )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.last_id = 0
        self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        self.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        self.tools = {tool["name"]: tool for tool in self.request("tools/list", {})["result"]["tools"]}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode("utf-8") + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: Any, raw_params: str | None = None) -> dict[str, Any]:
        """Send a request (params as JSON, or as raw JSON text) and wait for the answer with its id."""
        self.last_id += 1
        params_text = raw_params if raw_params is not None else json.dumps(params)
        self.send(f'{{"jsonrpc":"2.0","id":{self.last_id},"method":{json.dumps(method)},"params":{params_text}}}')
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise AssertionError(
                    f"no answer to request {self.last_id} ({method}) within {ANSWER_TIMEOUT:g} s: "
                    f"{params_text[:300]}\n{self.stderr_tail()}"
                ) from None
            if line is None:
                raise AssertionError(f"the server exited with {self.process.wait()}:\n{self.stderr_tail()}")
            message = json.loads(line)
            if message.get("id") == self.last_id:
                return message

    def call_tool(self, name: str, arguments: Any, raw_arguments: str | None = None) -> dict[str, Any]:
        raw = None if raw_arguments is None else f'{{"name":{json.dumps(name)},"arguments":{raw_arguments}}}'
        return self.request("tools/call", {"name": name, "arguments": arguments}, raw_params=raw)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stderr_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(5)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawServer]:
    """The long-lived server most properties talk to."""
    raw = RawServer(tmp_path_factory.mktemp("bad-input"))
    yield raw
    raw.close()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RawServer]:
    """A server for one test (all of its examples), for inputs that may leave a server unusable."""
    raw = RawServer(tmp_path / "own")
    yield raw
    raw.close()


@pytest.fixture(scope="module", autouse=True)
def show_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of the module, show on the terminal how many generated inputs were tried."""
    yield
    outcomes = ", ".join(f"{count} {outcome}" for outcome, count in sorted(TRIED.items()))
    examples = ", ".join(f"{test} {count}" for test, count in sorted(EXAMPLES.items()))
    line = f"{sum(TRIED.values())} generated tool calls tried ({outcomes}); examples per test: {examples}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\n[bad input] {line}")


# ---- what every answer must satisfy ----------------------------------------------------------------------------


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result.get("content", []))


def file_bytes(memory: Path) -> bytes:
    return memory.read_bytes() if memory.exists() else b""


def assert_names_the_problem(server: RawServer, tool: str, text: str) -> None:
    assert text.strip() and "Traceback" not in text, text
    fields = server.tools[tool]["inputSchema"].get("properties", {})
    if text.startswith("Invalid arguments for"):  # one line per argument at fault, e.g. "- entities[0].name: ..."
        assert any(f"\n- {field}" in text for field in fields), text
    elif "nested too deeply" in text:  # too deep for any JSON parser: our transport names the argument
        assert any(f"argument '{field}'" in text for field in fields), text
    else:
        assert any(phrase in text for phrase in ("Entity with name", "Unknown context", "Could not lock")), text


def assert_file_round_trips(server: RawServer) -> None:
    """The file parses completely, re-encodes to itself line by line, and is what read_graph shows."""
    data = file_bytes(server.memory)
    text = data.decode("utf-8")  # strict: we never write bytes that are not UTF-8
    lines = text.split("\n")
    assert lines.pop() == ""  # every line ends with a newline (and an empty file is "")
    graph = KnowledgeGraph.parse(text)
    assert graph.skipped_lines() == []
    assert list(graph.lines()) == lines  # no name or relation stored twice (parse would merge them)
    assert [reencode(line) for line in lines] == lines
    shown = server.call_tool("read_graph", {})["result"]["structuredContent"]
    assert shown["entities"] == [e.to_dict() for e in graph.entity_list()]
    assert shown["relations"] == [r.to_dict() for r in graph.relations.values()]


def reencode(line: str) -> str:
    record = decode_line(line)
    return encode_entity(record) if isinstance(record, Entity) else encode_relation(record)


def check_call(server: RawServer, tool: str, arguments: Any, raw_arguments: str | None = None) -> None:
    before = file_bytes(server.memory)
    answer = server.call_tool(tool, arguments, raw_arguments)
    assert server.alive()
    if "error" in answer:  # the protocol itself refused the call: only for arguments that are not an object
        assert not isinstance(arguments, dict) and raw_arguments is None, answer
        assert answer["error"]["message"], answer
        TRIED["protocol errors"] += 1
    elif answer["result"].get("isError"):
        assert_names_the_problem(server, tool, text_of(answer["result"]))
        assert file_bytes(server.memory) == before, "a failed call changed the file"
        TRIED["isError results"] += 1
    else:
        result = answer["result"]
        assert text_of(result)
        schema = server.tools[tool].get("outputSchema")
        if schema is not None:
            jsonschema.validate(result["structuredContent"], schema)
        if tool not in MUTATING:
            assert file_bytes(server.memory) == before, "a reading tool changed the file"
        TRIED["valid results"] += 1
    assert_file_round_trips(server)
    shrink_if_large(server)


def shrink_if_large(server: RawServer) -> None:
    data = file_bytes(server.memory)
    if len(data) > MAX_FILE or data.count(b"\n") > MAX_RECORDS:
        names = [e["name"] for e in server.call_tool("read_graph", {})["result"]["structuredContent"]["entities"]]
        assert not server.call_tool("delete_entities", {"entityNames": names})["result"].get("isError")


# ---- strategies ------------------------------------------------------------------------------------------------

POOL = ["a", "b", "Ann", "ß", "名字", "x\x00y", "  padded  ", "\u2028", "e\u0301", "😀", "\ufeff", '{"type":"x"}']

pool_names = st.sampled_from(POOL)
control_text = st.text(st.characters(categories=["Cc", "Cf", "Zl", "Zp", "Zs"]), min_size=1, max_size=20)
huge_text = st.builds(lambda piece, n: (piece * n)[:n], st.text(min_size=1, max_size=4), st.integers(10_000, 100_000))
strings = st.one_of(pool_names, pool_names, st.text(max_size=30), control_text, st.just(""), huge_text)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)
json_values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


def nest(leaf: Any, depth: int, as_list: bool) -> Any:
    for _ in range(depth):
        leaf = [leaf] if as_list else {"k": leaf}
    return leaf


# Within what the SDK's JSON parser accepts (about 200 levels, the whole message included); deeper is its own test.
deep = st.builds(nest, scalars, st.integers(10, 100), st.booleans())
anything = st.one_of(json_values, deep)


@st.composite
def maybe(draw: st.DrawFn, strategy: st.SearchStrategy[Any]) -> Any:
    """Usually a value of the right shape; one time in eight, any JSON at all."""
    return draw(anything) if draw(st.integers(0, 7)) == 0 else draw(strategy)


@st.composite
def obj(
    draw: st.DrawFn,
    fields: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
) -> dict[str, Any]:
    """An object with its fields, each sometimes missing or of the wrong type, sometimes with extra keys."""
    result = {key: draw(maybe(value)) for key, value in fields.items() if draw(st.integers(0, 9))}
    for key, value in (optional or {}).items():
        if draw(st.integers(0, 9)) == 0:
            result[key] = draw(maybe(value))
    if draw(st.integers(0, 9)) == 0:
        result.update(draw(st.dictionaries(st.text(max_size=10), anything, max_size=3)))
    return result


def items(item: st.SearchStrategy[Any], bulk: Callable[[str, int], Any]) -> st.SearchStrategy[list[Any]]:
    """A short list of items, or thousands of them."""
    thousands = st.builds(lambda tag, n: [bulk(tag, i) for i in range(n)], pool_names, st.integers(1000, 3000))
    return st.one_of(st.lists(maybe(item), max_size=4), st.lists(maybe(item), max_size=4), thousands)


def names_list() -> st.SearchStrategy[list[Any]]:
    return items(strings, lambda tag, i: f"{tag} {i}")


ENTITY = obj({"name": strings, "entityType": strings, "observations": names_list()})
RELATION = obj({"from": strings, "to": strings, "relationType": strings})
SCOPE = {"context": st.one_of(st.just("default"), strings), "projectDir": strings}

SHAPES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "create_entities": obj(
        {"entities": items(ENTITY, lambda tag, i: {"name": f"{tag} {i}", "entityType": "t", "observations": [tag]})},
        SCOPE,
    ),
    "create_relations": obj(
        {"relations": items(RELATION, lambda tag, i: {"from": tag, "to": POOL[i % 3], "relationType": f"r{i}"})},
        SCOPE,
    ),
    "add_observations": obj(
        {
            "observations": items(
                obj({"entityName": strings, "contents": names_list()}),
                lambda tag, i: {"entityName": tag, "contents": [str(i)]},
            )
        },
        SCOPE,
    ),
    "delete_entities": obj({"entityNames": names_list()}, SCOPE),
    "delete_observations": obj(
        {
            "deletions": items(
                obj({"entityName": strings, "observations": names_list()}),
                lambda tag, i: {"entityName": tag, "observations": [str(i)]},
            )
        },
        SCOPE,
    ),
    "delete_relations": obj(
        {"relations": items(RELATION, lambda tag, i: {"from": tag, "to": POOL[i % 3], "relationType": f"r{i}"})},
        SCOPE,
    ),
    "read_graph": obj({}, SCOPE),
    "search_nodes": obj({"query": strings}, SCOPE),
    "open_nodes": obj({"names": names_list()}, SCOPE),
    "list_contexts": obj({}, {"projectDir": strings}),
    "get_active_context": obj({}, {"projectDir": strings}),
    "set_active_context": obj({"name": st.one_of(st.just("default"), strings), "persist": st.booleans()}),
}
# add_context and remove_context are left out here: a context they register could send later calls to a file anywhere
# on disk. They get a test, and a server, of their own.


@st.composite
def tool_calls(draw: st.DrawFn, shapes: dict[str, st.SearchStrategy[dict[str, Any]]] = SHAPES) -> tuple[str, Any]:
    tool = draw(st.sampled_from(sorted(shapes)))
    kind = draw(st.integers(0, 19))
    if kind == 0:  # not an object at all
        return tool, draw(st.one_of(scalars, st.lists(scalars, max_size=3)))
    if kind == 1:  # an object of anything
        return tool, draw(st.dictionaries(st.text(max_size=12), anything, max_size=4))
    return tool, draw(shapes[tool])


# ---- the properties --------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=HEALTH)
@given(calls=st.lists(tool_calls(), min_size=1, max_size=4))
def test_any_json_at_any_tool_is_answered_and_keeps_the_file_exact(server, calls):
    EXAMPLES["any_json_at_any_tool"] += 1
    for tool, arguments in calls:
        check_call(server, tool, arguments)


@settings(max_examples=40, deadline=None, suppress_health_check=HEALTH)
@given(
    name=st.one_of(strings, st.sampled_from(["ok", "x.jsonl", "/", "~"])),
    path=st.one_of(strings, st.sampled_from(["{projectDir}/x.jsonl", "{projectDir}", "x.json", "/dev/null", ""])),
    extra=st.dictionaries(
        st.sampled_from(["description", "markers", "maxDepth", "readOnly", "zzz"]), anything, max_size=3
    ),
)
def test_context_admin_tools_answer_any_json(own_server, name, path, extra):
    """On a server of its own, so the contexts it registers never serve the calls of the other tests."""
    EXAMPLES["context_admin_tools"] += 1
    server = own_server
    folder = server.memory.parent
    if isinstance(path, str) and path.endswith(".jsonl") and not path.startswith("{projectDir}"):
        path = str(folder / "contexts" / Path(path).name)
    for tool, arguments in (("add_context", {"name": name, "path": path, **extra}), ("remove_context", {"name": name})):
        answer = server.call_tool(tool, arguments)
        assert server.alive()
        result = answer["result"]
        if result.get("isError"):
            assert text_of(result).strip() and "Traceback" not in text_of(result)
        TRIED[f"{tool} calls"] += 1
    assert_file_round_trips(server)


# ---- inputs the SDK's transport cannot take --------------------------------------------------------------------

lone_surrogate = st.characters(categories=["Cs"])
with_surrogate = st.builds(lambda a, s, b: a + s + b, st.text(max_size=5), lone_surrogate, st.text(max_size=5))


@settings(max_examples=15, deadline=None, suppress_health_check=HEALTH, phases=[Phase.explicit, Phase.generate])
@given(tool=st.sampled_from(sorted(SHAPES)), text=with_surrogate)
def test_lone_surrogates_are_answered(own_server, tool, text):
    """JavaScript clients send a lone surrogate as a \\udXXX escape (JSON.stringify does): valid JSON that must be
    answered, with a result or a clear error, like any other string."""
    EXAMPLES["lone_surrogates"] += 1
    arguments = {
        "entities": [{"name": text, "entityType": text, "observations": [text]}],
        "relations": [{"from": text, "to": text, "relationType": text}],
        "observations": [{"entityName": text, "contents": [text]}],
        "entityNames": [text],
        "deletions": [{"entityName": text, "observations": [text]}],
        "query": text,
        "names": [text],
        "name": text,
    }
    fields = set(own_server.tools[tool]["inputSchema"].get("properties", {}))
    check_call(own_server, tool, {k: v for k, v in arguments.items() if k in fields})  # json.dumps escapes them


@settings(max_examples=10, deadline=None, suppress_health_check=HEALTH, phases=[Phase.explicit, Phase.generate])
@given(tool=st.sampled_from(sorted(SHAPES)), depth=st.integers(150, 20_000), as_list=st.booleans())
def test_deep_nesting_is_answered(own_server, tool, depth, as_list):
    """Arguments nested thousands deep (the JSON text is built directly: Python's encoder would recurse too far)."""
    EXAMPLES["deep_nesting"] += 1
    opening, closing = ("[", "]") if as_list else ('{"k":', "}")
    fields = list(own_server.tools[tool]["inputSchema"].get("properties", {})) or ["extra"]
    raw = f'{{"{fields[0]}":{opening * depth}1{closing * depth}}}'
    check_call(own_server, tool, {}, raw_arguments=raw)


def test_a_file_with_an_escaped_lone_surrogate_is_served(own_server):
    """Upstream's JSON.stringify, and our own encoder, write a lone surrogate as a \\udXXX escape: valid JSON that
    loads as a string the SDK cannot encode in a result. Reading such a file must not take the server down."""
    own_server.memory.write_text(
        '{"type":"entity","name":"half \\ud83d","entityType":"t","observations":["x\\udc00"]}\n'
        '{"type":"entity","name":"b","entityType":"t","observations":[]}\n'
    )
    before = own_server.memory.read_bytes()
    for tool, arguments in (("read_graph", {}), ("search_nodes", {"query": "half"}), ("open_nodes", {"names": ["b"]})):
        answer = own_server.call_tool(tool, arguments)
        assert own_server.alive()
        assert "result" in answer, answer
    assert own_server.memory.read_bytes() == before


INVISIBLE = ["\u200b", "\u200b\u200c\u200d", "\ufeff", "\u2060\u00ad", "\u202e\u200f", "\u3164", "\u2800", " \u200b\t"]


def test_names_made_only_of_invisible_characters_are_refused(own_server):
    """A zero-width space, a BOM, a bidi mark or a Hangul filler shows as nothing: such a name is as blank as ''."""
    before = file_bytes(own_server.memory)
    for name in INVISIBLE:
        for tool, arguments in (
            ("create_entities", {"entities": [{"name": name, "entityType": "t", "observations": []}]}),
            ("create_entities", {"entities": [{"name": "visible", "entityType": name, "observations": []}]}),
            ("create_relations", {"relations": [{"from": "a", "to": name, "relationType": "knows"}]}),
            ("add_observations", {"observations": [{"entityName": name, "contents": ["x"]}]}),
        ):
            text = text_of(own_server.call_tool(tool, arguments)["result"])
            assert text.startswith(f"Invalid arguments for {tool}") and "invisible characters" in text, (name, text)
    assert file_bytes(own_server.memory) == before
    created = own_server.call_tool(
        "create_entities", {"entities": [{"name": "a\u200bb", "entityType": "t", "observations": []}]}
    )
    assert not created["result"].get("isError")  # an invisible character inside a real name is the user's business
