"""The symbolic Housekeep backend (HOUSEKEEP.md §3): numpy geometry over the episode's data, no
physics and no meshes, so runs need no habitat-sim; its rules are tabled in docs/housekeep.md."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from text_housekeep import sketch
from text_housekeep.backend import FAILED, PICK, PLACE, BackendError, BackendState, Event
from text_housekeep.data import Episode
from text_housekeep.shelves import ShelfPacker

LOW_LEVEL_ACTIONS = ("MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT", "LOOK_UP", "LOOK_DOWN",
                     "GRAB_RELEASE")
ACTION_MODES = ("lowlevel", "highlevel")
PLACE_ACTION = "place"
POINT_RADIUS, EDGE_RADIUS = 1.0, 0.5
RECEPTACLE_HEIGHT, OBJECT_EXTENT = 0.6, 0.25  # metres, for the picture


@dataclass(frozen=True)
class SceneParams:
    """Agent and sensor parameters (degrees and metres)."""

    turn: float
    reach: float
    hfov: float
    move: float = 0.25
    look: float = 10.0
    max_pitch: float = 30.0
    start_pitch: float = -30.0
    view_distance: float = 5.0
    eye_height: float = 1.5
    crosshair: float = 20.0


RS_INT_PARAMS = SceneParams(turn=20.0, reach=3.0, hfov=180.0)  # ELLM's rs_int config
HOUSEKEEP_PARAMS = SceneParams(turn=10.0, reach=1.5, hfov=90.0)  # Housekeep's other scenes


def scene_params(scene: str) -> SceneParams:
    return RS_INT_PARAMS if scene.lower() == "rs_int" else HOUSEKEEP_PARAMS


def spanning_edges(points: np.ndarray) -> list[tuple[int, int]]:
    """Edges of the Euclidean minimum spanning tree of ``points`` [n, 2] (Prim, O(n^2))."""
    n = len(points)
    if n < 2:
        return []
    dist = np.linalg.norm(points[:, None] - points[None], axis=-1)
    inside = np.zeros(n, dtype=bool)
    inside[0] = True
    best, parent = dist[0].copy(), np.zeros(n, dtype=int)
    edges = []
    for _ in range(n - 1):
        candidates = np.where(inside, np.inf, best)
        j = int(np.argmin(candidates))
        edges.append((int(parent[j]), j))
        inside[j] = True
        closer = dist[j] < best
        best[closer], parent[closer] = dist[j][closer], j
    return edges


class Floor:
    """Walkable floor and rooms of an episode."""

    def __init__(self, episode: Episode):
        recs = episode.receptacles
        start = np.array([episode.start_position[0], episode.start_position[2]])
        nav = np.array([[r.nav[0], r.nav[2]] for r in recs]).reshape(-1, 2)
        self.points = np.unique(np.vstack([nav, start[None]]).round(3), axis=0)
        edges = spanning_edges(self.points)
        self.seg_a = np.array([self.points[i] for i, _ in edges]).reshape(-1, 2)
        self.seg_b = np.array([self.points[j] for _, j in edges]).reshape(-1, 2)
        self.rooms = sorted({r.room for r in recs if r.room is not None})
        with_room = [i for i, r in enumerate(recs) if r.room is not None]
        self.room_nav = nav[with_room].reshape(-1, 2)
        self.room_of_nav = np.array([self.rooms.index(recs[i].room) for i in with_room])

    def walkable(self, x: float, z: float) -> bool:
        q = np.array([x, z])
        if np.min(np.linalg.norm(self.points - q, axis=1)) <= POINT_RADIUS:
            return True
        if not len(self.seg_a):
            return False
        ab = self.seg_b - self.seg_a
        t = np.clip(np.einsum("ij,ij->i", q - self.seg_a, ab)
                    / np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12), 0.0, 1.0)
        return bool(np.min(np.linalg.norm(self.seg_a + t[:, None] * ab - q, axis=1))
                    <= EDGE_RADIUS)

    def room_at(self, x: float, z: float) -> int:
        """Index into ``rooms`` of the room at (x, z); -1 when the scene has no rooms."""
        if not len(self.room_nav):
            return -1
        d = np.linalg.norm(self.room_nav - np.array([x, z]), axis=1)
        return int(self.room_of_nav[int(np.argmin(d))])


class SymbolicBackend:
    """The default Housekeep backend."""

    def __init__(self, episode: Episode, action_mode: str = "lowlevel",
                 params: SceneParams | None = None):
        if action_mode not in ACTION_MODES:
            raise ValueError(f"env_spec.housekeep_action_mode={action_mode!r} is invalid: "
                             f"expected one of {', '.join(ACTION_MODES)}")
        self.episode = episode
        self.mode = action_mode
        self.params = params or scene_params(episode.scene)
        self.floor = Floor(episode)
        recs = episode.receptacles
        self.objects = episode.scene_objects
        self.rec_pos = np.array([r.position for r in recs]).reshape(-1, 3)
        self.rec_fp = np.array([r.footprint for r in recs]).reshape(-1, 4)
        self.rec_radius = 0.5 * np.hypot(self.rec_fp[:, 2], self.rec_fp[:, 3])
        self.rec_room = np.array([-1 if r.room is None else self.floor.rooms.index(r.room)
                                  for r in recs], dtype=int)
        self.rec_shade = [sketch.shade(r.category, False) for r in recs]
        self.obj_shade = [sketch.shade(o.category, True) for o in self.objects]
        self.obj_radius = np.array([0.5 * math.hypot(*o.size) for o in self.objects])
        if action_mode == "lowlevel":
            self.action_names: tuple[str, ...] = LOW_LEVEL_ACTIONS
        else:
            self.action_names = tuple([f"go to {r.key}" for r in recs]
                                      + [f"pick {o.key}" for o in self.objects] + [PLACE_ACTION])
        self.reset()

    def reset(self) -> BackendState:
        ep, p = self.episode, self.params
        self.x, self.floor_y, self.z = ep.start_position
        self.yaw, self.pitch = ep.start_yaw, p.start_pitch
        self.held: int | None = None
        self.at: int | None = None  # highlevel: the receptacle the agent stands at
        self.mapping: list[int | None] = [ep.start[o] for o in range(len(self.objects))]
        self.obj_pos = np.array([o.position for o in self.objects]).reshape(-1, 3)
        self.packers = [ShelfPacker(fp[2], fp[3]) for fp in self.rec_fp]
        for o, obj in enumerate(self.objects):
            self.packers[self.mapping[o]].add(o, obj.size, force=True)
        return self._observe(Event())

    def step(self, action: int) -> BackendState:
        index = action_index(action, len(self.action_names))
        if self.mode == "lowlevel":
            event = self._low_level(self.action_names[index])
        else:
            event = self._high_level(index)
        return self._observe(event)

    def close(self) -> None:
        pass

    def _low_level(self, name: str) -> Event:
        p = self.params
        if name == "MOVE_FORWARD":
            fx, fz = self._forward()
            x, z = self.x + p.move * fx, self.z + p.move * fz
            if self.floor.walkable(x, z):
                self.x, self.z = x, z
        elif name in ("TURN_LEFT", "TURN_RIGHT"):
            self.yaw += p.turn if name == "TURN_LEFT" else -p.turn
            self.yaw = (self.yaw + 180.0) % 360.0 - 180.0
        elif name in ("LOOK_UP", "LOOK_DOWN"):
            delta = p.look if name == "LOOK_UP" else -p.look
            self.pitch = float(np.clip(self.pitch + delta, -p.max_pitch, p.max_pitch))
        else:
            return self._grab_release()
        return Event()

    def _grab_release(self) -> Event:
        view = self._view()
        holding = self.held is not None
        if holding:
            kinds = view.recs
            offset = np.maximum(0.0, view.rec_ray[kinds] - view.rec_angular_radius[kinds])
            reach = view.rec_dist[kinds]
        else:
            kinds = view.objs
            offset = np.maximum(0.0, view.obj_ray[kinds] - view.obj_angular_radius[kinds])
            reach = view.obj_dist[kinds]
        under = np.flatnonzero(offset <= self.params.crosshair)
        if not len(under):
            return Event(FAILED, self.held, reason="nothing under the crosshair")
        best = under[np.lexsort((reach[under], offset[under]))[0]]
        target = int(kinds[best])
        if reach[best] > self.params.reach:
            return Event(FAILED, self.held, target if holding else None, reason="out of reach")
        if holding:
            return self._place(target)
        return self._pick(target)

    def _high_level(self, action: int) -> Event:
        n_recs, n_objs = len(self.episode.receptacles), len(self.objects)
        if action < n_recs:
            self._go_to(action)
            return Event()
        if action < n_recs + n_objs:
            obj = action - n_recs
            if self.held is not None:
                return Event(FAILED, self.held, reason="already holding an object")
            if self.at is None or self.mapping[obj] != self.at:
                return Event(FAILED, obj, self.at, reason="object not on this receptacle")
            return self._pick(obj)
        if self.held is None:
            return Event(FAILED, reason="holding nothing")
        if self.at is None:
            return Event(FAILED, self.held, reason="not at a receptacle")
        return self._place(self.at)

    def _go_to(self, rec: int) -> None:
        r = self.episode.receptacles[rec]
        self.x, self.z = r.nav[0], r.nav[2]
        dx, dz = r.position[0] - self.x, r.position[2] - self.z
        self.yaw = math.degrees(math.atan2(-dx, -dz))
        elevation = math.degrees(math.atan2(r.position[1] - self._eye_y(), math.hypot(dx, dz)))
        self.pitch = float(np.clip(elevation, -self.params.max_pitch, self.params.max_pitch))
        self.at = rec

    def _pick(self, obj: int) -> Event:
        rec = self.mapping[obj]
        self.packers[rec].remove(obj)
        self.mapping[obj], self.held = None, obj
        return Event(PICK, obj, rec)

    def _place(self, rec: int) -> Event:
        obj = self.held
        slot = self.packers[rec].add(obj, self.objects[obj].size)
        if slot is None:
            return Event(FAILED, obj, rec, reason="no room on the receptacle")
        x0, z0 = self.rec_fp[rec, 0], self.rec_fp[rec, 1]
        self.obj_pos[obj] = (x0 + slot[0], self.rec_pos[rec, 1], z0 + slot[1])
        self.mapping[obj], self.held = rec, None
        return Event(PLACE, obj, rec)

    def _eye_y(self) -> float:
        return self.floor_y + self.params.eye_height

    def _forward(self) -> tuple[float, float]:
        r = math.radians(self.yaw)
        return -math.sin(r), -math.cos(r)

    def _angles(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bearing (left > 0) and elevation in degrees, and 3-D distance from the eye."""
        r = math.radians(self.yaw)
        fx, fz, lx, lz = -math.sin(r), -math.cos(r), -math.cos(r), math.sin(r)
        dx, dy, dz = pos[:, 0] - self.x, pos[:, 1] - self._eye_y(), pos[:, 2] - self.z
        horizontal = np.hypot(dx, dz)
        bearing = np.degrees(np.arctan2(dx * lx + dz * lz, dx * fx + dz * fz))
        elevation = np.degrees(np.arctan2(dy, horizontal))
        return bearing, elevation, np.maximum(np.hypot(horizontal, dy), 1e-6)

    def _ray_angle(self, bearing: np.ndarray, elevation: np.ndarray) -> np.ndarray:
        """3-D angle in degrees between the view ray and the given directions."""
        b, e, p = np.radians(bearing), np.radians(elevation), math.radians(self.pitch)
        cos = np.cos(e) * math.cos(p) * np.cos(b) + np.sin(e) * math.sin(p)
        return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))

    def _view(self) -> _View:
        p = self.params
        room = self.floor.room_at(self.x, self.z)
        rb, re, rd = self._angles(self.rec_pos)
        x0, z0 = self.rec_fp[:, 0], self.rec_fp[:, 1]
        gap_x = np.maximum(np.maximum(x0 - self.x, self.x - (x0 + self.rec_fp[:, 2])), 0.0)
        gap_z = np.maximum(np.maximum(z0 - self.z, self.z - (z0 + self.rec_fp[:, 3])), 0.0)
        rec_dist = np.hypot(gap_x, gap_z)
        rec_half = np.degrees(np.arctan2(self.rec_radius, rd))
        rec_ok = ((rec_dist <= p.view_distance) & (np.abs(rb) <= p.hfov / 2 + rec_half)
                  & ((self.rec_room == room) | (self.rec_room < 0)))
        on = np.array([m is not None for m in self.mapping], dtype=bool)
        where = np.array([m if m is not None else 0 for m in self.mapping], dtype=int)
        ob, oe, od = self._angles(self.obj_pos)
        obj_dist = np.hypot(self.obj_pos[:, 0] - self.x, self.obj_pos[:, 2] - self.z)
        obj_half = np.degrees(np.arctan2(self.obj_radius, od))
        obj_room = self.rec_room[where]
        obj_ok = (on & (obj_dist <= p.view_distance) & (np.abs(ob) <= p.hfov / 2 + obj_half)
                  & ((obj_room == room) | (obj_room < 0)))
        return _View(
            recs=np.flatnonzero(rec_ok), objs=np.flatnonzero(obj_ok),
            rec_dist=rec_dist, obj_dist=obj_dist,
            rec_ray=self._ray_angle(rb, re), obj_ray=self._ray_angle(ob, oe),
            rec_angular_radius=rec_half, obj_angular_radius=obj_half,
            rec_angles=(rb, re, rd), obj_angles=(ob, oe, od))

    def _observe(self, event: Event) -> BackendState:
        view = self._view()
        sprites = []
        rb, re, rd = view.rec_angles
        for r in view.recs:
            size = max(self.rec_fp[r, 2], self.rec_fp[r, 3])
            sprites.append(sketch.Sprite(
                rb[r], re[r], _angular(size, rd[r]), _angular(RECEPTACLE_HEIGHT, rd[r]), rd[r],
                self.rec_shade[r]))
        ob, oe, od = view.obj_angles
        for o in view.objs:
            extent = _angular(OBJECT_EXTENT, od[o])
            sprites.append(sketch.Sprite(ob[o], oe[o], extent, extent, od[o], self.obj_shade[o]))
        held_shade = None if self.held is None else self.obj_shade[self.held]
        image = sketch.render(sprites, self.pitch, self.params.hfov, held_shade)
        return BackendState(
            visible_objects=tuple(int(o) for o in view.objs),
            visible_receptacles=tuple(int(r) for r in view.recs),
            held=self.held, mapping=tuple(self.mapping), event=event, image=image)


@dataclass(frozen=True)
class _View:
    recs: np.ndarray
    objs: np.ndarray
    rec_dist: np.ndarray
    obj_dist: np.ndarray
    rec_ray: np.ndarray
    obj_ray: np.ndarray
    rec_angular_radius: np.ndarray
    obj_angular_radius: np.ndarray
    rec_angles: tuple[np.ndarray, np.ndarray, np.ndarray]
    obj_angles: tuple[np.ndarray, np.ndarray, np.ndarray]


def _angular(size: float, distance: float) -> float:
    return math.degrees(2.0 * math.atan2(size / 2.0, distance))


def action_index(action: object, count: int) -> int:
    """``action`` as an index into ``count`` actions; BackendError when it is not one."""
    try:
        index = int(action)  # type: ignore[call-overload]
        valid = index == action and 0 <= index < count
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise BackendError(f"action {action!r} is out of range: valid ids are 0..{count - 1}")
    return index
