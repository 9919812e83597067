"""Our stdio transport answers every request, including those the SDK's own transport dropped."""

import json

from memory_server.stdio import parse_message


def request(method: str, params_text: str, request_id: int | str = 7) -> str:
    return f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"method":"{method}","params":{params_text}}}'


def test_a_valid_request_passes_through_with_its_lone_surrogate():
    message, answer = parse_message(request("tools/call", '{"name":"search_nodes","arguments":{"query":"a\\ud800"}}'))
    assert answer is None
    assert message.params["arguments"]["query"] == "a\ud800"


def test_unparsable_json_gets_a_parse_error():
    message, answer = parse_message("{not json")
    assert message is None
    assert answer["id"] is None and answer["error"]["code"] == -32700


def test_a_tool_call_nested_too_deeply_gets_an_error_result_naming_the_argument():
    deep = "[" * 5000 + "]" * 5000
    message, answer = parse_message(
        request("tools/call", f'{{"name":"create_entities","arguments":{{"entities":{deep}}}}}')
    )
    assert message is None and answer["id"] == 7
    assert answer["result"]["isError"]
    assert "argument 'entities' is nested too deeply" in answer["result"]["content"][0]["text"]


def test_an_invalid_request_is_answered_with_its_id_and_a_notification_is_not():
    _, answer = parse_message('{"jsonrpc":"2.0","id":"x","method":42}')
    assert answer["id"] == "x" and answer["error"]["code"] == -32600 and "method" in answer["error"]["message"]
    assert parse_message('{"jsonrpc":"2.0","method":"notifications/initialized","params":3}') == (None, None)
