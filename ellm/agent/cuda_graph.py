"""The learner's whole gradient step as one CUDA graph (``compile=graph``).

A small DQN's update is bound by kernel launches (docs/scale.md); warm-up steps are undone in
place so the first update equals an eager one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Inputs = Sequence[torch.Tensor | None]

WARMUP_STEPS = 3


class GraphedStep:
    """Replays ``step(*inputs) -> metrics`` (backward pass and optimiser step) as one CUDA graph."""

    def __init__(self, step: Callable[..., dict[str, torch.Tensor]],
                 optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]):
        if not all(g.get("capturable") for g in optimizer.param_groups):
            raise ValueError("a graphed step needs an optimiser built with capturable=True")
        self.step, self.optimizer, self.params = step, optimizer, list(params)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: tuple | None = None
        self.static_in: list[torch.Tensor | None] = []
        self.static_out: dict[str, torch.Tensor] = {}
        self.recordings = 0

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
        """Undo the warm-up steps in place: weights back, Adam's state back (or zeroed where new).
        """
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
