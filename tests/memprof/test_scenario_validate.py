"""Bad scenario files give one `file:line:col: expected ..., found ...` line per problem."""

import textwrap

import pytest

from memprof.errors import InvalidInput
from memprof.scenario import load_scenario


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(tmp_path, text, **kw):
    path = write(tmp_path, text)
    with pytest.raises(InvalidInput) as info:
        load_scenario(path, **kw)
    return [line.replace(str(path), "s.yaml") for line in info.value.problems]


GOOD = """\
name: ok
inputs:
  x: {shape: [2, 3], init: rand}
program:
  - {id: act, op: relu, in: x, out: y, inplace: $inplace}
variants:
  a: {inplace: true}
  b: {inplace: false}
"""


def test_a_good_file_loads_with_one_spec_per_variant(tmp_path):
    sc = load_scenario(write(tmp_path, GOOD))
    assert [v.name for v in sc.variants] == ["a", "b"]
    assert [v.spec.program[0].inplace for v in sc.variants] == [True, False]
    assert len(sc.sha256) == 64


def test_unknown_op_names_the_position_and_suggests(tmp_path):
    assert problems(tmp_path, GOOD.replace("op: relu", "op: rleu")) == [
        "s.yaml:5:19: expected a known op (did you mean 'relu', 'rrelu', 'relu6' or 'prelu'?), found "
        "'rleu'"
    ]


def test_unknown_module_type_and_wrong_argument(tmp_path):
    text = """\
    name: m
    inputs:
      x: {shape: [1, 3]}
    modules:
      fc: {type: Linaer, in_features: 3, out_features: 4}
      fc2: {type: Linear, in_features: 3, out_features: 4, kernal_size: 3}
      fc3: {type: Linear, in_features: "3", out_features: 4}
    program:
      - {id: y, module: fc2, in: x}
    """
    assert problems(tmp_path, text) == [
        "s.yaml:5:14: expected a module type such as Linear, Conv2d or ReLU (did you mean 'Linear', 'Bilinear' or 'LazyLinear'?), found 'Linaer'",
        "s.yaml:6:56: expected one of the fields type, in_features, out_features, bias, found 'kernal_size'",
        "s.yaml:7:36: expected a valid integer, found '3'",
    ]


def test_undefined_and_duplicate_tensor_names(tmp_path):
    text = """\
    name: n
    inputs:
      x: {shape: [2]}
    program:
      - {id: a, op: relu, in: x2}
      - {id: b, op: relu, in: d}
      - {id: c, op: relu, in: x, out: x}
      - {id: a, op: sigmoid, in: x}
      - {id: d, op: relu, in: x}
    """
    assert problems(tmp_path, text) == [
        "s.yaml:5:27: expected a defined tensor (x) (did you mean 'x'?), found 'x2'",
        "s.yaml:6:27: expected a tensor defined before this node, found 'd', which node 'd' makes later (line 9)",
        "s.yaml:7:35: expected a new tensor name (each name is bound once), found 'x', already bound at line 3",
        "s.yaml:8:10: expected a unique node id, found 'a' again (first at line 5)",
        "s.yaml:8:10: expected a new tensor name (each name is bound once), found 'a', already bound at line 5",
    ]


def test_wrong_number_of_inputs_and_missing_required_args(tmp_path):
    text = """\
    name: n
    inputs:
      x: {shape: [2, 2]}
    program:
      - {id: a, op: relu, in: [x, x]}
      - {id: b, op: softmax, in: x}
      - {id: c, op: add, in: x}
    """
    assert problems(tmp_path, text) == [
        "s.yaml:6:5: expected field 'args' in node 'b', found no such field",
    ]
    text = text.replace("op: softmax, in: x}", "op: softmax, in: x, args: {dim: 1}}")
    assert problems(tmp_path, text) == [
        "s.yaml:5:27: expected 1 input tensor(s) for relu (input), found 2",
        "s.yaml:7:26: expected a second input tensor or args.other for add, found neither",
    ]


def test_bad_size_strings(tmp_path):
    text = GOOD + "memory_limit: 64 MB-ish\nexpect:\n  a: {peak_allocated: '<= lots'}\n"
    assert problems(tmp_path, text) == [
        "s.yaml:9:15: expected a size such as 64 MiB, 1.5 GiB, 512 KiB, 2 GB or a plain integer, found '64 MB-ish'",
        "s.yaml:11:23: expected a size with an optional comparison such as '64 MiB', '<= 1.5 GiB' or '>= 1000', found '<= lots'",
    ]


def test_yaml_syntax_error_is_one_line(tmp_path):
    lines = problems(tmp_path, "name: x\nprogram: [\n")
    assert len(lines) == 1
    assert lines[0].startswith("s.yaml:3:1: YAML syntax error:")


def test_undefined_parameter_reference(tmp_path):
    assert problems(tmp_path, GOOD.replace("inplace: $inplace", "inplace: $in_place")) == [
        "s.yaml:5:49: expected a parameter the variants define (inplace) (did you mean 'inplace'?), found $in_place"
    ]


def test_a_problem_in_only_some_variants_names_them(tmp_path):
    text = GOOD.replace("b: {inplace: false}", "b: {inplace: 3}")
    assert problems(tmp_path, text) == [
        "s.yaml:5:49: expected a valid boolean, found 3 (in variant b)"
    ]


def test_shapes_that_cannot_work_are_found_before_running(tmp_path):
    text = """\
    name: shapes
    inputs:
      x: {shape: [8, 100]}
    modules:
      fc: {type: Linear, in_features: 200, out_features: 10}
    program:
      - {id: h, op: relu, in: x}
      - {id: y, module: fc, in: h}
    """
    [line] = problems(tmp_path, text)
    assert line.startswith(
        "s.yaml:8:5: node 'y' (module fc (Linear)) cannot run on h [8, 100] float32: "
    )


def test_backward_needs_a_scalar(tmp_path):
    text = """\
    name: b
    inputs:
      a: {shape: [3, 4], requires_grad: true}
    program:
      - {id: y, op: mul, in: a, args: {other: 2.0}}
    phases: [forward, {backward: y}]
    """
    assert problems(tmp_path, text) == [
        "s.yaml:6:30: expected a scalar (one element) to call backward on, found y [3, 4] float32; "
        "reduce it with op sum or mean"
    ]


def test_phases_expectations_and_baseline_are_checked(tmp_path):
    text = GOOD + "phases: [{backward: y}, forward]\n"
    assert problems(tmp_path, text) == [
        "s.yaml:9:10: expected `forward` before this phase, found it first"
    ]
    text = GOOD + "baseline: c\n"
    assert problems(tmp_path, text) == ["s.yaml:9:11: expected a variant name (a, b), found 'c'"]
    text = GOOD + "expect:\n  aa: {peak_allocated: 10}\n"
    assert problems(tmp_path, text) == [
        "s.yaml:10:3: expected a variant name (a, b) or '*' (did you mean 'a'?), found 'aa'"
    ]


STALE = """\
name: stale
inputs:
  x: {shape: [4]}
program:
  - {id: x1, op: mul, in: x, args: {other: 2.0}}
  - {id: h, op: relu, in: x1, inplace: true}
  - {id: y, op: sigmoid, in: x1}
"""


def test_strict_stale_read_is_an_error_before_running(tmp_path):
    text = STALE.replace("name: stale\n", "name: stale\nstrict: true\n")
    assert problems(tmp_path, text) == [
        "s.yaml:8:5: node y reads x1, which node h overwrote in place; it sees h's values "
        "(strict: true makes this an error)"
    ]


def warnings_of(tmp_path, text):
    sc = load_scenario(write(tmp_path, text))
    return [str(w).replace(str(tmp_path / "s.yaml"), "s.yaml") for w in sc.warnings]


def test_stale_read_without_strict_is_a_warning(tmp_path):
    assert warnings_of(tmp_path, STALE) == [
        "s.yaml:7:5: warning: node y reads x1, which node h overwrote in place; it sees h's values"
    ]


def test_unknown_variant_and_bad_override(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(InvalidInput, match="unknown variant 'c'"):
        load_scenario(path, variants=["c"])
    with pytest.raises(InvalidInput, match="--device: expected one of cpu, cuda, meta, auto"):
        load_scenario(path, device="gpu")


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(InvalidInput, match="no such scenario file"):
        load_scenario(tmp_path / "nope.yaml")
    assert problems(tmp_path, "- 1\n- 2\n") == [
        "s.yaml:1:1: expected a mapping with name, inputs, program, ..., found a list"
    ]


def test_leaf_inplace_is_a_problem_unless_the_variant_expects_it(tmp_path):
    text = textwrap.dedent("""\
    name: leaf
    inputs:
      a: {shape: [3], requires_grad: true}
    program:
      - {id: x, op: relu, in: a, inplace: true}
    """)
    [line] = problems(tmp_path, text)
    assert line == (
        "s.yaml:5:5: node 'x' (op relu) cannot run on a [3] float32: RuntimeError: "
        "a leaf Variable that requires grad is being used in an in-place operation."
    )
    text += "expect:\n  '*': {error: {type: RuntimeError}}\n"
    assert load_scenario(write(tmp_path, text)).variants[0].expects_failure


def _has_gpu():
    from engine.device import cuda_available

    return cuda_available()


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_invalid_input(tmp_path):
    path = write(tmp_path, "device: cuda\n" + GOOD)
    with pytest.raises(InvalidInput) as info:
        load_scenario(path)
    assert str(info.value) == (
        f"{path}:1:9: device cuda: expected a GPU that CuPy can see, found none; "
        "use cpu, meta, or auto (cuda when there is a GPU)"
    )
    assert (
        load_scenario(write(tmp_path, "device: auto\n" + GOOD, "auto.yaml")).variants[0].spec.device
        == "auto"
    )


def test_an_op_the_meta_device_cannot_run_is_a_warning_not_an_error(tmp_path, monkeypatch):
    import dataclasses

    from memprof.scenario import catalog

    real = catalog.OPS["relu"]

    def relu_without_meta(ts, args, inplace):
        if ts[0].device.type == "meta":
            raise NotImplementedError("relu has no meta kernel")
        return real.call(ts, args, inplace)

    monkeypatch.setitem(catalog.OPS, "relu", dataclasses.replace(real, call=relu_without_meta))
    sc = load_scenario(write(tmp_path, GOOD))
    assert [str(w).replace(str(tmp_path / "s.yaml"), "s.yaml") for w in sc.warnings] == [
        "s.yaml:5:5: warning: shapes from node 'act' on are not checked: the meta device cannot run "
        "it (NotImplementedError: relu has no meta kernel); they are checked when it runs"
    ]


def test_the_shape_dry_run_charges_no_allocator_and_still_names_the_writer(tmp_path):
    """The dry run checks shapes with the allocator's accounting off: the meta allocator's
    counters do not move, while a stale read still names only the node that wrote its storage
    (u's in-place write goes to another storage of the same size)."""
    from engine.allocator import get_allocator

    # two more nodes before h: u writes in place into t, a storage of x1's size
    more = "  - {id: t, op: exp, in: x}\n  - {id: u, op: relu, in: t, inplace: true}\n"
    text = STALE.replace("  - {id: h,", more + "  - {id: h,")
    model = get_allocator("meta").model
    before = model.memory_stats()
    found = warnings_of(tmp_path, text)
    assert model.memory_stats() == before
    assert found == [
        "s.yaml:9:5: warning: node y reads x1, which node h overwrote in place; it sees h's values"
    ]
