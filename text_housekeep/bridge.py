"""A backend in another process, over a pipe, for habitat-sim, which needs Python 3.8: one JSON
object per line (docs/housekeep.md); ``python -m text_housekeep.bridge`` serves the symbolic
backend, which the tests use as the child. Python 3.8-clean."""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import subprocess
import sys
import traceback
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from text_housekeep.backend import Backend, BackendError, BackendState, Event
from text_housekeep.data import Episode

PROTOCOL = 1
STARTUP_TIMEOUT = 600.0  # habitat loads a scene in about a minute; be generous
STEP_TIMEOUT = 120.0


def encode_state(state: BackendState) -> dict[str, Any]:
    image = np.ascontiguousarray(state.image, dtype=np.uint8)
    return {
        "visible_objects": list(state.visible_objects),
        "visible_receptacles": list(state.visible_receptacles),
        "held": state.held,
        "mapping": list(state.mapping),
        "event": {"kind": state.event.kind, "obj": state.event.obj, "rec": state.event.rec,
                  "reason": state.event.reason},
        "image": {"shape": list(image.shape),
                  "data": base64.b64encode(image.tobytes()).decode("ascii")},
    }


def decode_state(data: dict[str, Any]) -> BackendState:
    image = data["image"]
    pixels = np.frombuffer(base64.b64decode(image["data"]), dtype=np.uint8)
    return BackendState(
        visible_objects=tuple(int(o) for o in data["visible_objects"]),
        visible_receptacles=tuple(int(r) for r in data["visible_receptacles"]),
        held=data["held"], mapping=tuple(data["mapping"]), event=Event(**data["event"]),
        image=pixels.reshape(image["shape"]).copy())


def hello(name: str, action_names: Sequence[str], objects: Sequence[str],
          receptacles: Sequence[str]) -> dict[str, Any]:
    """The server's first line: who it is, its actions, and the episode's keys (objects in the
    house, misplaced first; receptacles in the episode's order)."""
    return {"protocol": PROTOCOL, "backend": name, "action_names": list(action_names),
            "objects": list(objects), "receptacles": list(receptacles)}


def protocol_stream() -> IO[str]:
    """The real stdout for protocol lines; fd 1 and ``sys.stdout`` then point at stderr, so
    stray prints (Python or C) cannot corrupt the protocol."""
    stream = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def serve(backend: Backend, greeting: dict[str, Any], inp: IO[str], out: IO[str]) -> None:
    """Send ``greeting``, then answer requests from ``inp`` on ``out`` until close or EOF."""
    out.write(json.dumps(greeting) + "\n")
    out.flush()
    for line in inp:
        if not line.strip():
            continue
        op = None
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "close":
                backend.close()
                reply: dict[str, Any] = {"ok": True}
            elif op == "reset":
                reply = {"state": encode_state(backend.reset())}
            elif op == "step":
                reply = {"state": encode_state(backend.step(request["action"]))}
            else:
                reply = {"error": f"unknown op {op!r}"}
        except (BackendError, ValueError, KeyError, TypeError, AttributeError) as err:
            reply = {"error": f"{type(err).__name__}: {err}"}
        except Exception as err:  # noqa: BLE001 - report any simulator failure to the parent
            traceback.print_exc(file=sys.stderr)
            reply = {"error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if op == "close":
            return


class ProcessBackend:
    """A backend served by a child process, checked to simulate ``episode`` (the same keys)."""

    def __init__(self, command: Sequence[str], episode: Episode,
                 env: dict[str, str] | None = None, startup_timeout: float = STARTUP_TIMEOUT,
                 step_timeout: float = STEP_TIMEOUT):
        self.command = list(command)
        self.step_timeout = step_timeout
        self._buffer = b""
        try:
            self._proc = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, env=env)
        except OSError as err:
            raise BackendError(f"cannot start the backend process {self.command[0]}: "
                               f"{err}") from None
        info = self._read(startup_timeout, "the hello message")
        if info.get("protocol") != PROTOCOL:
            self.close()
            raise BackendError(f"backend process speaks protocol {info.get('protocol')!r}, "
                               f"expected {PROTOCOL}")
        want = hello_keys(episode)
        got = {"objects": info.get("objects"), "receptacles": info.get("receptacles")}
        if got != want:
            self.close()
            raise BackendError("backend process simulates a different episode: "
                               f"objects {got['objects']} vs {want['objects']}")
        self.name = str(info.get("backend"))
        self.action_names = tuple(info["action_names"])

    def reset(self) -> BackendState:
        return self._state(self._request({"op": "reset"}))

    def step(self, action: int) -> BackendState:
        try:
            action = int(action)
        except (TypeError, ValueError):
            raise BackendError(f"action {action!r} is not an integer id") from None
        return self._state(self._request({"op": "step", "action": action}))

    def close(self) -> None:
        proc = self._proc
        if proc.poll() is None:
            try:
                proc.stdin.write(b'{"op": "close"}\n')
                proc.stdin.flush()
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()

    def __del__(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _state(self, reply: dict[str, Any]) -> BackendState:
        try:
            return decode_state(reply["state"])
        except (KeyError, TypeError, ValueError) as err:
            raise BackendError(f"malformed state from the backend process: {err}") from None

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._proc.poll() is not None:
            raise self._died()
        try:
            self._proc.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
            self._proc.stdin.flush()
        except OSError:
            raise self._died() from None
        reply = self._read(self.step_timeout, f"the reply to {message['op']}")
        if "error" in reply:
            raise BackendError(f"backend process error: {reply['error']}")
        return reply

    def _read(self, timeout: float, what: str) -> dict[str, Any]:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                self._proc.kill()
                raise BackendError(f"backend process sent no {what} within {timeout:.0f} s")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self._proc.wait()
                raise self._died()
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self._proc.kill()
            raise BackendError(f"backend process broke the protocol (not a JSON object): "
                               f"{line[:200]!r}")
        return message

    def _died(self) -> BackendError:
        code = self._proc.poll()
        return BackendError(f"backend process {' '.join(self.command[:3])} exited with code "
                            f"{code}; its error output is above")


HABITAT_PYTHON_VAR = "ELLM_HABITAT_PYTHON"
HOUSEKEEP_ROOT_VAR = "ELLM_HOUSEKEEP_ROOT"


def habitat_backend(episode: Episode, action_mode: str = "lowlevel") -> ProcessBackend:
    """Housekeep on habitat-sim, in the Python 3.8 interpreter and Housekeep checkout named by
    ``$ELLM_HABITAT_PYTHON`` and ``$ELLM_HOUSEKEEP_ROOT`` (set-up: docs/housekeep.md)."""
    if action_mode != "lowlevel":
        raise BackendError("env_spec.housekeep_action_mode=highlevel exists only for the "
                           "symbolic backend; the habitat backend has the 6 low-level actions")
    python, root = os.environ.get(HABITAT_PYTHON_VAR), os.environ.get(HOUSEKEEP_ROOT_VAR)
    if not python or not root:
        raise BackendError(
            f"env_spec.housekeep_backend=habitat needs ${HABITAT_PYTHON_VAR} (a Python 3.8 "
            f"interpreter with habitat-sim 0.2.1) and ${HOUSEKEEP_ROOT_VAR} (a Housekeep "
            "checkout with its data); see docs/housekeep.md")
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    command = [python, "-m", "text_housekeep.habitat_server", "--root", root,
               "--scene", episode.scene, "--split", episode.split,
               "--episode-id", str(episode.episode_id)]
    return ProcessBackend(command, episode, env=env)


def hello_keys(episode: Episode) -> dict[str, list[str]]:
    return {"objects": [o.key for o in episode.scene_objects],
            "receptacles": [r.key for r in episode.receptacles]}


def main(argv: Sequence[str] | None = None) -> int:
    from text_housekeep.data import HousekeepDataError, load_episode
    from text_housekeep.symbolic import SymbolicBackend

    parser = argparse.ArgumentParser(
        prog="python -m text_housekeep.bridge",
        description="Serve the symbolic Housekeep backend over stdin/stdout (bridge protocol).")
    parser.add_argument("--task", required=True, help="scene, e.g. pomaria_2_int")
    parser.add_argument("--ep-num", type=int, default=0, help="episode after the seed-100 shuffle")
    parser.add_argument("--data", default=None, help="converted scene directory")
    parser.add_argument("--action-mode", default="lowlevel", choices=("lowlevel", "highlevel"))
    args = parser.parse_args(argv)
    out = protocol_stream()
    try:
        episode = load_episode(args.task, args.ep_num, args.data)
    except HousekeepDataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    backend = SymbolicBackend(episode, args.action_mode)
    keys = hello_keys(episode)
    serve(backend, hello("symbolic", backend.action_names, keys["objects"], keys["receptacles"]),
          sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
