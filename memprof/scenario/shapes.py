"""Shape checks before anything runs: each variant's forward program, dry-run on the meta device
(shapes and dtypes only, no data), with every failure mapped back to its node in the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from memprof.scenario.build import (
    Bindings,
    NotATensor,
    ProgramHooks,
    bound_names,
    build_module,
    describe_tensor,
    forward_options,
    make_input,
    module_parameters,
    run_forward,
)
from memprof.scenario.loader import Document, Problem, dedupe
from memprof.scenario.model import ModuleCall


def dry_run(variant, doc: Document) -> list[Problem]:
    """Problems (errors, and stale-read warnings) found by running `variant` on meta.

    A variant that expects an error is not held to running cleanly: its failure is the point.
    Shapes need no accounting: the run charges no allocator (engine.allocator.tracking(False);
    storages keep ids of their own, which tell writers apart), a fifth sooner on the zoo.
    """
    import engine
    from engine.allocator.tracked import tracking

    spec = variant.spec
    allowed_to_fail = variant.expects_failure
    problems: list[Problem] = []
    with tracking(False):  # (nothing charged: no memory limit to lift either)
        inputs = {}
        for name, ispec in spec.inputs.items():
            try:
                inputs[name] = make_input(engine, ispec, spec.dtype, "meta")
            except Exception as exc:
                return [
                    doc.problem(
                        ("inputs", name),
                        f"expected an input the engine can make, found {_error(exc)}",
                    )
                ]
        modules = {}
        for name, mspec in spec.modules.items():
            try:
                modules[name] = build_module(engine, mspec, "meta", spec.dtype)
            except Exception as exc:
                return [
                    doc.problem(
                        ("modules", name),
                        f"expected arguments nn.{mspec.type} accepts, found {_error(exc)}",
                    )
                ]
        state = Bindings()
        for name, t in inputs.items():
            state.bind(name, t)
        expect = variant.expect
        asked = bool(expect is not None and (expect.warnings or {}).get("stale_read"))
        hooks = _DryRunHooks(doc, spec.strict and not allowed_to_fail, spec.strict, asked)
        rounds = 2 if spec.iterations > 1 else 1  # the second round sees what the first wrote
        try:
            for _ in range(rounds):
                state.drop(bound_names(spec.program))
                run_forward(spec.program, state, modules, hooks, forward_options(spec, "meta"))
        except Exception as exc:
            problems = hooks.problems
            if allowed_to_fail:
                return dedupe(problems)
            i, node, tensors = hooks.current
            if isinstance(exc, NotATensor):
                problems.append(doc.problem(("program", i), str(exc)))
            elif _meta_limitation(engine, exc):
                problems.append(
                    doc.problem(
                        ("program", i),
                        (
                            f"shapes from node {node.id!r} on are not checked: the meta device "
                            f"cannot run it ({_error(exc)}); they are checked when it runs"
                        ),
                        severity="warning",
                    )
                )
            else:
                shown = ", ".join(
                    describe_tensor(n, t) for n, t in zip(node.inputs, tensors, strict=True)
                )
                what = (
                    f"module {node.module} ({spec.modules[node.module].type})"
                    if isinstance(node, ModuleCall)
                    else f"op {node.op}"
                )
                problems.append(
                    doc.problem(
                        ("program", i),
                        f"node {node.id!r} ({what}) cannot run on "
                        f"{shown or 'no inputs'}: {_error(exc)}",
                    )
                )
            return dedupe(problems)
        problems = hooks.problems
        for i, phase in enumerate(spec.phases):
            if hasattr(phase, "backward"):
                loss = state.values[phase.backward]
                if loss.numel() != 1:
                    problems.append(
                        doc.problem(
                            ("phases", i, "backward"),
                            (
                                f"expected a scalar (one element) to call backward on, found "
                                f"{describe_tensor(phase.backward, loss)}; reduce it with op sum or mean"
                            ),
                        )
                    )
                elif not loss.requires_grad and not allowed_to_fail:
                    problems.append(
                        doc.problem(
                            ("phases", i, "backward"),
                            (
                                f"expected a tensor that requires grad, found {phase.backward!r}, which does "
                                f"not (no module parameter or requires_grad input reaches it)"
                            ),
                        )
                    )
            elif hasattr(phase, "optimizer"):
                if not module_parameters(modules, phase.optimizer.params):
                    problems.append(
                        doc.problem(
                            ("phases", i, "optimizer"),
                            ("expected modules with parameters for the optimizer, found none"),
                        )
                    )
        return dedupe(problems)


def _meta_limitation(engine, exc: BaseException) -> bool:
    """An engine without a meta implementation of some op (not a problem of the scenario)."""
    return isinstance(exc, (NotImplementedError, AttributeError, engine.errors.MetaDataError))


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _DryRunHooks(ProgramHooks):
    """Stale reads become problems at their node; the node running now is kept for a failure."""

    def __init__(self, doc: Document, stale_is_error: bool, strict: bool, asked: bool = False):
        self.doc = doc
        self.asked = asked  # the variant's `expect` asks for stale reads: no warning about them
        self.stale_is_error = stale_is_error
        self.strict = strict
        self.problems: list[Problem] = []
        self.current: tuple = (0, None, [])

    def stale(self, index, node, stale) -> None:
        if self.asked and not self.stale_is_error:
            return
        self.problems.append(
            self.doc.problem(
                ("program", index),
                stale.message + (" (strict: true makes this an error)" if self.strict else ""),
                severity="error" if self.stale_is_error else "warning",
                kind="stale_read",
            )
        )

    @contextmanager
    def node(self, index, node, tensors) -> Iterator[None]:
        self.current = (index, node, tensors)
        yield
