"""The recorder's events, stored as columns: a few bytes per allocator event.

A run of a large model on meta makes millions of allocator events, and each used to be a Python
object of ~400 bytes. Here an event is one entry in each of a handful of typed arrays
(`array.array`): its sequence number, time, the allocator's totals after it, the storage it is
about and an interned code for where it happened (action, node, op, phase, iteration). What
belongs to the storage rather than to the event (bytes, requested bytes, category, tensor name,
the in-place op it is a clone for) is kept once per storage, shared by its allocation and its
free, so refining a category after the fact (autograd tags a storage saved_for_backward) is one
store. About 60 bytes per event in all (bench/bench_recording.py prints it).

`EventLog` is a sequence: `log[i]` is an `Event`, a view with the attributes of the report
builder's `Record` protocol (memprof/reports/build.py), and `log[a:b]` a `EventSlice` of them;
the builder's hot paths (`timeline`, `peak`, counts) read the columns directly.

Storages are numbered 1, 2, ... in order of first appearance (`Event.storage`), so a report does
not depend on what ran before it in the process.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any

ACTIONS = ("alloc", "free", "oom")
_ACTION_CODE = {a: i for i, a in enumerate(ACTIONS)}
ALLOC, FREE, OOM = (_ACTION_CODE[a] for a in ACTIONS)
NO_EVENT = -1


class _Interned:
    """Values (strings, None, small ints, tuples of them) as small integer codes."""

    __slots__ = ("codes", "values")

    def __init__(self):
        self.codes: dict[Any, int] = {}
        self.values: list[Any] = []

    def code(self, value) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code


class EventLog:
    """Every event of one recording, as columns (see the module's docstring)."""

    def __init__(self):
        # per event
        self.seq = array("q")
        self.time_ns = array("q")
        self.allocated = array("q")
        self.reserved = array("q")
        self.row = array("i")  # the storage row (index into the per-storage columns)
        self.where = array("i")  # code of (action, node, op, phase, iteration) in self.places
        self.run = array("i")  # backward: code of the node run that made it (0: none)
        # per storage (an allocation, an oom, or a free of a storage allocated before recording)
        self.bytes = array("q")
        self.requested = array("q")
        self.first = array("i")  # the event that made the row (its allocation, or the oom)
        self.category = array("b")  # code in self.categories (a handful of names)
        self.tensor = array("i")  # code in self.strings
        self.clone_of = array("i")  # code in self.strings
        self.places = _Interned()
        self.strings = _Interned()
        self.strings.code(None)  # code 0 is None
        self.categories = _Interned()
        self.categories.code(None)
        self._runs: dict[int, int] = {}
        self._kinds: list[int] = []  # kinds()
        self.clones_tagged = 0  # how many set_clone_of calls so far (Step.clones reads it)

    # --- writing (the rows and events themselves: Recorder.on_event, the hot path) ---------------
    def kinds(self) -> list[int]:
        """The action code (ALLOC, FREE, OOM) of each place code: `kinds()[where[i]]` is event
        i's. Extended as places are added, not rebuilt."""
        kinds, values = self._kinds, self.places.values
        if len(kinds) < len(values):
            kinds.extend(p[0] for p in values[len(kinds) :])
        return kinds

    def set_category(self, row: int, category) -> None:
        self.category[row] = self.categories.code(category)

    def set_tensor(self, row: int, tensor) -> None:
        self.tensor[row] = self.strings.code(tensor)

    def set_clone_of(self, row: int, op) -> None:
        self.clone_of[row] = self.strings.code(op)
        self.clones_tagged += 1

    def phase_of(self, index: int):
        """Event `index`'s phase (what `log[index].phase` gives, without making the view)."""
        return self.places.values[self.where[index]][3]

    def row_category(self, row: int):
        return self.categories.values[self.category[row]]

    def row_tensor(self, row: int):
        return self.strings.values[self.tensor[row]]

    # --- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.seq)

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self.seq))
            if step != 1:
                raise ValueError("an EventLog slices with step 1 only")
            return EventSlice(self, start, max(start, stop))
        n = len(self.seq)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("event index out of range")
        return Event(self, index)

    def __iter__(self) -> Iterator[Event]:
        for i in range(len(self.seq)):
            yield Event(self, i)

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return self is other

    __hash__ = object.__hash__

    def counts(self) -> dict[str, int]:
        """How many events of each action: {"alloc": n, "free": n, "oom": n}, in one pass."""
        per_place = [0] * len(self.places.values)
        for w in self.where:
            per_place[w] += 1
        out = dict.fromkeys(ACTIONS, 0)
        for place, n in zip(self.places.values, per_place, strict=True):
            out[ACTIONS[place[0]]] += n
        return out

    def nbytes(self) -> int:
        """Bytes the columns hold (without the interned tables)."""
        cols = (
            self.seq,
            self.time_ns,
            self.allocated,
            self.reserved,
            self.row,
            self.where,
            self.run,
            self.bytes,
            self.requested,
            self.first,
            self.category,
            self.tensor,
            self.clone_of,
        )
        return sum(c.itemsize * len(c) for c in cols)

    def columns(self, t0_ns: int, start: int = 0, stop: int | None = None) -> dict[str, list]:
        """The report's columnar timeline (docs/report-format.md) of events [start, stop)."""
        stop = len(self.seq) if stop is None else stop
        places = self.places.values
        where = [places[w] for w in self.where[start:stop]]
        rows = self.row[start:stop]
        cats = self.categories.values
        strings = self.strings.values
        category = [cats[self.category[r]] or "other" for r in rows]
        byts = self.bytes
        req = self.requested
        return {
            "seq": self.seq[start:stop].tolist(),
            "time_s": [round((t - t0_ns) / 1e9, 9) for t in self.time_ns[start:stop]],
            "action": [ACTIONS[p[0]] for p in where],
            "bytes": [byts[r] for r in rows],
            "requested": [req[r] for r in rows],
            "allocated": self.allocated[start:stop].tolist(),
            "reserved": self.reserved[start:stop].tolist(),
            "node": [p[1] for p in where],
            "op": [p[2] for p in where],
            "phase": [p[3] for p in where],
            "category": category,
            "tensor": [strings[self.tensor[r]] for r in rows],
            "iteration": [p[4] for p in where],
            "storage": [r + 1 for r in rows],
        }

    def peak_index(self) -> int | None:
        """The first event at which allocated bytes peaked (ooms do not count), or None."""
        kinds = self.kinds()
        best, index = -1, None
        where = self.where
        for i, a in enumerate(self.allocated):
            if a > best and kinds[where[i]] != OOM:
                best, index = a, i
        return index

    def live_rows(self, upto: int) -> list[int]:
        """The storage rows allocated and not freed in events [0, upto], in allocation order."""
        kind = self.kinds()
        live: dict[int, None] = {}
        where, rows = self.where, self.row
        for i in range(upto + 1):
            k = kind[where[i]]
            if k == ALLOC:
                live[rows[i]] = None
            elif k == FREE:
                live.pop(rows[i], None)
        return list(live)


class EventSlice:
    """Events [start, stop) of a log, as a sequence of `Event`s."""

    __slots__ = ("log", "start", "stop")

    def __init__(self, log: EventLog, start: int, stop: int):
        self.log, self.start, self.stop = log, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self) -> Iterator[Event]:
        log = self.log
        for i in range(self.start, self.stop):
            yield Event(log, i)

    def __getitem__(self, index):
        n = self.stop - self.start
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError("an EventSlice slices with step 1 only")
            return EventSlice(self.log, self.start + start, self.start + max(start, stop))
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("event index out of range")
        return Event(self.log, self.start + index)

    def __bool__(self) -> bool:
        return self.stop > self.start

    def totals(self, before: int) -> tuple[int, int, int]:
        """(bytes allocated, bytes freed, peak allocated bytes) over these events, the peak
        starting from `before` (ooms change nothing): what an `ops` row reports, read from the
        columns (memprof.reports.build.op_row)."""
        log = self.log
        kinds = log.kinds()
        where, rows, nbytes, allocated = log.where, log.row, log.bytes, log.allocated
        alloc = freed = 0
        peak = before
        for i in range(self.start, self.stop):
            kind = kinds[where[i]]
            if kind == ALLOC:
                alloc += nbytes[rows[i]]
            elif kind == FREE:
                freed += nbytes[rows[i]]
            else:
                continue
            if allocated[i] > peak:
                peak = allocated[i]
        return alloc, freed, peak

    def clones(self) -> tuple[int, list[str]]:
        """(bytes, sorted op names) of the allocations here that are in-place ops' clones for
        backward (`clone_of`)."""
        log = self.log
        kinds = log.kinds()
        where, rows, clone_of, nbytes = log.where, log.row, log.clone_of, log.bytes
        total, ops = 0, set()
        for i in range(self.start, self.stop):
            code = clone_of[rows[i]]
            if code and kinds[where[i]] == ALLOC:
                total += nbytes[rows[i]]
                ops.add(log.strings.values[code])
        return total, sorted(ops)

    def runs(self) -> list[tuple[int, int, int]]:
        """(run code, first, end): the events split where the backward node run that made
        them changes (code 0: outside any node), as absolute indices of the log."""
        run = self.log.run
        groups: list[tuple[int, int, int]] = []
        first = self.start
        for i in range(self.start + 1, self.stop):
            if run[i] != run[i - 1]:
                groups.append((run[first], first, i))
                first = i
        if self.stop > self.start:
            groups.append((run[first], first, self.stop))
        return groups


class Event:
    """One event of a log, read (and for its storage's category, tensor and clone_of, written)
    through to the columns. Attributes as memprof.reports.build.Record."""

    __slots__ = ("log", "index")

    def __init__(self, log: EventLog, index: int):
        self.log, self.index = log, index

    def __eq__(self, other) -> bool:
        return isinstance(other, Event) and other.log is self.log and other.index == self.index

    def __hash__(self) -> int:
        return hash((id(self.log), self.index))

    def __repr__(self) -> str:
        return (
            f"Event({self.index}: {self.action} {self.bytes} B storage {self.storage} "
            f"node={self.node!r} op={self.op!r} category={self.storage_category!r})"
        )

    @property
    def _place(self) -> tuple:
        return self.log.places.values[self.log.where[self.index]]

    @property
    def _row(self) -> int:
        return self.log.row[self.index]

    seq = property(lambda self: self.log.seq[self.index])
    time_ns = property(lambda self: self.log.time_ns[self.index])
    allocated = property(lambda self: self.log.allocated[self.index])
    reserved = property(lambda self: self.log.reserved[self.index])
    action = property(lambda self: ACTIONS[self._place[0]])
    node = property(lambda self: self._place[1])
    op = property(lambda self: self._place[2])
    phase = property(lambda self: self._place[3])
    iteration = property(lambda self: self._place[4])
    bytes = property(lambda self: self.log.bytes[self._row])
    requested = property(lambda self: self.log.requested[self._row])
    storage = property(lambda self: self._row + 1)

    @property
    def run_of(self) -> int | None:
        code = self.log.run[self.index]
        return code or None

    @property
    def owner(self) -> Event | None:
        """For a free: the allocation of its storage, when it was recorded."""
        if self._place[0] != _ACTION_CODE["free"]:
            return None
        first = self.log.first[self._row]
        return Event(self.log, first) if first != NO_EVENT else None

    @property
    def category(self):
        if self._place[0] == _ACTION_CODE["free"]:
            return None
        return self.log.row_category(self._row)

    @category.setter
    def category(self, value) -> None:
        self.log.set_category(self._row, value)

    @property
    def tensor(self):
        if self._place[0] == _ACTION_CODE["free"]:
            return None
        return self.log.row_tensor(self._row)

    @tensor.setter
    def tensor(self, value) -> None:
        self.log.set_tensor(self._row, value)

    @property
    def clone_of(self):
        if self._place[0] == _ACTION_CODE["free"]:
            return None
        return self.log.strings.values[self.log.clone_of[self._row]]

    @clone_of.setter
    def clone_of(self, value) -> None:
        self.log.set_clone_of(self._row, value)

    @property
    def storage_category(self) -> str:
        return self.log.row_category(self._row) or "other"

    @property
    def storage_tensor(self) -> str | None:
        return self.log.row_tensor(self._row)
