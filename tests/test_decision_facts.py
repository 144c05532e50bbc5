"""What a decision reads from its facts (lib.gate.contracts.DecisionFacts) is one list: `decide_with`
calls exactly its members, and both facts objects, the ledger's LedgerFacts and the warm gate
server's LiveGate, have every one of them with a signature that takes the same call. A method lost or
renamed on either fails here, not in production as an AttributeError halfway through a decision."""
from __future__ import annotations

import inspect
import typing

import pytest

from lib.gate.contracts import DecisionFacts
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import LedgerFacts, decide_with, submit_request
from lib.slurm.live import LiveGate
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import tiny_request

IMPLEMENTATIONS = (LedgerFacts, LiveGate)


def protocol_members(protocol: type = DecisionFacts) -> dict[str, inspect.Signature]:
    """The Protocol's methods and their signatures, without `self`."""
    out = {}
    for name, member in vars(protocol).items():
        if not name.startswith("_") and inspect.isfunction(member):
            sig = inspect.signature(member)
            out[name] = sig.replace(parameters=list(sig.parameters.values())[1:])
    return out


def signature_problem(cls, name: str, wanted: inspect.Signature) -> str | None:
    """Why `cls.name` cannot take the calls the Protocol's `name` describes (None: it can): it must
    exist and be a plain method whose leading parameters are the Protocol's, by name and kind, and
    whose further parameters have defaults."""
    member = inspect.getattr_static(cls, name, None)
    if member is None:
        return f"{cls.__name__} has no {name}"
    if not inspect.isfunction(member):
        return f"{cls.__name__}.{name} is not a plain method"
    got = list(inspect.signature(member).parameters.values())[1:]
    want = list(wanted.parameters.values())
    if [(p.name, p.kind) for p in got[:len(want)]] != [(p.name, p.kind) for p in want]:
        return f"{cls.__name__}.{name}{inspect.signature(member)} does not take {name}{wanted}"
    extra = [p.name for p in got[len(want):] if p.default is inspect.Parameter.empty
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if extra:
        return f"{cls.__name__}.{name} needs {extra}, which the Protocol's callers never pass"
    return None


def test_the_protocol_names_the_five_questions_a_decision_asks():
    assert set(protocol_members()) == {"policy", "known_teams", "booked", "recorded_admit", "state"}
    assert typing.get_type_hints(decide_with)["facts"] is DecisionFacts


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_each_facts_object_has_every_member_with_a_signature_that_takes_the_same_call(cls):
    problems = [p for name, sig in protocol_members().items() if (p := signature_problem(cls, name, sig))]
    assert problems == []


def test_the_check_fails_for_a_facts_object_that_lost_or_renamed_a_method():
    class Renamed(LedgerFacts):
        state = None

        def team_state(self, team, now, kind):  # the old name under a new one: decide_with would fail
            return super().state(team, now, kind)

    class Reordered(LedgerFacts):
        def recorded_admit(self, now, request):
            return None

    members = protocol_members()
    assert signature_problem(Renamed, "state", members["state"]) is not None
    assert signature_problem(Reordered, "recorded_admit", members["recorded_admit"]) is not None
    assert all(signature_problem(LedgerFacts, n, s) is None for n, s in members.items())


class Spy:
    """A facts object that notes which of its members decide_with asks for."""

    def __init__(self, facts):
        self.facts, self.asked = facts, set()

    def __getattr__(self, name):
        self.asked.add(name)
        return getattr(self.facts, name)


def test_decide_with_asks_exactly_the_protocols_members(tiny_ledger):
    admitted = tiny_request(1)
    submit_request(admitted, db=tiny_ledger, now=NOW)
    asked: set[str] = set()
    with open_ledger(tiny_ledger, read_only=True) as con:
        for request in (tiny_request(2),                  # decided: policy, booked, state
                        admitted,                         # the same request again: recorded_admit
                        tiny_request(3, team="nobody")):  # an unknown team: known_teams
            spy = Spy(LedgerFacts(con))
            decide_with(request, NOW, spy)
            asked |= spy.asked
    assert asked == set(protocol_members())


def test_a_ledgers_facts_and_a_live_gate_are_decision_facts_at_run_time(tiny_ledger):
    with open_ledger(tiny_ledger, read_only=True) as con:
        assert isinstance(LedgerFacts(con), DecisionFacts)
    live = LiveGate(tiny_ledger, flusher=False)
    try:
        assert isinstance(live, DecisionFacts)
    finally:
        live.close()
    assert not isinstance(object(), DecisionFacts)
