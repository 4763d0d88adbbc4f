"""YAML loading with positions: every value knows its file:line:col."""

import pytest

from memprof.scenario.loader import Position, ScenarioYAMLError, load_yaml

TEXT = """\
name: relu-block
inputs:
  x: {shape: [1, 64], init: rand}
program:
  - {id: act, op: relu, in: x}
  - id: second
    op: sigmoid
lr: 1e-3
"""


def test_values_and_keys_have_one_based_positions():
    doc = load_yaml(TEXT, "s.yaml")
    assert doc.data["inputs"]["x"]["shape"] == [1, 64]
    assert doc.position(("name",)) == Position(1, 7)
    assert doc.position(("inputs", "x", "shape", 1)) == Position(3, 18)
    assert doc.position(("program", 0, "op")) == Position(5, 19)
    assert doc.position(("program", 1, "op")) == Position(7, 9)
    assert doc.position(("program", 1, "op"), key=True) == Position(7, 5)


def test_position_falls_back_to_the_nearest_enclosing_value():
    doc = load_yaml(TEXT, "s.yaml")
    # a path below a scalar (as a substituted $param can produce) points at the scalar
    assert doc.position(("program", 0, "args", "dim")) == doc.position(("program", 0))


def test_exponent_floats_read_as_numbers_as_in_yaml_1_2():
    assert load_yaml(TEXT, "s.yaml").data["lr"] == pytest.approx(1e-3)


def test_problem_lines_read_file_line_col():
    doc = load_yaml(TEXT, "s.yaml")
    assert (
        str(doc.problem(("program", 1, "op"), "expected x, found y"))
        == "s.yaml:7:9: expected x, found y"
    )


def test_syntax_error_points_at_the_line_and_column():
    with pytest.raises(ScenarioYAMLError) as info:
        load_yaml("name: a\nprogram: [1, 2\n", "bad.yaml")
    line = str(info.value.problem)
    assert line.startswith("bad.yaml:3:1: YAML syntax error: ")
    assert "expected ',' or ']'" in line


def test_duplicate_keys_are_an_error_not_silently_overwritten():
    with pytest.raises(ScenarioYAMLError) as info:
        load_yaml("inputs:\n  x: {shape: [1]}\n  x: {shape: [2]}\n", "dup.yaml")
    assert str(info.value.problem) == (
        "dup.yaml:3:3: expected each key once in a mapping, found 'x' again (first at line 2)"
    )


def test_merge_keys_and_anchors_are_resolved():
    doc = load_yaml("base: &b {init: rand}\nx: {<<: *b, shape: [2]}\n", "m.yaml")
    assert doc.data["x"] == {"init": "rand", "shape": [2]}


def test_empty_file_is_no_data():
    assert load_yaml("", "e.yaml").data is None


# --- libyaml's parser: the same Document or problem as the pure-Python one ---------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
YAML_FILES = sorted(ROOT.glob("scenarios/*.yaml")) + sorted(ROOT.glob("tests/**/*.yaml"))


def _strict(value):
    """The data with every scalar's type spelled out (1, 1.0 and True compare equal)."""
    if isinstance(value, dict):
        return ("map", [(_strict(k), _strict(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("seq", [_strict(v) for v in value])
    return (type(value).__name__, repr(value))


def _outcome(read, text):
    from memprof.scenario import loader

    try:
        doc = read(text)
    except loader.ScenarioYAMLError as exc:
        return ("problem", str(exc.problem))
    return ("doc", _strict(doc.data), sorted(map(repr, doc.values.items())), doc.keys)


def _both(text):
    """(what load_yaml gives, what the pure-Python loader gives) for `text`."""
    from memprof.scenario import loader

    return (
        _outcome(lambda t: loader.load_yaml(t, "f.yaml"), text),
        _outcome(lambda t: loader._load_yaml(t, "f.yaml", loader._Loader), text),
    )


@pytest.fixture
def libyaml_calls(monkeypatch):
    """The loader classes load_yaml used, in order (skips where PyYAML has no libyaml)."""
    from memprof.scenario import loader

    if loader._CLoader is None:
        pytest.skip("PyYAML without libyaml: only the pure-Python loader exists")
    calls = []
    real = loader._load_yaml

    def spy(text, file, cls):
        calls.append(cls)
        return real(text, file, cls)

    monkeypatch.setattr(loader, "_load_yaml", spy)
    return calls


def test_libyaml_reads_the_shipped_and_test_scenarios_as_the_pure_python_loader(libyaml_calls):
    # given every YAML file of the project, then load_yaml gives the same data (types too),
    # positions and keys as the pure-Python loader, and it took libyaml's path for most
    from memprof.scenario import loader

    assert len(YAML_FILES) > 14
    for path in YAML_FILES:
        text = path.read_text(encoding="utf-8")
        fast, pure = _both(text)
        assert fast == pure, path
    assert libyaml_calls.count(loader._CLoader) >= 13


@pytest.mark.parametrize(
    "text",
    [
        "a: {x: 1?}\n",  # libyaml reads `1?` in a flow mapping as text, PyYAML refuses it
        "a: {x?: 1}\n",
        "a: {x: 1, y: 2 ? z}\n",
        "a: {x: 1, ?y}\n",
        "a:\t1\nb: 2\n",  # a tab as a separator
        "a: {x: , y: 1}\n",  # an empty value: libyaml places it a column later
        "a: [x, , y]\n",
        "a: {\ufeffb: 1}\n",  # a column after a byte order mark inside the text
        "a: \u00e9\nb: {c: 1, d: 2}\n",
        "a: 1\n? b\n: 2\n",
        "a: &x {b: 1}\nc:\n  <<: *x\n  d: ''\n",
        "a: ",
        "",
        "# only a comment\n",
        "- [a, {b: [c, d]}]\n- e: f\n",
        "a: 1\na: 2\n",
    ],
)
def test_libyaml_and_pure_python_agree_where_their_parsers_differ(text):
    fast, pure = _both(text)
    assert fast == pure


def test_libyaml_and_pure_python_agree_on_mutated_scenarios(libyaml_calls):
    # given the small shipped scenarios with random characters inserted and removed (seeded;
    # thousands of such cases were compared when the libyaml path was added), then both loaders
    # give the same Document or the same problem
    import random

    from memprof.scenario import loader

    rng = random.Random(15)
    pieces = [
        ":",
        "- ",
        " ",
        "\n",
        "[",
        "]",
        "{",
        "}",
        ",",
        "&a ",
        "*a",
        "'",
        '"',
        "#",
        "!!str ",
        "<<: *a",
        "|",
        ">",
        "---\n",
        "~",
        "1e3",
        "0x1F",
        "- - ",
        "''",
        "null",
        "yes",
        "a: b: c",
    ]
    texts = [p.read_text(encoding="utf-8") for p in YAML_FILES if p.stat().st_size < 2000]
    for _ in range(150):
        text = rng.choice(texts)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text) + 1)
            if rng.random() < 0.3:
                text = text[:i] + text[i + rng.randint(1, 5) :]
            else:
                text = text[:i] + rng.choice(pieces) + text[i:]
        fast, pure = _both(text)
        assert fast == pure, text
    assert libyaml_calls.count(loader._CLoader) > 100
