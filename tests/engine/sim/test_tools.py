def test_tool_call_grammar_forces_calls_to_the_named_tools_only() -> None:
    from engine.sim.requests import parse_generate

    for grammar in (
        "start: tool_call+\ntool_call: call_0\n"
        'call_0: <tool_call> "get_weather" arg_0_0? </tool_call>\n',
        'call_0: "<tool_call>" "get_weather" arg_0_0? "</tool_call>"\n',
    ):
        params = parse_generate(
            {"text": "x", "sampling_params": {"ebnf": grammar, "max_new_tokens": 8}}
        )
        assert params.grammar_tools == ("get_weather",)
    assert parse_generate({"text": "x"}).grammar_tools is None
