"""Code arguments written as fenced code blocks, failed doctest examples in words, and a change that
brings back failing files asked for again (sampled, not repeated).

A policy with ``code_blocks`` (llama.cpp) is asked for a change's code argument -- a file's content,
a function's source -- as a ```python block after the JSON of the other arguments; the runtime
gets the same JSON Decision as ever. The scripted policy plays the model here with that capability
switched on; the grammar is compiled with the real tokenizer of the 0.5B (its vocabulary only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.models.backends import code_block_end
from agent.models.backends.guidance import value_grammar
from agent.models.backends.scripted import ScriptedPolicy
from agent.contracts.budgets import CODE_MAX_NEW_TOKENS, Budgets
from agent.contracts.decision import Observation
from agent.families.humaneval.generator import generate_packs
from agent.families.humaneval.problems import subset
from agent.models.model_policy import CODE_FENCE, CODE_FENCE_END, code_value
from agent.task.packs import TaskPack
from agent.core.run import run_agent
from agent.prompts.prompting import FAILED_TURN
from agent.coding.test_output import doctest_failures, failure_summary


def block(arguments: dict, code: str) -> str:
    """What the model writes after the action prefix in code-block form."""
    return " " + json.dumps(arguments) + CODE_FENCE + code + CODE_FENCE_END


# -- the format ------------------------------------------------------------------------------------

def test_a_code_block_becomes_the_code_argument_of_the_same_json():
    text = block({"path": "solution.py"}, 'def f(x):\n    return "a\\\\b" + x\n')
    arguments = json.loads(code_value(text, "content"))
    assert arguments == {"path": "solution.py", "content": 'def f(x):\n    return "a\\\\b" + x\n'}
    assert code_block_end(text + "\nSome prose after it") == len(text)


@pytest.mark.parametrize("text", [
    ' {"path": "solution.py", "content": "x = 1\\n"}',          # plain JSON: parsed as it is
    ' {"path": "solution.py"}\n```python\nx = 1\n',              # the block never closed
    ' {"path": "solution.py", "content": "y"}\n```python\nx = 1\n```',  # the field twice
    ' {"path": \n```python\nx = 1\n```',                        # the JSON part broken
])
def test_text_of_another_shape_is_left_to_the_parser(text):
    assert code_value(text, "content") is None


def test_the_grammar_holds_the_other_arguments_then_the_block(tmp_path):
    schema = {"type": "object", "properties": {"path": {"const": "a.py"}, "content": {"type": "string"}},
              "required": ["path", "content"], "additionalProperties": False}
    grammar = value_grammar(schema, " ", "content")
    assert '"content"' not in grammar.splitlines()[1]  # the JSON object no longer holds the code
    assert 'body[stop="```"]' in grammar and json.dumps(CODE_FENCE) in grammar
    headed = {**schema, "properties": {**schema["properties"],
                                        "content": {"type": "string", "pattern": "^def f\\(\\):\\n[\\s\\S]*$"}}}
    assert "/def f\\(\\):\\n[\\s\\S]*/" in value_grammar(headed, " ", "content")  # the block keeps its pattern


def test_the_grammar_compiles_with_the_models_tokenizer():
    llama_cpp = pytest.importorskip("llama_cpp")
    from agent.models.backends.guidance import Guidance

    model = sorted(Path.home().glob(".cache/react-agent-local/models/qwen2.5-coder-0.5b-gguf/*.gguf"))
    assert model, "the 0.5B GGUF is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf downloads it"
    vocab = llama_cpp.Llama(model_path=str(model[0]), vocab_only=True, verbose=False)
    guidance = Guidance(vocab._model.vocab, eos_token=vocab._model.token_eos())
    schema = {"type": "object", "properties": {"path": {"const": "a.py"}, "name": {"const": "f"},
                                               "source": {"type": "string", "pattern": '^def f\\(x\\):\\n    """Doc\\."""\\n[\\s\\S]*$'}},
              "required": ["path", "name", "source"]}
    assert guidance.grammar(schema, " ", "source") is not None
    assert guidance.failures == 0


def test_a_diagnosis_grammar_compiles_for_long_lines_and_long_failed_fixes():
    """A function with one 85-character line, or a failed fix of 100 characters, made a diagnosis
    pattern past what llguidance compiles; the step then ran unconstrained and the 1.5B wrote no JSON
    three times. Lines that long are no longer excluded by the grammar, so it compiles in full."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from agent.models.backends.guidance import Guidance
    from agent.coding.grammars import MAX_EXCLUDED_CHARS, diagnosis_schema

    model = sorted(Path.home().glob(".cache/react-agent-local/models/qwen2.5-coder-0.5b-gguf/*.gguf"))
    assert model, "the 0.5B GGUF is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf downloads it"
    vocab = llama_cpp.Llama(model_path=str(model[0]), vocab_only=True, verbose=False)
    guidance = Guidance(vocab._model.vocab, eos_token=vocab._model.token_eos())
    long_line = "total = sum(x * y for x, y in zip(a, b) if x is not None and y is not None and x > 0)"
    source = f'def f(a, b):\n    """Doc."""\n    {long_line}\n    return total\n'
    biggest = ('def biggest(items):\n    """The largest of items."""\n    best = items[0]\n'
               '    for value in items[1:]:\n        if value < best:\n            best = value\n    return best\n')
    failed = "if value <= best:'. The function's docstring expects a <= operator for comparisons with"
    assert len(long_line) > MAX_EXCLUDED_CHARS and len(failed) > MAX_EXCLUDED_CHARS
    for function, tried in ((source, []), (source, ["total = 0"]), (biggest, ["if value <= best:", failed])):
        diagnosis = diagnosis_schema(function, tried)
        schema = {"type": "object", "properties": {"path": {"const": "a.py"}, "diagnosis": diagnosis},
                  "required": ["path", "diagnosis"], "additionalProperties": False}
        assert guidance.grammar(schema, " ") is not None
        if tried == ["total = 0"]:  # a short failed fix is still excluded, the long line still named
            said = f"The wrong line is `{long_line}`; it must be `total = {{}}`"
            assert not re.fullmatch(diagnosis["pattern"], said.format(0))
            assert re.fullmatch(diagnosis["pattern"], said.format(1))
    # a typographic quote ends no fix: the sampled 1.5B closed fixes with one and went on in prose
    assert not re.fullmatch(diagnosis_schema(biggest)["pattern"],
                            "The wrong line is `if value < best:`; it must be `if value > best\u201d`")
    assert re.fullmatch(diagnosis_schema(biggest)["pattern"], "The wrong line is `if value < best:`; it must be `if value > best:`")
    assert (guidance.failures, guidance.relaxed) == (0, 0)  # each compiled as written, patterns and all


# -- failures in words -----------------------------------------------------------------------------

DOCTEST_OUTPUT = """**********************************************************************
File "tests/examples.txt", line 4, in examples.txt
Failed example:
    sort_numbers('three one five')
Expected:
    'one three five'
Got:
    'fiveonethree'
**********************************************************************
File "tests/examples.txt", line 6, in examples.txt
Failed example:
    pick([1,
          2])
Exception raised:
    Traceback (most recent call last):
      File "<path>", line 11, in pick
        raise NotImplementedError
    NotImplementedError
**********************************************************************
1 items had failures:
   2 of   3 in examples.txt
***Test Failed*** 2 failures.
"""


def test_a_failed_doctest_example_is_said_as_what_the_call_returned():
    assert doctest_failures(DOCTEST_OUTPUT) == [
        "sort_numbers('three one five') returned 'fiveonethree'; the example expects 'one three five'",
        "pick([1, 2]) raised NotImplementedError"]
    run = Observation(id="obs-bash-2", tool="bash", ok=True,
                      result={"command": "python -m doctest tests/examples.txt", "exit_code": 1, "stdout": DOCTEST_OUTPUT})
    assert failure_summary(run).startswith("exit 1: sort_numbers('three one five') returned 'fiveonethree'")


# -- a run ---------------------------------------------------------------------------------------

@pytest.fixture()
def pack(tmp_path) -> TaskPack:
    return TaskPack.load(generate_packs(tmp_path / "packs", 1, 0)[0])


def wrong_and_right(pack: TaskPack) -> tuple[str, str]:
    problem = subset(1, 0)[0]
    assert pack.load_expected()["task_id"] == problem.task_id
    def function(code: str) -> str:  # the function's own definition, as replace_function takes it
        return code[code.index(f"def {problem.entry_point}("):]

    stub = (pack.root / "workspace" / "solution.py").read_text()
    return function(stub.replace("raise NotImplementedError", "return None")), function(problem.reference)


def test_a_greedy_run_asks_again_with_sampling_after_a_change_that_changes_nothing(pack, tmp_path):
    wrong, right = wrong_and_right(pack)
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    change = {"path": "solution.py", "name": pack.load_expected()["entry_point"], "diagnosis": None}
    outputs = [json.dumps({"path": "solution.py"}),
               block(change, wrong), test_run,  # a stub is written before any test run
               block(change, wrong),  # the same body again: refused as no change, asked for again
               block(change, right), test_run,
               json.dumps(f"I implemented {pack.load_expected()['entry_point']} and the examples pass.")]
    policy = ScriptedPolicy(outputs)
    policy.code_blocks = True
    outcome = run_agent(pack, policy, Budgets(), artifact_dir=tmp_path / "run")
    policy.assert_complete()
    assert outcome.result.status == "completed", outcome.result.stop_reason
    writes = [r for r in policy.requests if r.code_field is not None]
    assert [r.code_field for r in writes] == ["source"] * 3
    assert all(r.max_new_tokens == CODE_MAX_NEW_TOKENS for r in writes)
    assert "```python code block" in writes[0].messages[-1]["content"]
    # the second follows a first version in the pack's words the examples failed on: a first version
    # again, in the runtime's words, greedy; the third follows one that would have changed nothing: sampled
    assert [r.temperature for r in writes] == [0.0, 0.0, 1.0]
    assert "would have changed nothing" in writes[2].messages[-1]["content"]
    # a rewrite drawn wider is not shown the earlier (failed) changes, which the model would copy
    shown = "\n".join(m["content"] for m in writes[2].messages)
    assert shown.count(FAILED_TURN) == 2 and '"tool": "replace_function"' not in shown
    decisions = [e["decision"] for e in outcome.events if e["type"] == "decision.valid"]
    assert [d.get("tool") for d in decisions] == ["read_file", "replace_function", "bash", "replace_function",
                                                  "replace_function", "bash", None]
    refused = [e["observation"] for e in outcome.events if e["type"] == "tool.observation" and not e["observation"]["ok"]]
    assert [o["error"]["code"] for o in refused] == ["edit_not_applied"]
    assert decisions[4]["arguments"]["source"] == right.rstrip() + "\n"
    assert outcome.result.metrics.task_success  # the hidden tests pass on the final files


def test_a_stub_is_written_with_a_body_that_is_no_stub_statement(pack, tmp_path):
    import re

    from agent.coding.grammars import def_line_pattern

    stub = (pack.root / "workspace" / "solution.py").read_text()
    stub = stub[stub.index("def "):]
    pattern = re.compile(def_line_pattern(stub, written=True))
    head = stub[:stub.index("raise NotImplementedError")]
    assert pattern.match(head + "return len(set(string.lower()))\n")
    assert pattern.match(head + "seen = set()\n    for c in string.lower():\n        seen.add(c)\n    return len(seen)\n")
    for body in ("raise NotImplementedError\n", "pass\n", "...\n", "raise NotImplementedError()"):
        assert not pattern.match(head + body), body
    assert re.compile(def_line_pattern(stub)).match(stub)  # a function to fix may keep any line
    # the function ends where it does: blank, indented and comment lines only, no statement of the module after it
    body = "return len(set(string.lower()))\n\n# Example usage:\n#print(f('ab'))\n\n"
    for held in (pattern, re.compile(def_line_pattern(stub))):
        assert held.match(head + body)
        assert held.match(head + "if string:\n\treturn 1\n    return 0")
        for after in ("print(count_distinct_characters('ab'))", "assert True", "def helper():", "x = 1"):
            assert not held.match(head + body + after), after


# -- code turns ------------------------------------------------------------------------------------

def test_a_code_turn_asks_for_the_code_in_a_conversation_of_its_own(pack, tmp_path):
    """With ``code_turns`` (llama.cpp) the code argument is a second request: the model as a
    programmer in its own chat format (no system message, no tools), the other arguments chosen
    first; the runtime still gets one JSON Decision."""
    wrong, right = wrong_and_right(pack)
    name = pack.load_expected()["entry_point"]
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    change = json.dumps({"path": "solution.py", "name": name, "diagnosis": None})
    wrong_too = wrong.replace("return None", "return 0")
    outputs = [json.dumps({"path": "solution.py"}),
               change, wrong + CODE_FENCE_END, test_run,
               change, wrong_too + CODE_FENCE_END, test_run,
               change, right + CODE_FENCE_END, test_run,
               json.dumps(f"I implemented {name} and the examples pass.")]
    policy = ScriptedPolicy(outputs)
    policy.code_blocks = policy.code_turns = True
    outcome = run_agent(pack, policy, Budgets(), artifact_dir=tmp_path / "run")
    policy.assert_complete()
    assert outcome.result.status == "completed", outcome.result.stop_reason
    turns = [r for r in policy.requests if r.code_only]
    assert len(turns) == 3 and all(r.aside and r.code_field == "source" for r in turns)
    assert all(len(r.messages) == 1 and r.messages[0]["role"] == "user" for r in turns)
    assert all(r.prefix == "```python\n" and r.value_schema["type"] == "string" for r in turns)
    # the first version in the pack's own words (``code_prompt``); when it fails, a first version
    # again in the runtime's words, greedy; then a rewrite that sees how the examples failed, not
    # the code that failed them (the 1.5B copies it), sampled
    assert turns[0].messages[0]["content"].startswith(pack.task.code_prompt.split("{code}")[0])
    assert pack.task.goal in turns[1].messages[0]["content"] and "The tests fail" not in turns[1].messages[0]["content"]
    assert "The tests fail" in turns[2].messages[0]["content"]
    assert not any(w.strip().splitlines()[-1].strip() in turns[2].messages[0]["content"] for w in (wrong, wrong_too))
    assert [r.temperature for r in turns] == [0.0, 0.0, 1.0]
    arguments = [r for r in policy.requests if r.code_field is None and r.value_schema
                 and "name" in (r.value_schema.get("properties") or {})]
    assert arguments and all("source" not in r.value_schema["properties"] for r in arguments)
    decisions = [e["decision"] for e in outcome.events if e["type"] == "decision.valid"]
    assert [d.get("tool") for d in decisions] == ["read_file"] + ["replace_function", "bash"] * 3 + [None]
    assert decisions[5]["arguments"]["source"] == right.rstrip() + "\n"
    assert outcome.result.metrics.task_success


def test_a_code_turn_grammar_is_the_body_alone_and_compiles_with_the_models_tokenizer():
    schema = {"type": "string", "pattern": '^def f\\(x\\):\\n    """Doc\\."""\\n[\\s\\S]*$'}
    grammar = value_grammar(schema, code_only=True)
    assert grammar.startswith("start: body\n") and "%json" not in grammar
    llama_cpp = pytest.importorskip("llama_cpp")
    from agent.models.backends.guidance import Guidance

    model = sorted(Path.home().glob(".cache/react-agent-local/models/qwen2.5-coder-0.5b-gguf/*.gguf"))
    assert model, "the 0.5B GGUF is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf downloads it"
    vocab = llama_cpp.Llama(model_path=str(model[0]), vocab_only=True, verbose=False)
    guidance = Guidance(vocab._model.vocab, eos_token=vocab._model.token_eos())
    assert guidance.grammar(schema, code_only=True) is not None and guidance.failures == 0
