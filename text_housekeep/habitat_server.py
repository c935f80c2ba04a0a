"""Housekeep on habitat-sim behind the bridge protocol (:mod:`text_housekeep.bridge`), run in
Housekeep's Python 3.8 interpreter: only the misplaced objects in the house, as ELLM does, and
crosshair grabbing with ELLM's scene parameters. CI runs the protocol on the symbolic backend."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from text_housekeep.backend import FAILED, PICK, PLACE, BackendError, BackendState, Event
from text_housekeep.bridge import hello, protocol_stream, serve
from text_housekeep.symbolic import LOW_LEVEL_ACTIONS, scene_params

DEFAULT_CONFIG = os.path.join("cos_eor", "configs", "local", "igib_v2_nav_sp.yaml")
EPISODES = os.path.join("data", "datasets", "cos_eor_v11_pruned", "{split}", "{scene}.json.gz")
PRUNED_LISTS = ("objs_keys", "objs_cats", "objs_pos", "objs_rot", "objs_files")


def _set(config: Any, dotted: str, value: Any) -> None:
    """Set ``dotted`` under the task config, whichever top-level name the config uses."""
    for root in ("TASK_CONFIG", "BASE_TASK_CONFIG"):
        node = getattr(config, root, None)
        if node is None:
            continue
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = getattr(node, part)
        setattr(node, parts[-1], value)
        return
    raise BackendError(f"the Housekeep config has no TASK_CONFIG to set {dotted} in")


def prune_to_misplaced(episode: Any) -> Any:
    """Keep only the misplaced objects (they come first) in a Housekeep episode object."""
    keep = int(episode.misplaced_count)
    removed = set(episode.objs_keys[keep:])
    for name in PRUNED_LISTS:
        if getattr(episode, name, None) is not None:
            setattr(episode, name, list(getattr(episode, name))[:keep])
    for name in ("start_matrix", "end_matrix", "state_matrix"):
        if getattr(episode, name, None) is not None:
            setattr(episode, name, np.asarray(getattr(episode, name))[:, :keep])
    if getattr(episode, "objects_count", None) is not None:
        episode.objects_count = keep
    for packer in (getattr(episode, "recs_packers", None) or {}).values():
        packer["matches"] = [m for m in packer.get("matches", [])
                             if m["rect"]["id"] not in removed]
    return episode


class HabitatBackend:
    """Housekeep's habitat env for one episode, seen through the backend interface."""

    action_names = LOW_LEVEL_ACTIONS

    def __init__(self, env: Any, episode: Any):
        self.env = env
        self.objects: list[str] = list(episode.objs_keys)
        self.receptacles: list[str] = list(episode.recs_keys)
        self.possible = list(env.habitat_env._config.TASK.POSSIBLE_ACTIONS)
        self.held: int | None = None
        self._last_mapping: list[int | None] = [None] * len(self.objects)

    def reset(self) -> BackendState:
        self.held = None
        return self._state(self.env.reset(), Event())

    def step(self, action: int) -> BackendState:
        if not 0 <= int(action) < len(self.action_names):
            raise BackendError(f"action {action!r} is out of range 0..{len(self.action_names) - 1}")
        name = self.action_names[int(action)]
        args: dict[str, Any] = {"action": self.possible.index(name)}
        if name == "GRAB_RELEASE":
            args["action_args"] = {"iid": -1}  # crosshair grabbing fills the target in
        before = self.held
        observations, _, _, _ = self.env.step(action=args)
        held = self._held(observations)
        mapping = self._mapping()
        event = Event()
        if name == "GRAB_RELEASE":
            if observations.get("fail_action", False):
                event = Event(FAILED, before, reason="habitat: grab/release failed")
            elif before is None and held is not None:
                event = Event(PICK, held, self._last_mapping[held])
            elif before is not None and held is None:
                event = Event(PLACE, before, mapping[before])
        self.held = held
        return self._state(observations, event, mapping)

    def close(self) -> None:
        self.env.close()

    # ---- reading Housekeep's state ---------------------------------------------------------
    @property
    def _task(self) -> Any:
        return self.env.habitat_env._task

    def _key_of_iid(self, iid: int) -> str | None:
        sim_id = self._task.iid_to_sim_obj_id.get(int(iid))
        return None if sim_id is None else self._task.sim_obj_id_to_obj_key.get(sim_id)

    def _held(self, observations: dict[str, Any]) -> int | None:
        sim_id = int(self.env.habitat_env.sim.gripped_object_id)
        if sim_id < 0:
            return None
        key = self._task.sim_obj_id_to_obj_key.get(sim_id)
        return self.objects.index(key) if key in self.objects else None

    def _mapping(self) -> list[int | None]:
        episode = self.env.habitat_env.current_episode
        mapping: list[int | None] = []
        for key in self.objects:
            rec = episode.get_rec(key, episode.state_matrix)
            mapping.append(self.receptacles.index(rec) if rec in self.receptacles else None)
        return mapping

    def _visible(self, observations: dict[str, Any], name: str, keys: list[str]) -> list[int]:
        found = []
        for iid in np.asarray(observations.get(name, [])).reshape(-1).tolist():
            key = self._key_of_iid(iid) if iid else None
            if key in keys and keys.index(key) not in found:
                found.append(keys.index(key))
        return sorted(found)

    def _state(self, observations: dict[str, Any], event: Event,
               mapping: list[int | None] | None = None) -> BackendState:
        mapping = mapping if mapping is not None else self._mapping()
        self._last_mapping = mapping
        objects = [o for o in self._visible(observations, "visible_obj_iids", self.objects)
                   if mapping[o] is not None]
        return BackendState(
            visible_objects=tuple(objects),
            visible_receptacles=tuple(self._visible(observations, "visible_rec_iids",
                                                    self.receptacles)),
            held=self.held, mapping=tuple(mapping), event=event,
            image=np.asarray(observations["rgb"], dtype=np.uint8)[..., :3])


def make_env(root: str, config_path: str, scene: str, split: str, episode_id: int
             ) -> tuple[Any, Any]:
    """Housekeep's RL env on the one chosen episode, and that episode (pruned to its misplaced
    objects). Imports habitat: runs only in the Housekeep interpreter."""
    sys.path.insert(0, root)
    os.chdir(root)  # Housekeep's configs name data by relative paths
    import cos_eor.env.env
    import cos_eor.sim.actions  # noqa: F401 - registers GRAB_RELEASE
    from habitat_baselines.common.environments import get_env_class
    from habitat_baselines.config.default import get_config

    params = scene_params(scene)
    config = get_config(config_path)
    config.defrost()
    _set(config, "DATASET.SPLIT", split)
    _set(config, "DATASET.CONTENT_SCENES", [scene])
    _set(config, "SIMULATOR.TURN_ANGLE", int(params.turn))
    _set(config, "SIMULATOR.RGB_SENSOR.HFOV", int(params.hfov))
    _set(config, "SIMULATOR.SEMANTIC_SENSOR.HFOV", int(params.hfov))
    _set(config, "TASK.ACTIONS.GRAB_RELEASE.GRAB_TYPE", "crosshair")
    _set(config, "TASK.ACTIONS.GRAB_RELEASE.GRAB_DISTANCE", params.reach)
    config.freeze()
    env = get_env_class(config.ENV_NAME)(config)
    chosen = [e for e in env.habitat_env.episodes if int(e.episode_id) == episode_id]
    if not chosen:
        raise BackendError(f"episode {episode_id} is not in Housekeep's {split}/{scene} data")
    env.habitat_env.episodes = [prune_to_misplaced(chosen[0])]
    return env, chosen[0]


def raw_keys(root: str, scene: str, split: str, episode_id: int) -> dict[str, list[str]]:
    """Object (misplaced only) and receptacle keys of the raw episode, for the hello check."""
    path = os.path.join(root, EPISODES.format(split=split, scene=scene))
    with gzip.open(path, "rt") as f:
        for ep in json.load(f)["episodes"]:
            if int(ep["episode_id"]) == episode_id:
                keep = int(ep["misplaced_count"])
                return {"objects": ep["objs_keys"][:keep], "receptacles": ep["recs_keys"]}
    raise BackendError(f"episode {episode_id} is not in {path}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m text_housekeep.habitat_server")
    parser.add_argument("--root", required=True, help="Housekeep checkout with its data")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="Housekeep config (in --root)")
    parser.add_argument("--scene", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--episode-id", type=int, required=True)
    args = parser.parse_args(argv)
    out = protocol_stream()
    root = os.path.abspath(args.root)
    keys = raw_keys(root, args.scene, args.split, args.episode_id)
    env, episode = make_env(root, args.config, args.scene, args.split, args.episode_id)
    backend = HabitatBackend(env, episode)
    if backend.objects != keys["objects"]:
        raise BackendError("pruned habitat episode disagrees with the episode file")
    serve(backend, hello("habitat", backend.action_names, keys["objects"], keys["receptacles"]),
          sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
