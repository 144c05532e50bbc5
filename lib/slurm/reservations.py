"""What Slurm says about the cluster's capacity, in the gate's vocabulary: the GPUs its nodes have
(`sinfo`) and the spans its reservations hold some of them back (`scontrol show reservation`).

- `parse_nodes(text)`: each node once, even when it is in several partitions: its GPUs (Gres
  `gpu:N`, `gpu:TYPE:N(S:0-1)`, summed over types), cores and partitions.
- `parse_reservations(text, nodes, preemptible)`: each reservation as a CapacityWindow
  (lib.gate.contracts), recurring ones (HOURLY, DAILY, WEEKLY, WEEKDAY, WEEKEND) repeated over the
  next RECUR_HORIZON. What cannot be read is a problem line, never a crash; the rest is kept.
- `capacity_by_type(nodes, preemptible)` and `pools_toml(...)`: the accelerators per capacity
  type, and the `[pools.<type>]` tables (`gpus = N`) proposed from them for data/teams.toml.
- `read_nodes`, `read_reservations`: run the commands with a timeout; SlurmUnavailable when a
  command is missing, fails or does not answer in time.

A reservation's GPUs: its TRES `gres/gpu=N` when Slurm lists one (newer Slurm can reserve GPUs;
22.05 cannot and lists only cpu=...); otherwise the GPUs of the nodes it reserves, all of the
cluster's (or of its partition's) for `Nodes=ALL` or the ALL_NODES flag (maintenance on every
node). A reservation of some cores of its nodes (CoreCnt below the nodes' cores) holds their GPUs
in proportion, rounded up: jobs inside it use those GPUs. Its pool: its PartitionName's capacity
type, else the one type all its nodes' partitions share, else None (every pool). A partition is
preemptible when a team's `preemptible_partitions` names it (lib.slurm.comment.capacity_for).

Times: Slurm prints local time without a zone. The commands here run with TZ=UTC0 and
SLURM_TIME_FORMAT=standard, so they print UTC (and never a DST-ambiguous hour); text captured
elsewhere is read in `tz`, by default this process's local timezone.
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import threading
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Iterable, TypedDict

from lib.gate.contracts import CapacityWindow
from lib.gate.terms import CAPACITIES, shown
from lib.slurm.comment import capacity_for

SCONTROL_TIMEOUT_S = 10.0
SLURM_ENV = {"TZ": "UTC0", "SLURM_TIME_FORMAT": "standard"}   # UTC times, in one format
SINFO_NODES = ("sinfo", "--noheader", "--Node", "--format", "%N|%R|%G|%c|%Z|%T")
SHOW_RESERVATIONS = (("scontrol", "show", "reservation", "--oneliner"),
                     ("scontrol", "-o", "show", "reservation"))   # the second for a client that wants -o first
POOLS_TABLE = "pools"   # data/teams.toml's table of the accelerators per capacity type
MAX_HOSTS = 100_000          # names one hostlist may expand to
RECUR_HORIZON = timedelta(days=7)
_REPEATS = {"HOURLY": (timedelta(hours=1), None), "DAILY": (timedelta(days=1), None),
            "WEEKLY": (timedelta(days=7), None), "WEEKDAY": (timedelta(days=1), {0, 1, 2, 3, 4}),
            "WEEKEND": (timedelta(days=1), {5, 6})}   # flag -> (step, weekdays it runs on; None: all)
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_/:]*")
_NONE = {"", "(null)", "n/a", "N/A", "None", "(none)"}
NO_RESERVATIONS = "No reservations in the system"


class SlurmUnavailable(RuntimeError):
    """A Slurm command is missing, failed or did not answer within its timeout."""


class SlurmFailed(SlurmUnavailable):
    """A Slurm command ran and exited non-zero."""


class Node(TypedDict):
    """One node as sinfo lists it: `gpus` accelerators, `cores` (CPUs / threads per core), the
    partitions it is in (sorted) and its state (idle, mixed, down, drained, ...)."""
    name: str
    gpus: int
    cores: int
    partitions: list[str]
    state: str


# ------------------------------------------------------------------------------ running Slurm

class SlurmClient:
    """Runs Slurm's client commands with SLURM_ENV (UTC times) and a timeout of `timeout_s` seconds.
    `stop()` kills the command running now and refuses any later one: a gate server that closes
    leaves no scontrol behind (one waits up to half a minute for a controller that is down)."""

    def __init__(self, timeout_s: float = SCONTROL_TIMEOUT_S):
        self.timeout_s = timeout_s
        self._mu = threading.Lock()
        self._running: subprocess.Popen | None = None
        self._stopped = False

    def run(self, argv: Iterable[str]) -> str:
        """The command's stdout; SlurmUnavailable when it is not installed, exits non-zero, runs past
        the timeout (then it is killed) or the client was stopped."""
        argv = list(argv)
        command = " ".join(argv)
        with self._mu:
            if self._stopped:
                raise SlurmUnavailable(f"`{command}` not run: stopping")
            try:
                proc = subprocess.Popen(argv, env={**os.environ, **SLURM_ENV}, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
            except FileNotFoundError:
                raise SlurmUnavailable(f"{argv[0]} is not installed (not on PATH)") from None
            except OSError as exc:
                raise SlurmUnavailable(f"`{command}` cannot run: {exc.strerror or exc}") from None
            self._running = proc
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise SlurmUnavailable(f"`{command}` gave no answer within {self.timeout_s:g} s") from None
        finally:
            with self._mu:
                self._running = None
        if proc.returncode != 0:
            said = (err.strip().splitlines() or ["no message"])[-1]
            raise SlurmFailed(f"`{command}` exited {proc.returncode}: {said[:200]}")
        return out

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        with self._mu:
            self._stopped = True
            if self._running is not None:
                self._running.kill()


def run_slurm(argv: Iterable[str], timeout_s: float = SCONTROL_TIMEOUT_S) -> str:
    """The stdout of one Slurm client command (`SlurmClient.run`)."""
    return SlurmClient(timeout_s).run(argv)


def read_nodes(timeout_s: float = SCONTROL_TIMEOUT_S, client: SlurmClient | None = None
               ) -> tuple[dict[str, Node], list[str]]:
    """The cluster's nodes from sinfo (`parse_nodes`) and the lines it could not read."""
    return parse_nodes((client or SlurmClient(timeout_s)).run(SINFO_NODES))


def read_reservations(timeout_s: float = SCONTROL_TIMEOUT_S, client: SlurmClient | None = None) -> str:
    """The text of `scontrol show reservation --oneliner` (else of `scontrol -o show reservation`),
    its times in UTC."""
    client = client or SlurmClient(timeout_s)
    try:
        return client.run(SHOW_RESERVATIONS[0])
    except SlurmFailed as first:  # missing, silent or stopped: the other spelling would fare no better
        try:
            return client.run(SHOW_RESERVATIONS[1])
        except SlurmUnavailable:
            raise first from None


def cluster_windows(preemptible: Iterable[str], *, timeout_s: float = SCONTROL_TIMEOUT_S,
                    client: SlurmClient | None = None) -> tuple[list[CapacityWindow], list[str]]:
    """The cluster's reservations now, as windows (UTC), and every line that could not be read."""
    client = client or SlurmClient(timeout_s)
    nodes, problems = read_nodes(client=client)
    windows, more = parse_reservations(read_reservations(client=client), nodes, preemptible, tz=timezone.utc)
    return windows, problems + more


# ------------------------------------------------------------------------------ small parsers

def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _value(text: str | None) -> str | None:
    return None if text is None or text.strip() in _NONE else text.strip()


def _whole(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text):
        raise ValueError(f"{shown(text)} is not a whole number")
    return int(text)


def gres_gpus(gres: str | None) -> int:
    """The GPUs in a node's Gres: 'gpu:8' -> 8, 'gpu:a100:4(S:0-1),gpu:v100:2(S:0,1)' -> 6, 'gpu'
    or 'gpu:tesla' -> 1 (Slurm's count when none is given), '(null)' -> 0; other GRES are not GPUs.
    ValueError for a count that is not a whole number."""
    total = 0
    for entry in _split_top(_value(gres) or ""):
        parts = re.sub(r"\([^)]*\)", "", entry).strip().split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 1 or (len(parts) == 2 and not parts[1][:1].isdigit()):
            total += 1
        else:
            total += _whole(parts[-1])
    return total


def tres_gpus(tres: str | None) -> int | None:
    """The GPUs in a TRES list ('cpu=2,gres/gpu=4' -> 4; typed 'gres/gpu:a100=2' summed when the
    untyped total is absent); None when it names no GPU."""
    total, typed = None, 0
    for entry in _split_top(_value(tres) or ""):
        key, _, count = entry.partition("=")
        if key == "gres/gpu":
            total = _whole(count)
        elif key.startswith("gres/gpu:"):
            typed += _whole(count)
    return total if total is not None else (typed if typed else None)


def expand_hostlist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """Slurm's hostlist as names: 'gpu[01-03,07],login' -> gpu01, gpu02, gpu03, gpu07, login (zero
    padding kept; several bracket groups multiply). ValueError for an unbalanced bracket, a range
    that is not digits or runs backwards, or more than `limit` names."""
    names: list[str] = []
    for part in _split_top(text):
        names.extend(_expand(part, limit - len(names)))
        if len(names) > limit:
            raise ValueError(f"{shown(text)} names more than {limit:,} hosts")
    return names


def _expand(part: str, limit: int) -> list[str]:
    open_at = part.find("[")
    if open_at < 0:
        if "]" in part:
            raise ValueError(f"unbalanced ']' in {shown(part)}")
        return [part]
    close_at = part.find("]", open_at)
    if close_at < 0:
        raise ValueError(f"unbalanced '[' in {shown(part)}")
    head, inner, tail = part[:open_at], part[open_at + 1:close_at], part[close_at + 1:]
    values: list[str] = []
    for item in inner.split(","):
        lo, dash, hi = item.strip().partition("-")
        if not re.fullmatch(r"[0-9]+", lo) or (dash and not re.fullmatch(r"[0-9]+", hi)):
            raise ValueError(f"range {shown(item)} in {shown(part)} is not digits")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first or len(values) + last - first >= limit:
            raise ValueError(f"range {shown(item)} in {shown(part)} runs backwards or names more than "
                             f"{MAX_HOSTS:,} hosts")
        values.extend(str(n).zfill(len(lo)) for n in range(first, last + 1))
    out: list[str] = []
    for v in values:
        out.extend(_expand(head + v + tail, limit - len(out)))
        if len(out) > limit:
            raise ValueError(f"{shown(part)} names more than {MAX_HOSTS:,} hosts")
    return out


def slurm_time(text: str | None, tz: tzinfo | None = None) -> datetime | None:
    """A Slurm time ('2026-12-03T14:43:55', local to `tz`, default this process's zone) as naive
    UTC; None for 'Unknown', 'None' or anything else that is not such a time."""
    try:
        t = datetime.strptime((text or "").strip(), "%Y-%m-%dT%H:%M:%S")
        aware = t.replace(tzinfo=tz) if tz is not None else t.astimezone()
        return aware.astimezone(timezone.utc).replace(tzinfo=None)
    except (ValueError, OverflowError, OSError):
        return None


# ------------------------------------------------------------------------------ sinfo: the nodes

def parse_nodes(text: str) -> tuple[dict[str, Node], list[str]]:
    """Nodes from `sinfo --noheader --Node --format '%N|%R|%G|%c|%Z|%T'` (one line per node and
    partition): each node once, its partitions gathered. Returns (nodes by name, problems)."""
    nodes: dict[str, Node] = {}
    problems: list[str] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 6:
            problems.append(f"sinfo line {i}: expected 6 fields (node|partition|gres|cpus|threads|state), "
                            f"got {shown(line)}")
            continue
        name, partition, gres, cpus, threads, state = (f.strip() for f in fields)
        try:
            gpus = gres_gpus(gres)
        except ValueError as exc:
            problems.append(f"sinfo line {i}: node {shown(name)} Gres {shown(gres)}: GPU count {exc}")
            gpus = 0
        try:
            cores = _whole(cpus) // max(1, _whole(threads))
        except ValueError:
            cores = 0
        node = nodes.setdefault(name, {"name": name, "gpus": 0, "cores": 0, "partitions": [], "state": state})
        node["gpus"], node["cores"] = max(node["gpus"], gpus), max(node["cores"], cores)
        partition = _value(partition.rstrip("*"))
        if partition and partition not in node["partitions"]:
            node["partitions"] = sorted([*node["partitions"], partition])
    return nodes, problems


def capacity_by_type(nodes: dict[str, Node], preemptible: Iterable[str]) -> dict[str, dict]:
    """Per capacity type: `gpus` (each node's once), `nodes` and `partitions` (sorted names). A node
    in partitions of both types counts in both: its GPUs serve either."""
    preemptible = set(preemptible)
    out = {c: {"gpus": 0, "nodes": [], "partitions": set()} for c in CAPACITIES}
    for node in sorted(nodes.values(), key=lambda n: n["name"]):
        if node["gpus"] <= 0:
            continue
        types: dict[str, list[str]] = {}
        for p in node["partitions"]:
            types.setdefault(capacity_for(p, preemptible), []).append(p)
        for capacity, partitions in types.items():
            out[capacity]["gpus"] += node["gpus"]
            out[capacity]["nodes"].append(node["name"])
            out[capacity]["partitions"].update(partitions)
    return {c: {**v, "partitions": sorted(v["partitions"])} for c, v in out.items()}


def _listed(names: list[str], most: int = 6) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def pools_toml(nodes: dict[str, Node], preemptible: Iterable[str], *, read_at: datetime,
                  source: str = "sinfo") -> str:
    """The `[pools.<type>]` tables proposed for data/teams.toml (TOML text with comments saying where
    each number comes from), for the planner to review like code."""
    preemptible = sorted(set(preemptible))
    by_type = capacity_by_type(nodes, preemptible)
    shared = sorted(set(by_type["stable"]["nodes"]) & set(by_type["preemptible"]["nodes"]))
    down = sorted(n["name"] for n in nodes.values() if n["gpus"] and re.match(r"(down|drain|fail)", n["state"]))
    lines = [f"# [pools] proposed from {source} at {read_at:%Y-%m-%d %H:%M} UTC: the accelerators the",
             "# cluster has per capacity type, each node counted once. Review it like code, then put it",
             "# in data/teams.toml. A partition is preemptible when a team's preemptible_partitions names",
             f"# it ({_listed(preemptible) or 'none'}); every other partition is stable."]
    if shared:
        gpus = sum(nodes[n]["gpus"] for n in shared)
        lines.append(f"# {len(shared)} node(s) with {gpus} GPUs are in partitions of both types and count in "
                     f"both: {_listed(shared)}.")
    if down:
        lines.append(f"# Counted although down or drained now (hardware the cluster has): {_listed(down)}.")
    for capacity in CAPACITIES:
        got = by_type[capacity]
        where = (f"{len(got['nodes'])} node(s); partitions {_listed(got['partitions'])}" if got["nodes"]
                 else f"no GPU node in a {capacity} partition")
        lines += ["", f"[{POOLS_TABLE}.{capacity}]", f"gpus = {got['gpus']}  # {where}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ scontrol: reservations

def _records(text: str, problems: list[str]) -> list[dict[str, str]]:
    """Each reservation's fields (the first value of a key wins). A reservation starts at a line
    beginning 'ReservationName='; indented lines continue it (scontrol without --oneliner)."""
    records: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.strip() == NO_RESERVATIONS:
            continue
        if line.startswith("ReservationName="):
            current = {}
            records.append(current)
        elif current is None or not line[0].isspace():
            problems.append(f"scontrol line {i}: not part of a reservation: {shown(line)}")
            current = None
            continue
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and _KEY.fullmatch(key):
                current.setdefault(key, value)
    return records


def _names(text: str | None) -> list[str]:
    return [n for n in _split_top(_value(text) or "")]


def _window(fields: dict[str, str], nodes: dict[str, Node], preemptible: set[str], tz,
            problems: list[str]) -> tuple[CapacityWindow, set[str]] | None:
    """The window of one reservation and its flags; None (with a problem, unless it holds no GPU)."""
    name = fields.get("ReservationName", "")
    where = f"reservation {shown(name)}"
    start, end = slurm_time(fields.get("StartTime"), tz), slurm_time(fields.get("EndTime"), tz)
    if not name or start is None or end is None or end <= start:
        problems.append(f"{where}: StartTime {shown(fields.get('StartTime'))} / EndTime "
                        f"{shown(fields.get('EndTime'))}: not a span of time; left out")
        return None
    flags = {f.strip().upper() for f in (fields.get("Flags") or "").split(",") if f.strip()}
    partition = _value(fields.get("PartitionName"))
    listed = _value(fields.get("Nodes"))
    if listed == "ALL" or "ALL_NODES" in flags:
        names = sorted(n for n, node in nodes.items() if partition is None or partition in node["partitions"])
    else:
        try:
            names = expand_hostlist(listed or "")
        except ValueError as exc:
            problems.append(f"{where}: Nodes {shown(listed)}: {exc}; left out")
            return None
        unknown = [n for n in names if n not in nodes]
        if unknown:
            problems.append(f"{where}: node(s) sinfo does not list, counted without GPUs: {_listed(unknown)}")
        names = [n for n in names if n in nodes]
    try:
        gpus = tres_gpus(fields.get("TRES"))
        core_count = _whole(fields["CoreCnt"]) if _value(fields.get("CoreCnt")) else None
    except ValueError as exc:
        problems.append(f"{where}: TRES {shown(fields.get('TRES'))} / CoreCnt {shown(fields.get('CoreCnt'))}: "
                        f"{exc}; left out")
        return None
    if gpus is None:
        gpus = sum(nodes[n]["gpus"] for n in names)
        cores = sum(nodes[n]["cores"] for n in names)
        if core_count and cores and core_count < cores and "ALL_NODES" not in flags:
            gpus = math.ceil(gpus * core_count / cores)
    if partition is not None:
        pool = capacity_for(partition, preemptible)
    else:
        types = {capacity_for(p, preemptible) for n in names for p in nodes[n]["partitions"]}
        pool = types.pop() if len(types) == 1 else None
    window: CapacityWindow = {"name": name, "start": start, "end": end, "gpus": int(gpus), "pool": pool,
                              "accounts": _names(fields.get("Accounts")), "users": _names(fields.get("Users"))}
    return window, flags


def _occurrences(window: CapacityWindow, flags: set[str], horizon: timedelta) -> list[CapacityWindow]:
    """The window and, for a recurring reservation, its repeats starting within `horizon` of it
    (repeated in UTC; Slurm repeats in the controller's local time, which differs across a DST change)."""
    repeat = next((_REPEATS[f] for f in _REPEATS if f in flags), None)
    if repeat is None:
        return [window]
    step, weekdays = repeat
    out, k = [], 0
    while k * step <= horizon:
        start = window["start"] + k * step
        if weekdays is None or start.weekday() in weekdays:
            out.append({**window, "start": start, "end": window["end"] + k * step})
        k += 1
    return out


def parse_reservations(text: str, nodes: dict[str, Node], preemptible: Iterable[str], *,
                       tz: tzinfo | None = None, horizon: timedelta = RECUR_HORIZON
                       ) -> tuple[list[CapacityWindow], list[str]]:
    """The reservations in `scontrol show reservation` text (--oneliner or not) as windows sorted by
    start, and the problems found (a reservation that cannot be read is left out and named there).
    Reservations that hold no GPU (licenses, burst buffers, GPU-less nodes) are no window. Times are
    read in `tz` (default: this process's local zone)."""
    problems: list[str] = []
    preemptible = set(preemptible)
    windows: list[CapacityWindow] = []
    for fields in _records(text, problems):
        got = _window(fields, nodes, preemptible, tz, problems)
        if got is not None and got[0]["gpus"] > 0:
            windows.extend(_occurrences(*got, horizon))
    windows.sort(key=lambda w: (w["start"], w["name"]))
    return windows, problems
