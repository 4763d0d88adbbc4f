"""Grad mode: whether ops record history. `no_grad` works as a context manager and a decorator."""

from __future__ import annotations

import functools


class _State:
    enabled = True


STATE = _State()


def is_grad_enabled() -> bool:
    return STATE.enabled


class _GradModeContext:
    _target = True

    def __enter__(self):
        self._prev = STATE.enabled
        STATE.enabled = self._target
        return self

    def __exit__(self, *exc):
        STATE.enabled = self._prev
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return func(*args, **kwargs)

        return wrapper


class no_grad(_GradModeContext):  # noqa: N801 - PyTorch's spelling
    """Disable history recording: `with engine.no_grad(): ...` or `@engine.no_grad()`."""

    _target = False


class enable_grad(_GradModeContext):  # noqa: N801
    """Enable history recording inside a no_grad region."""

    _target = True


class set_grad_enabled(_GradModeContext):  # noqa: N801
    def __init__(self, mode: bool):
        self._target = bool(mode)
        self._prev = STATE.enabled
        STATE.enabled = self._target

    def __enter__(self):
        return self

    def __call__(self, func):
        mode = self._target

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)

        STATE.enabled = self._prev
        return wrapper
