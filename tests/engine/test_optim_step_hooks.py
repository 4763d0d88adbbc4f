"""Global optimizer step hooks (torch.optim.optimizer.register_optimizer_step_pre/post_hook)."""

import engine
from engine.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)


def _calls(mod, make):
    calls = []
    pre = mod.register_optimizer_step_pre_hook(
        lambda opt, args, kwargs: calls.append(
            ("pre", type(opt).__name__, args[0] is opt, args[1:], kwargs)
        )
    )
    post = mod.register_optimizer_step_post_hook(
        lambda opt, args, kwargs: calls.append(
            ("post", type(opt).__name__, args[0] is opt, args[1:], kwargs)
        )
    )
    try:
        p, opt = make()
        p.grad = p.detach() * 0 + 1
        opt.step()
        pre.remove()
        opt.step()
    finally:
        pre.remove()
        post.remove()
    opt.step()  # no hooks left
    return calls


def test_hooks_run_around_every_step_like_torchs(torch):
    import torch.optim.optimizer as torch_optimizer

    import engine.optim.optimizer as engine_optimizer

    ours = _calls(
        engine_optimizer,
        lambda: (
            (p := engine.zeros(3, requires_grad=True)),
            engine.optim.SGD([p], lr=0.1, momentum=0.9),
        ),
    )
    theirs = _calls(
        torch_optimizer,
        lambda: (
            (p := torch.zeros(3, requires_grad=True)),
            torch.optim.SGD([p], lr=0.1, momentum=0.9),
        ),
    )
    assert (
        ours
        == theirs
        == [
            ("pre", "SGD", True, (), {}),
            ("post", "SGD", True, (), {}),
            ("post", "SGD", True, (), {}),
        ]
    )


def test_a_pre_hook_may_replace_the_arguments():
    p = engine.zeros(2, requires_grad=True)
    p.grad = engine.ones(2)
    opt = engine.optim.SGD([p], lr=1.0)
    seen = []

    def closure():
        seen.append("closure")
        return engine.tensor(0.0)

    handle = register_optimizer_step_pre_hook(lambda o, a, k: ((o,), {"closure": closure}))
    post = register_optimizer_step_post_hook(lambda o, a, k: seen.append(k))
    try:
        opt.step()
    finally:
        handle.remove()
        post.remove()
    assert seen == ["closure", {"closure": closure}]
