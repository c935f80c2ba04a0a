"""Data files in pickle format, read without unpickling.

Some files our users are handed exist only as pickles: Housekeep's ``amt_ranks.npy`` (a NumPy
object array holding a dict) and the original ELLM's answer cache. Unpickling runs whatever code
the file's author chose, so :func:`loads` never calls :mod:`pickle`: it walks the opcodes
(:mod:`pickletools`) and builds only data (None, bools, numbers, strings, bytes, tuples, lists,
dicts, sets) and NumPy arrays of plain dtypes. Any other global, and any opcode that would call
code outside that (``REDUCE`` of anything but NumPy's array and dtype reconstructors, ``INST``,
``OBJ``, ``NEWOBJ``, persistent ids, extensions), stops the read with :class:`PickleDataError`.

A pickle of a few hundred bytes can reference one object many times over, level after level:
data small in memory but exponentially large to hash, compare or walk. So a read refuses data
past :data:`MAX_NODES` nodes with every reference counted where it is reached, nested past
:data:`MAX_DEPTH`, or whose reading (hashing keys, rebuilding arrays) visits more nodes than a
few times that.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

# Far above what these files hold (the original ELLM cache: ~7 nodes an answer; Housekeep's
# rankings: tens of thousands), far below what hangs a reader.
MAX_NODES: Final = 10_000_000
MAX_DEPTH: Final = 100
_MAX_VISITS: Final = 5 * MAX_NODES
_MARK = object()
_RECONSTRUCT = ("_reconstruct",)  # numpy.core.multiarray._reconstruct, numpy 1 and 2
_NDARRAY = ("ndarray",)
_DTYPE = ("dtype",)
_FROMBUFFER = ("_frombuffer",)  # protocol 5's in-band arrays
_SET, _FROZENSET, _ENCODE = ("set",), ("frozenset",), ("encode",)  # protocols 0-3
_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _DTYPE,
    ("builtins", "set"): _SET, ("__builtin__", "set"): _SET,
    ("builtins", "frozenset"): _FROZENSET, ("__builtin__", "frozenset"): _FROZENSET,
    ("_codecs", "encode"): _ENCODE,
}
# Dtype kinds an array may have: booleans, integers, floats, complex, strings, and objects (whose
# items are decoded by this module as everything else is).
_DTYPE_KINDS = set("biufcUSO")


class PickleDataError(ValueError):
    """The pickle holds something other than plain data, or is malformed."""


class _Budget:
    """The nodes one read may still visit."""

    def __init__(self) -> None:
        self.left = _MAX_VISITS

    def spend(self, nodes: int) -> None:
        self.left -= nodes
        if self.left < 0:
            raise PickleDataError(f"reading it visits over {_MAX_VISITS:,} items: its shared "
                                  "references make it far larger than its size")


class _Array:
    """An array being rebuilt: ``_reconstruct(ndarray, shape, typecode)`` then its state."""

    def __init__(self, budget: _Budget) -> None:
        self.value: np.ndarray | None = None
        self.budget = budget

    def build(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 5):
            raise PickleDataError("an array's state is not (version, shape, dtype, fortran, data)")
        _version, shape, dtype, fortran, data = state
        if not (isinstance(shape, tuple) and all(isinstance(n, int) and n >= 0 for n in shape)
                and isinstance(dtype, np.dtype)):
            raise PickleDataError("an array's shape or dtype is malformed")
        order = "F" if fortran else "C"
        count = int(np.prod(shape, dtype=np.int64))
        if dtype.kind == "O":
            if not isinstance(data, list) or len(data) != count:
                raise PickleDataError("an object array's items do not match its shape")
            flat = np.empty(count, dtype=object)
            flat[:] = [_resolve(item, self.budget) for item in data]
            self.value = flat.reshape(shape, order=order)
            return
        if not isinstance(data, bytes | bytearray) or len(data) != count * dtype.itemsize:
            raise PickleDataError("an array's data does not match its shape and dtype")
        self.value = np.frombuffer(bytes(data), dtype=dtype).reshape(shape, order=order).copy()


def _dtype(args: Any) -> np.dtype:
    if not (isinstance(args, tuple) and args and isinstance(args[0], str)):
        raise PickleDataError("a dtype's arguments are malformed")
    try:
        dtype = np.dtype(args[0])
    except TypeError as err:
        raise PickleDataError(f"unknown dtype {args[0]!r}") from err
    if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None:
        raise PickleDataError(f"dtype {dtype} is not allowed")
    return dtype


def _dtype_state(dtype: np.dtype, state: Any) -> np.dtype:
    if not (isinstance(state, tuple) and len(state) >= 2 and state[1] in ("<", ">", "|", "=")):
        raise PickleDataError("a dtype's state is malformed")
    return dtype if state[1] in ("|", "=") else dtype.newbyteorder(state[1])


def _resolve(value: Any, budget: _Budget, done: dict[int, Any] | None = None) -> Any:
    """Arrays finished, inside containers too (a memo may hand out an array before its state).
    Each object is resolved once (``done``, by id): a pickle that reuses one list many times
    over stays the size it was, instead of growing by copies."""
    done = {} if done is None else done
    key = id(value)
    budget.spend(1)
    if key in done:
        return done[key]
    if isinstance(value, _Array):
        if value.value is None:
            raise PickleDataError("an array was never given its data")
        out: Any = value.value
    elif isinstance(value, list):
        out = [_resolve(v, budget, done) for v in value]
    elif isinstance(value, tuple):
        out = tuple(_resolve(v, budget, done) for v in value)
    elif isinstance(value, dict):
        out = {_resolve(k, budget, done): _resolve(v, budget, done) for k, v in value.items()}
    elif isinstance(value, set | frozenset):
        out = type(value)(_resolve(v, budget, done) for v in value)
    else:
        return value
    done[key] = out
    return out


def _check_size(root: Any, budget: _Budget) -> None:
    """Refuse ``root`` past MAX_NODES nodes with every shared reference counted where it is
    reached (what ``==``, ``json.dumps`` or a walk visits) or nested past MAX_DEPTH; each
    container is walked once."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> (nodes, height) of a container walked
    entered: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        value, leaving = stack.pop()
        children = _children(value)
        budget.spend(1)
        if children is None or (not leaving and id(value) in sizes):
            continue
        if not leaving:
            if id(value) in entered:
                raise PickleDataError("a container holds itself")
            entered.add(id(value))
            stack.append((value, True))
            stack.extend((child, False) for child in children)
            continue
        nodes, height = 1, 1
        for child in children:
            below = sizes.get(id(child), (1, 0))
            nodes, height = nodes + below[0], max(height, below[1] + 1)
        if nodes > MAX_NODES:
            raise PickleDataError(f"it holds over {MAX_NODES:,} items once its shared "
                                  "references are counted where they are used")
        if height > MAX_DEPTH:
            raise PickleDataError(f"it nests deeper than {MAX_DEPTH} levels")
        sizes[id(value)] = (nodes, height)


def _children(value: Any) -> list[Any] | None:
    """The items of a container (a dict's keys and values), or None for anything else."""
    if isinstance(value, _Array):
        value = value.value
    if isinstance(value, dict):
        return [part for item in value.items() for part in item]
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    if isinstance(value, np.ndarray) and value.dtype == object:
        return list(value.flat)
    return None


class _Machine:
    """The pickle virtual machine, for data opcodes only."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.budget = _Budget()
        # The nodes of each tuple and frozenset made, which hashing it visits (kept with it, so
        # that its id is not reused).
        self.nodes: dict[int, tuple[Any, int]] = {}
        self.ops: dict[str, Callable[[Any], None]] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")}

    def run(self, data: bytes) -> Any:
        import pickletools

        try:
            for opcode, arg, _pos in pickletools.genops(io.BytesIO(data)):
                handler = self.ops.get(opcode.name)
                if handler is None:
                    raise PickleDataError(f"opcode {opcode.name} is not plain data")
                if opcode.name == "STOP":
                    if len(self.stack) != 1:
                        raise PickleDataError("the pickle ends with a malformed stack")
                    _check_size(self.stack[-1], self.budget)  # then resolving cannot recurse deep
                    return _resolve(self.stack.pop(), self.budget)
                handler(arg)
        except PickleDataError:
            raise
        except (ValueError, IndexError, KeyError, TypeError, RecursionError) as err:
            raise PickleDataError(f"malformed pickle: {type(err).__name__}: {err}") from None
        raise PickleDataError("the pickle has no STOP opcode")

    def pop_mark(self) -> list[Any]:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is _MARK:
                items = self.stack[i + 1:]
                del self.stack[i:]
                return items
        raise PickleDataError("no MARK on the stack")

    def push(self, value: Any) -> None:
        self.stack.append(value)

    # framing and markers
    def op_PROTO(self, _arg: Any) -> None: ...
    def op_FRAME(self, _arg: Any) -> None: ...
    def op_STOP(self, _arg: Any) -> None: ...
    def op_MARK(self, _arg: Any) -> None: self.push(_MARK)
    def op_POP(self, _arg: Any) -> None: self.stack.pop()
    def op_POP_MARK(self, _arg: Any) -> None: self.pop_mark()
    def op_DUP(self, _arg: Any) -> None: self.push(self.stack[-1])

    # scalars: pickletools has decoded the argument already
    def op_NONE(self, _arg: Any) -> None: self.push(None)
    def op_NEWTRUE(self, _arg: Any) -> None: self.push(True)
    def op_NEWFALSE(self, _arg: Any) -> None: self.push(False)

    def scalar(self, arg: Any) -> None:
        self.push(arg)

    op_INT = op_BININT = op_BININT1 = op_BININT2 = op_LONG = op_LONG1 = op_LONG4 = scalar
    op_FLOAT = op_BINFLOAT = scalar
    op_STRING = op_BINSTRING = op_SHORT_BINSTRING = scalar
    op_UNICODE = op_BINUNICODE = op_SHORT_BINUNICODE = op_BINUNICODE8 = scalar
    op_BINBYTES = op_SHORT_BINBYTES = op_BINBYTES8 = scalar

    def op_BYTEARRAY8(self, arg: Any) -> None: self.push(bytearray(arg))

    # containers
    def op_EMPTY_TUPLE(self, _arg: Any) -> None: self.push(())
    def op_TUPLE(self, _arg: Any) -> None: self.push(self.made(tuple(self.pop_mark())))

    def op_TUPLE1(self, _arg: Any) -> None:
        self.stack[-1:] = [self.made(tuple(self.stack[-1:]))]

    def op_TUPLE2(self, _arg: Any) -> None:
        self.stack[-2:] = [self.made(tuple(self.stack[-2:]))]

    def op_TUPLE3(self, _arg: Any) -> None:
        self.stack[-3:] = [self.made(tuple(self.stack[-3:]))]

    def made(self, value: tuple[Any, ...] | frozenset[Any]) -> Any:
        """``value``, its nodes noted: one, plus those of its tuples and frozensets."""
        self.budget.spend(len(value))
        self.nodes[id(value)] = (value, 1 + sum(self.node_count(v) for v in value))
        return value

    def node_count(self, value: Any) -> int:
        known = self.nodes.get(id(value))
        return known[1] if known is not None and known[0] is value else 1

    def hashable(self, key: Any) -> Any:
        """``key``, once hashing it fits the budget (hashing a tuple walks all it reaches)."""
        self.budget.spend(self.node_count(key))
        return _hashable(key)

    def op_EMPTY_LIST(self, _arg: Any) -> None: self.push([])
    def op_LIST(self, _arg: Any) -> None: self.push(self.pop_mark())

    def op_APPEND(self, _arg: Any) -> None:
        value = self.stack.pop()
        self.list_at(-1).append(value)

    def op_APPENDS(self, _arg: Any) -> None:
        items = self.pop_mark()
        self.list_at(-1).extend(items)

    def op_EMPTY_DICT(self, _arg: Any) -> None: self.push({})

    def op_DICT(self, _arg: Any) -> None:
        items = self.pop_mark()
        self.push(dict(zip(map(self.hashable, items[::2]), items[1::2], strict=True)))

    def op_SETITEM(self, _arg: Any) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        self.dict_at(-1)[self.hashable(key)] = value

    def op_SETITEMS(self, _arg: Any) -> None:
        items = self.pop_mark()
        target = self.dict_at(-1)
        for key, value in zip(items[::2], items[1::2], strict=True):
            target[self.hashable(key)] = value

    def op_EMPTY_SET(self, _arg: Any) -> None: self.push(set())

    def op_ADDITEMS(self, _arg: Any) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        if not isinstance(target, set):
            raise PickleDataError("ADDITEMS on something other than a set")
        target.update(self.hashable(v) for v in items)

    def op_FROZENSET(self, _arg: Any) -> None:
        self.push(self.made(frozenset(self.hashable(v) for v in self.pop_mark())))

    def list_at(self, index: int) -> list[Any]:
        target = self.stack[index]
        if not isinstance(target, list):
            raise PickleDataError("APPEND on something other than a list")
        return target

    def dict_at(self, index: int) -> dict[Any, Any]:
        target = self.stack[index]
        if not isinstance(target, dict):
            raise PickleDataError("SETITEM on something other than a dict")
        return target

    # the memo
    def op_MEMOIZE(self, _arg: Any) -> None: self.memo[len(self.memo)] = self.stack[-1]

    def put(self, arg: Any) -> None:
        self.memo[int(arg)] = self.stack[-1]

    def get(self, arg: Any) -> None:
        self.push(self.memo[int(arg)])

    op_PUT = op_BINPUT = op_LONG_BINPUT = put
    op_GET = op_BINGET = op_LONG_BINGET = get

    # NumPy's arrays and dtypes, the only callables: rebuilt here, nothing is called
    def op_GLOBAL(self, arg: Any) -> None:
        module, _, name = str(arg).partition(" ")
        self.push(self.named(module, name))

    def op_STACK_GLOBAL(self, _arg: Any) -> None:
        name, module = self.stack.pop(), self.stack.pop()
        self.push(self.named(module, name))

    @staticmethod
    def named(module: Any, name: Any) -> tuple[str]:
        found = _GLOBALS.get((module, name))
        if found is None:
            raise PickleDataError(f"refusing {module}.{name}: only plain data and NumPy arrays "
                                  "are read")
        return found

    def op_REDUCE(self, _arg: Any) -> None:
        args, func = self.stack.pop(), self.stack.pop()
        if not isinstance(args, tuple):
            raise PickleDataError("a call's arguments are not a tuple")
        if func is _RECONSTRUCT and args and args[0] is _NDARRAY:
            self.push(_Array(self.budget))
        elif func is _DTYPE:
            self.push(_dtype(args))
        elif func is _FROMBUFFER and len(args) == 4:
            buffer, dtype, shape, order = args
            array = _Array(self.budget)
            array.build((1, shape, dtype, order == "F", buffer))
            self.push(array)
        elif func in (_SET, _FROZENSET) and len(args) <= 1:
            items = [self.hashable(v) for v in (args[0] if args else [])]
            self.push(set(items) if func is _SET else self.made(frozenset(items)))
        elif (func is _ENCODE and len(args) == 2 and isinstance(args[0], str)
              and args[1] == "latin1"):
            self.push(args[0].encode("latin1"))  # how protocols 0-2 spell bytes
        else:
            raise PickleDataError("a call to something other than a set, bytes or NumPy's "
                                  "array or dtype")

    def op_BUILD(self, _arg: Any) -> None:
        state, target = self.stack.pop(), self.stack[-1]
        if isinstance(target, _Array):
            target.build(state)
        elif isinstance(target, np.dtype):
            self.stack[-1] = _dtype_state(target, state)
        else:
            raise PickleDataError("BUILD on something other than a NumPy array or dtype")


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise PickleDataError(f"an unhashable {type(key).__name__} as a dict key or set item"
                              ) from None
    return key


def loads(data: bytes) -> Any:
    """The plain data a pickle holds (see the module docstring); never runs its code."""
    return _Machine().run(bytes(data))


def load_npy(path: str | Path) -> Any:
    """A ``.npy`` file's array; an object array's items are read by :func:`loads`, so a file
    that NumPy would need ``allow_pickle=True`` for loads without unpickling."""
    from numpy.lib import format as npy

    with Path(path).open("rb") as handle:
        try:
            version = npy.read_magic(handle)
            if version == (1, 0):
                shape, _fortran, dtype = npy.read_array_header_1_0(handle)
            else:
                shape, _fortran, dtype = npy.read_array_header_2_0(handle)
        except ValueError as err:
            raise PickleDataError(f"{path} is not a .npy file: {err}") from None
        if dtype.hasobject:
            array = loads(handle.read())
            if not isinstance(array, np.ndarray) or array.shape != tuple(shape):
                raise PickleDataError(f"{path}: its pickled payload is not the array its "
                                      "header describes")
            return array
    return np.load(path, allow_pickle=False)


__all__ = ["PickleDataError", "load_npy", "loads"]
