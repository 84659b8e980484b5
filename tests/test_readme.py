"""The README's code is real: every ```python block runs (each in a fresh interpreter, since a
TF1 block switches eager execution off for its process) and, where a ```text block follows it,
prints exactly that."""
import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "README.md")
_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)


def readme_examples():
    """[(python source, expected stdout or None)] in README order."""
    with open(README, encoding="utf-8") as f:
        blocks = [(m.group(1), m.group(2), m.end(), m.start()) for m in _BLOCK.finditer(f.read())]
    out = []
    for i, (lang, body, end, _) in enumerate(blocks):
        if lang != "python":
            continue
        expected = None
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text":
            expected = blocks[i + 1][1]
        out.append((body, expected))
    return out


def test_readme_has_examples_and_two_setup_commands():
    assert len(readme_examples()) >= 2
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert "make demo" in text and "make test" in text


@pytest.mark.parametrize("index", range(len(readme_examples())))
def test_readme_example_runs(index):
    source, expected = readme_examples()[index]
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(README))
    assert proc.returncode == 0, f"README example {index} failed:\n{source}\n{proc.stderr}"
    if expected is not None:
        assert proc.stdout.split() == expected.split(), proc.stdout
