"""The README's ``/route`` example is what the service answers: same request, same JSON.

The example is read from the README itself (the first ``curl`` to ``/route`` and the JSON block
after it) and sent to the service on its embedded default params, as ``scripts/serve.sh`` starts
it. When the model or the embedded params change, update the README's answer from this test's
failure message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.app.conftest import LiveServer

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first ``/route`` request body of the README's curl examples, and the answer shown after it."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, flags=re.S)
    for i, (lang, body) in enumerate(blocks):
        if lang == "bash" and "curl" in body and "/route " in body:
            sent = re.search(r"-d '(.*?)'", body, flags=re.S)
            if sent is None or i + 1 == len(blocks) or blocks[i + 1][0] != "json":
                break
            return json.loads(sent.group(1)), json.loads(blocks[i + 1][1])
    raise AssertionError("README.md: no curl to /route followed by its JSON answer")


def test_the_readme_answer_is_the_services(make_server: Callable[..., LiveServer]) -> None:
    request, shown = readme_example(README.read_text())
    server = make_server(watch_params=False)
    with server.client() as client:
        answer = client.post("/route", json=request).json()
    assert shown == answer, "README.md's answer should read:\n" + json.dumps(answer, indent=4)


def test_the_example_reader_finds_the_block_after_the_curl() -> None:
    text = 'x\n```bash\ncurl -X POST h/route -d \'{"a": 1}\'\n```\n\n```json\n{"b": 2}\n```\n'
    assert readme_example(text) == ({"a": 1}, {"b": 2})
