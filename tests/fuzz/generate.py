"""Mutated scenario files and reports, made from the shipped ones, reproducible from a seed.

`scenario_case(seed, i)` is file number i of a run seeded `seed`: one of the shipped scenarios
with one to four mutations, structural (on the parsed YAML: wrong types, missing and unknown
keys, unknown ops and modules, bad shapes, references to later or missing tensors, huge and
non-finite numbers, matrix explosions, aliases) and byte-wise (on the text: junk and control
bytes, non-UTF-8, YAML syntax characters, tags, anchors, deep nesting, truncation).
`report_case(seed, i, base)` does the same to a report produced by a real run.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))

HUGE = [
    -1,
    0,
    1,
    2**31,
    2**32 + 1,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**30,
    1e308,
    -1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    10**4000,
    0.5,
    -0.0,
]
WRONG = [None, True, False, "", "x", "$nope", "$$x", [], {}, [1, 2], {"a": 1}, "64 MiB", "-1 GiB"]
NAMES = ["x", "y", "h", "a", "loss", "fc1", "act", "nope", "__", "a..b", "x.grad", "1x", "é"]
OPS = [
    "relu",
    "add",
    "mul",
    "matmul",
    "sum",
    "mean",
    "view",
    "reshape",
    "transpose",
    "cat",
    "softmax",
    "sigmoid",
    "exp",
    "nope",
    "Relu",
    "",
]
MODULES = ["Linear", "Conv2d", "ReLU", "MSELoss", "Sequential", "BatchNorm2d", "Nope", "linear"]
TEXT_SNIPPETS = [
    "&a ",
    "*a",
    "*nope",
    "!!binary ",
    "!x ",
    "!!python/object:os.system ",
    "<<: *a\n",
    "[",
    "]",
    "{",
    "}",
    ":",
    ": ",
    "- ",
    "\t",
    "'",
    '"',
    "#",
    "|\n",
    ">-\n",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "? ",
    ",",
    "\\",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    ".nan",
    ".inf",
    "-.inf",
    "0x7fffffffffffffff",
    "0o777",
    "1_000",
    "9" * 5000,
    "\x00",
    "\x07",
    "\x1b[31m",
    "\ufeff",
    "\u2028",
    "\ud7ff",
]
JUNK_BYTES = [b"\x00", b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x82", b"\x80", b"\x1f", b"\r", b"\r\n"]
MATRIX_BOMB = "".join(f"  p{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(9))
ALIAS_BOMB = "lol0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in nested dicts and lists (the root excluded)."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out.append(prefix + (i,))
            out += _paths(v, prefix + (i,))
    return out


def _get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data[p]
    return data


def _set(data: Any, path: tuple, value: Any) -> None:
    _get(data, path[:-1])[path[-1]] = value


# --- structural mutations (on the parsed data) ------------------------------------------------


def _wrong_type(rng, data):
    path = rng.choice(_paths(data))
    _set(data, path, copy.deepcopy(rng.choice(WRONG)))


def _huge_number(rng, data):
    numeric = [p for p in _paths(data) if isinstance(_get(data, p), (int, float))]
    path = rng.choice(numeric or _paths(data))
    _set(data, path, rng.choice(HUGE))


def _drop_key(rng, data):
    keys = [p for p in _paths(data) if isinstance(_get(data, p[:-1]), dict)]
    path = rng.choice(keys)
    del _get(data, path[:-1])[path[-1]]


def _unknown_key(rng, data):
    maps = [()] + [p for p in _paths(data) if isinstance(_get(data, p), dict)]
    target = _get(data, rng.choice(maps))
    target[rng.choice(["nope", "inplce", "shape", "in", "out", "id", "type", "0", "x.y"])] = (
        rng.choice(WRONG + HUGE[:3])
    )


def _swap_op(rng, data):
    nodes = [p for p in _paths(data) if isinstance(_get(data, p), dict)]
    with_op = [p for p in nodes if "op" in _get(data, p)]
    with_type = [p for p in nodes if "type" in _get(data, p)]
    with_module = [p for p in nodes if "module" in _get(data, p)]
    choice = rng.choice([with_op, with_type, with_module, nodes])
    if not choice:
        return
    node = _get(data, rng.choice(choice))
    if "op" in node or choice is with_op:
        node["op"] = rng.choice(OPS)
    elif "type" in node:
        node["type"] = rng.choice(MODULES)
    else:
        node["module"] = rng.choice(NAMES)


def _bad_shape(rng, data):
    shapes = [p for p in _paths(data) if p and p[-1] in ("shape", "output_size", "kernel_size")]
    if not shapes:
        return
    path = rng.choice(shapes)
    shape = _get(data, path)
    kind = rng.randrange(6)
    if kind == 0 and isinstance(shape, list) and shape:
        shape[rng.randrange(len(shape))] = rng.choice(HUGE + WRONG)
    elif kind == 1:
        _set(data, path, [rng.choice([0, 1, 2, 3, 4**16, 2**40]) for _ in range(rng.randrange(9))])
    elif kind == 2:
        _set(data, path, [])
    elif kind == 3:
        _set(data, path, [2**31, 2**31, 2**31])
    elif kind == 4:
        _set(data, path, [1] * rng.randrange(10, 70))
    else:
        _set(data, path, [rng.randrange(1, 5) for _ in range(rng.randrange(1, 5))])


def _rewire(rng, data):
    """Point a node's inputs at other names: later nodes (cycles), itself, missing names."""
    program = data.get("program") if isinstance(data, dict) else None
    if not isinstance(program, list) or not program:
        return
    node = rng.choice(program)
    if not isinstance(node, dict):
        return
    ids = [n.get("out") or n.get("id") for n in program if isinstance(n, dict)]
    names = [i for i in ids if isinstance(i, str)] + list((data.get("inputs") or {}).keys())
    node["in"] = rng.choice(
        [
            node.get("id"),
            rng.choice(names or NAMES),
            [rng.choice(names or NAMES) for _ in range(rng.randrange(4))],
            rng.choice(NAMES),
        ]
    )


def _duplicate(rng, data):
    lists = [p for p in _paths(data) if isinstance(_get(data, p), list) and _get(data, p)]
    if not lists:
        return
    items = _get(data, rng.choice(lists))
    i = rng.randrange(len(items))
    if rng.random() < 0.5:
        items.insert(rng.randrange(len(items) + 1), copy.deepcopy(items[i]))
    else:
        j = rng.randrange(len(items))
        items[i], items[j] = items[j], items[i]


def _top_level(rng, data):
    key, value = rng.choice(
        [
            ("device", rng.choice(["cpu", "meta", "cuda", "auto", "gpu", "cuda:7", None])),
            ("allocator", rng.choice(["exact", "caching", "Caching", 1])),
            ("dtype", rng.choice(["float16", "float64", "int32", "uint8", "bool", "complex64"])),
            ("iterations", rng.choice([0, 2, 10**9, -1, "3"])),
            ("seed", rng.choice([-1, 2**64 - 1, 2**64, 2**200, "0", 1.5])),
            ("memory_limit", rng.choice([0, 1, "1 KiB", float("inf"), "1e9", "10 PiB", -5])),
            ("strict", rng.choice([True, "yes", None])),
            ("name", rng.choice(["a..b", "", "-x", "x" * 300, "ok_name", "a/b", "."])),
            ("baseline", rng.choice(["nope", None, 1])),
            ("matrix", {f"p{i}": list(range(10)) for i in range(rng.randrange(1, 10))}),
            ("phases", rng.choice([["forward"], [{"backward": "y"}], ["backward"], []])),
        ]
    )
    data[key] = value


def _params(rng, data):
    variants = data.get("variants") if isinstance(data, dict) else None
    if not isinstance(variants, dict) or not variants:
        data["variants"] = {"v": {"q": rng.choice(HUGE + WRONG)}}
        return
    name = rng.choice(list(variants))
    params = variants[name] if isinstance(variants[name], dict) else {}
    params[rng.choice(["q", "inplace", "optimizer", "batch"])] = rng.choice(HUGE + WRONG)
    variants[name] = params


STRUCTURAL = [
    _wrong_type,
    _huge_number,
    _drop_key,
    _unknown_key,
    _swap_op,
    _bad_shape,
    _rewire,
    _duplicate,
    _top_level,
    _params,
]


# --- byte-wise mutations (on the text) --------------------------------------------------------


def _insert_snippet(rng, raw: bytes) -> bytes:
    i = rng.randrange(len(raw) + 1)
    return raw[:i] + rng.choice(TEXT_SNIPPETS).encode("utf-8", "surrogatepass") + raw[i:]


def _insert_junk(rng, raw: bytes) -> bytes:
    i = rng.randrange(len(raw) + 1)
    return raw[:i] + rng.choice(JUNK_BYTES) + raw[i:]


def _flip(rng, raw: bytes) -> bytes:
    if not raw:
        return raw
    i = rng.randrange(len(raw))
    return raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1 :]


def _cut(rng, raw: bytes) -> bytes:
    if not raw:
        return raw
    i = rng.randrange(len(raw))
    j = min(len(raw), i + rng.randrange(1, 40))
    return raw[:i] + raw[j:]


def _repeat(rng, raw: bytes) -> bytes:
    if not raw:
        return raw
    i = rng.randrange(len(raw))
    j = min(len(raw), i + rng.randrange(1, 80))
    return raw[:j] + raw[i:j] * rng.randrange(1, 4) + raw[j:]


def _truncate(rng, raw: bytes) -> bytes:
    return raw[: rng.randrange(len(raw) + 1)]


def _nest(rng, raw: bytes) -> bytes:
    depth = rng.choice([10, 63, 65, 200, 1000, 5000])
    opener, closer = rng.choice([("[", "]"), ("{a: ", "}")])
    return raw + f"\ndeep: {opener * depth}1{closer * depth}\n".encode()


def _bomb(rng, raw: bytes) -> bytes:
    text = rng.choice(
        [
            ALIAS_BOMB,
            "rec: &r [*r]\n",
            "rec: &r {a: *r}\n",
            "matrix:\n" + MATRIX_BOMB,
            "x: &a [1]\ny: *a\nz: {<<: *a}\n",
            "x: !!set {a, b}\n",
            "x: !!omap [a: 1]\n",
            "x: !!binary aGVsbG8=\n",
            "!x name: a\n",
            "? [a, b]\n: c\n",
        ]
    )
    return raw + b"\n" + text.encode()


BYTEWISE = [_insert_snippet, _insert_junk, _flip, _cut, _repeat, _truncate, _nest, _bomb]


def scenario_case(seed: int, i: int) -> tuple[str, bytes]:
    """(name, bytes) of mutated scenario file number i of the run seeded `seed`."""
    rng = random.Random(f"scenario:{seed}:{i}")
    base = rng.choice(SCENARIOS)
    raw = base.read_bytes()
    steps = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        # (text with anchors may expand to billions of values once loaded: bytes only)
        if rng.random() < 0.55 and b"&" not in raw and len(raw) < 20000:
            try:
                data = yaml.safe_load(raw.decode("utf-8"))
            except Exception:
                data = None
            if isinstance(data, dict) and data:
                mutate = rng.choice(STRUCTURAL)
                try:
                    mutate(rng, data)
                    raw = yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()
                    steps.append(mutate.__name__)
                    continue
                except (IndexError, ValueError, TypeError, KeyError, RecursionError):
                    pass
        mutate = rng.choice(BYTEWISE)
        raw = mutate(rng, raw)
        steps.append(mutate.__name__)
    return f"{i:05d}-{base.stem}-{'+'.join(s.strip('_') for s in steps)}.yaml", raw


# --- reports ----------------------------------------------------------------------------------


def report_case(seed: int, i: int, base: dict[str, Any]) -> tuple[str, bytes]:
    """(name, bytes) of mutated report file number i, from the real report `base`."""
    rng = random.Random(f"report:{seed}:{i}")
    data = copy.deepcopy(base)
    steps = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.randrange(6)
        paths = _paths(data)
        if kind == 0 and paths:
            path = rng.choice(paths)
            _set(data, path, copy.deepcopy(rng.choice(WRONG + HUGE[:12])))
            steps.append("wrong")
        elif kind == 1 and paths:
            keys = [p for p in paths if isinstance(_get(data, p[:-1]), dict)]
            path = rng.choice(keys)
            del _get(data, path[:-1])[path[-1]]
            steps.append("drop")
        elif kind == 2:
            lists = [p for p in paths if isinstance(_get(data, p), list) and _get(data, p)]
            if lists:
                items = _get(data, rng.choice(lists))
                if rng.random() < 0.5:
                    items.pop(rng.randrange(len(items)))
                else:
                    items.append(copy.deepcopy(items[rng.randrange(len(items))]))
            steps.append("list")
        elif kind == 3:
            variants = data.get("variants") if isinstance(data, dict) else None
            if isinstance(variants, list) and variants:
                variants.append(copy.deepcopy(variants[0]))
            steps.append("dupvariant")
        elif kind == 4:
            numeric = [p for p in paths if isinstance(_get(data, p), (int, float))]
            if numeric:
                _set(data, rng.choice(numeric), rng.choice([-1, 2**64, 10**30, 1e308, 0.5]))
            steps.append("number")
        else:
            steps.append("bytes")
            raw = json.dumps(data, allow_nan=True).encode()
            raw = rng.choice(BYTEWISE[:6])(rng, raw)
            return f"{i:05d}-report-{'+'.join(steps)}.json", raw
    raw = json.dumps(data, allow_nan=True).encode()
    return f"{i:05d}-report-{'+'.join(steps)}.json", raw
