"""The learner's whole gradient step as one CUDA graph (``compile=graph``).

On a GPU the DQN update of a small network is bound by the host launching its ~145 kernels,
not by the GPU running them (docs/scale.md). Here the step (the online and target passes, the
double-DQN target, the Huber loss, the backward pass, the gradient norm and Adam's step) is
recorded once with :class:`torch.cuda.CUDAGraph` and then replayed as one launch per update,
following PyTorch's "whole network capture": each update copies its batch into the graph's
static input tensors, replays, and clones the metrics out of the graph's memory (the next
replay rewrites them).

What the recording needs and how it is kept exact:

* Adam is built with ``capturable=True`` (its step counter lives on the GPU).
* Recording runs the step a few times first (warm-up, on a side stream, as CUDA graphs ask);
  those steps are undone: the weights and Adam's state are put back as they were, in place
  (the graph holds their addresses), so the first update is the same as an eager one.
* Anything that replaces the optimiser or its state tensors (resuming, finetuning) makes the
  agent start a new :class:`GraphedStep`; the next update records again. So does a batch of
  another shape or dtype.
* The gradients live in the graph's memory: nothing else may set them to None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Inputs = Sequence[torch.Tensor | None]

WARMUP_STEPS = 3


class GraphedStep:
    """Replays ``step(*inputs) -> metrics`` (which runs the backward pass and ``optimizer``'s
    step on ``params``) as one CUDA graph."""

    def __init__(self, step: Callable[..., dict[str, torch.Tensor]],
                 optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]):
        if not all(g.get("capturable") for g in optimizer.param_groups):
            raise ValueError("a graphed step needs an optimiser built with capturable=True")
        self.step, self.optimizer, self.params = step, optimizer, list(params)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: tuple | None = None
        self.static_in: list[torch.Tensor | None] = []
        self.static_out: dict[str, torch.Tensor] = {}
        self.recordings = 0  # how many times the step was recorded (tests, logs)

    def __call__(self, inputs: Inputs) -> dict[str, torch.Tensor]:
        key = tuple(None if t is None else (tuple(t.shape), t.dtype, t.device) for t in inputs)
        if key != self.key:
            self._record(inputs, key)
        for static, value in zip(self.static_in, inputs):
            if static is not None:
                static.copy_(value, non_blocking=True)
        assert self.graph is not None
        self.graph.replay()
        return {name: value.clone() for name, value in self.static_out.items()}

    # ------------------------------------------------------------------ recording
    def _record(self, inputs: Inputs, key: tuple) -> None:
        static = [None if t is None else t.detach().clone() for t in inputs]
        saved = self._save()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self.optimizer.zero_grad(set_to_none=True)
                self.step(*static)
        torch.cuda.current_stream().wait_stream(side)
        self.optimizer.zero_grad(set_to_none=True)  # the gradients are the graph's from here
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.step(*static)
        self._restore(saved)
        self.graph, self.key, self.static_in, self.static_out = graph, key, static, out
        self.recordings += 1

    def _save(self) -> tuple[list[torch.Tensor], dict[int, dict[str, torch.Tensor]]]:
        weights = [p.detach().clone() for p in self.params]
        state = {i: {k: v.clone() for k, v in self.optimizer.state[p].items()
                     if isinstance(v, torch.Tensor)}
                 for i, p in enumerate(self.params) if p in self.optimizer.state}
        return weights, state

    @torch.no_grad()
    def _restore(self, saved: tuple[list[torch.Tensor], dict[int, dict[str, torch.Tensor]]]) -> None:
        """Undo the warm-up steps in place: weights back, Adam's state back (or zeroed, i.e.
        fresh, where the warm-up created it)."""
        weights, state = saved
        for i, (p, w) in enumerate(zip(self.params, weights)):
            p.copy_(w)
            for name, value in self.optimizer.state[p].items():
                if not isinstance(value, torch.Tensor):
                    continue
                if i in state:
                    value.copy_(state[i][name])
                else:
                    value.zero_()


__all__ = ["WARMUP_STEPS", "GraphedStep"]
