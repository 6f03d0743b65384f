"""Report types: findings with stable codes, and the comparison report renderers print."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CODES", "CONFIRMED", "DESCRIPTIONS", "Voice", "DIFF", "Side", "Finding", "AcceptRule",
           "Accepted", "Row", "DiffReport", "Location", "SpecFinding", "StatementResult",
           "SpecReport", "STATUSES", "chain"]

CHAIN = 16  # ops a message names one by one; a longer run is told by its count and kinds


def chain(ops: tuple[str, ...] | list[str]) -> str:
    """A run of ops as a message names it: ``linear·relu`` one by one, or, past ``CHAIN``
    ops (a recurrent layer written out step by step on one side only), its length and the
    kinds of op in it, in the order they first come."""
    if len(ops) <= CHAIN:
        return "·".join(ops)
    kinds = list(dict.fromkeys(ops))
    return f"{len(ops)} ops ({', '.join(kinds)})"

CODES = (
    "missing-op", "op-mismatch", "attr-mismatch", "shape-mismatch", "param-mismatch",
    "edge-mismatch", "numeric-divergence", "gradient-divergence", "nan-introduced",
    "nondeterminism", "unsupported-op", "param-count-mismatch", "equation-mismatch",
)

# what each code means, for people and for tools that list rules (SARIF)
DESCRIPTIONS = {
    "missing-op": "an op one side computes and the other lacks",
    "op-mismatch": "the two sides compute different ops in the same place",
    "attr-mismatch": "an op's attribute (an eps, a stride, an approximation) differs",
    "shape-mismatch": "a value or an input has another shape",
    "param-mismatch": "a layer's parameters have other shapes",
    "edge-mismatch": "the same ops, wired to different values",
    "numeric-divergence": "the values part at a layer, forward",
    "gradient-divergence": "the gradients part at a layer, backward",
    "nan-introduced": "a layer turns finite values into NaN or Inf",
    "nondeterminism": "a layer gives different results on the same inputs",
    "unsupported-op": "an op specgraph cannot compare",
    "param-count-mismatch": "the parameter count differs from the one the spec states",
    "equation-mismatch": "the implementation computes another formula than the spec's equation",
}


@dataclass(frozen=True)
class Voice:
    """How findings name the two sides: ``lhs`` and ``rhs`` in a diff; a check against a
    spec names them ``the implementation`` and ``the spec``.

    Attributes:
        lhs / rhs: each side's name in messages.
        spec: which side (``lhs`` or ``rhs``) is a spec, the definition the other is held
            against; None when neither is.
        stand_ins: ``(scope, op)`` of the spec's nodes whose op is a stand-in (an activation
            the spec leaves unnamed): messages call them "activation", never the stand-in.
    """

    lhs: str = "lhs"
    rhs: str = "rhs"
    spec: str | None = None
    stand_ins: frozenset[tuple[str, str]] = frozenset()

    def op_name(self, side: str, node: Any) -> str:
        """How messages name ``node``'s op on ``side``."""
        if side == self.spec and (node.scope, node.op) in self.stand_ins:
            return "activation"
        if node.op == "opaque" and node.attrs.get("target"):  # which native op: gru_cell
            return f"opaque({node.attrs['target']})"
        return str(node.op)

    def name(self, side: str) -> str:
        """The name of ``side`` (``lhs`` or ``rhs``)."""
        return self.lhs if side == "lhs" else self.rhs

    def other(self, side: str) -> str:
        """The name of the side that is not ``side``."""
        return self.rhs if side == "lhs" else self.lhs


DIFF = Voice()  # the two sides of a diff

# what a structural finding says when a numeric divergence at its layers is its consequence
CONFIRMED = "; the numbers confirm it: "


@dataclass(frozen=True)
class Side:
    """Where a finding sits on one side: module path, node, user source line, value."""

    scope: str
    node: str
    source: str = ""
    value: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "node": self.node, "source": self.source,
                "value": _plain(self.value)}


@dataclass(frozen=True)
class Finding:
    """One difference between lhs and rhs, explained for people.

    Attributes:
        code: stable kebab-case code (one of ``CODES``).
        message: one sentence in user terms, naming both sides' scopes.
        op: the canonical op concerned.
        attr: the attribute concerned (attr-mismatch), else None.
        lhs: where it is on the lhs, or None where the lhs has nothing.
        rhs: where it is on the rhs, or None.
        blame: ``lhs``, ``rhs`` or ``unknown`` (structure alone cannot say who is wrong).
        causes: for a numeric divergence that comes from upstream, the layers that explain it
            (a layer one side lacks, or what each side reads), their ``value`` the side.
        ops: for a missing-op finding, the ops of the run one side lacks, in graph order.
        affects: for a difference the forward pass cannot show, what it changes
            (``training: the padding row's gradient``); None for the others.
        places: for the same difference found in several places (the same attribute with
            the same two values on every layer, the same run of ops missing between the
            same kinds of neighbours), every place as an (lhs, rhs) pair, the first being
            ``lhs`` and ``rhs``; empty for a difference found once.
    """

    code: str
    message: str
    op: str | None = None
    attr: str | None = None
    lhs: Side | None = None
    rhs: Side | None = None
    blame: str = "unknown"
    causes: tuple[Side, ...] = ()
    ops: tuple[str, ...] = ()
    affects: str | None = None
    places: tuple[tuple[Side | None, Side | None], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.op is not None:
            out["op"] = self.op
        if self.attr is not None:
            out["attr"] = self.attr
        out["lhs"] = self.lhs.to_dict() if self.lhs else None
        out["rhs"] = self.rhs.to_dict() if self.rhs else None
        out["blame"] = self.blame
        if self.causes:  # the layers upstream that explain it (value: the side they are on)
            out["causes"] = [c.to_dict() for c in self.causes]
        if self.affects is not None:
            out["affects"] = self.affects
        if self.places:  # the same difference in several places, the first one first
            out["places"] = [{"lhs": a.to_dict() if a else None,
                              "rhs": b.to_dict() if b else None} for a, b in self.places]
        return out


@dataclass(frozen=True)
class AcceptRule:
    """A known, intended difference the user accepts: findings with ``code`` whose lhs or
    rhs scope matches ``where`` (shell wildcards). ``origin``: ``--accept`` or the
    pyproject.toml it was read from. Parsed and applied by ``specgraph.accept``."""

    code: str
    where: str
    origin: str

    @property
    def text(self) -> str:
        return f"{self.code}:{self.where}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.text, "origin": self.origin}


@dataclass(frozen=True)
class Accepted:
    """A finding that accept rules cover, every one of its places; ``rules`` the rules
    that do, in the order given. In a check against a spec ``finding`` is the placed
    ``SpecFinding``."""

    finding: Finding | SpecFinding
    rules: tuple[AcceptRule, ...]

    @property
    def by(self) -> str:
        """The rules that accept it, as a person reads them."""
        return ", ".join(f"{rule.text} ({rule.origin})" for rule in self.rules)

    def to_dict(self) -> dict[str, Any]:
        return {**self.finding.to_dict(), "accepted_by": [r.to_dict() for r in self.rules]}


@dataclass(frozen=True)
class Row:
    """One line of the side-by-side view: a node of each side (or none) and whether they
    differ; ``settled`` where they are written differently and the numbers show they
    compute the same (``specgraph.arbitrate``); ``lhs_node``/``rhs_node``: the nodes'
    indices in the canonical graphs (None where a side has none)."""

    lhs: str
    rhs: str
    lhs_scope: str
    rhs_scope: str
    differs: bool
    settled: bool = False
    lhs_node: int | None = None
    rhs_node: int | None = None


@dataclass(frozen=True)
class DiffReport:
    """The result of comparing two models."""

    lhs: str
    rhs: str
    lhs_framework: str
    rhs_framework: str
    findings: tuple[Finding, ...]
    rows: tuple[Row, ...] = field(default=())
    numeric: Any = None  # a specgraph.numeric.result.NumericResult when numbers were compared
    notes: tuple[str, ...] = ()
    # known differences the user accepted (specgraph.accept): not in ``findings``, so they
    # do not make the models different; ``rules`` the accept rules in force, as written
    accepted: tuple[Accepted, ...] = ()
    rules: tuple[AcceptRule, ...] = ()
    # the two canonical graphs compared and their node pairing (a specgraph.align.Alignment,
    # ``lhs``/``rhs`` the graphs), for renderers that draw the models; not in to_dict
    alignment: Any = field(default=None, compare=False, repr=False)

    @property
    def equivalent(self) -> bool:
        return not self.findings

    def __bool__(self) -> bool:
        return self.equivalent

    def to_dict(self) -> dict[str, Any]:
        return {
            "equivalent": self.equivalent,
            "lhs": {"model": self.lhs, "framework": self.lhs_framework},
            "rhs": {"model": self.rhs, "framework": self.rhs_framework},
            "findings": [f.to_dict() for f in self.findings],
            "numeric": self.numeric.to_dict() if self.numeric is not None else None,
            "notes": list(self.notes),
            **({"accept": [r.to_dict() for r in self.rules],
                "accepted": [a.to_dict() for a in self.accepted]} if self.rules else {}),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Location:
    """A place in a file: ``path`` as a person reads it (relative to the working directory,
    or from an installed package's root), 1-based ``line`` and ``column`` (None: the whole
    line)."""

    path: str
    line: int
    column: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" + (f":{self.column}" if self.column else "")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "column": self.column}


@dataclass(frozen=True)
class SpecFinding:
    """A finding of a check against a spec, placed in the spec and in the model's source.

    Attributes:
        finding: the finding; its ``lhs`` is the implementation, its ``rhs`` the spec.
        spec_at: the spec's line and column it concerns (the attribute where one is
            written, else the statement), or None.
        model_at: the model's source line, or None where the model has nothing there.
        statements: the scopes of the spec statements it concerns, the first place first.
        place_statements: the scope of the statement each of the finding's places lies in
            (None where none), in the order of its places; not in to_dict.
    """

    finding: Finding
    spec_at: Location | None = None
    model_at: Location | None = None
    statements: tuple[str, ...] = ()
    place_statements: tuple[str | None, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.finding.to_dict(),
                "statements": list(self.statements),
                "spec_at": self.spec_at.to_dict() if self.spec_at else None,
                "model_at": self.model_at.to_dict() if self.model_at else None}


STATUSES = ("passed", "failed", "unchecked")


@dataclass(frozen=True)
class StatementResult:
    """One statement of the spec, checked: ``status`` is ``passed``, ``failed`` (the
    indices of its ``findings`` in the report) or ``unchecked`` (marked ``unspecified``);
    ``accepted``: the indices of its findings that accept rules cover, in the report's
    ``accepted`` (a statement whose findings are all accepted has passed)."""

    scope: str
    op: str
    at: Location
    status: str
    findings: tuple[int, ...] = ()
    accepted: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "op": self.op, "at": self.at.to_dict(),
                "status": self.status, "findings": list(self.findings)}


@dataclass(frozen=True)
class SpecReport:
    """The result of checking an implementation against a paper spec.

    Attributes:
        spec: the spec file as given; model: the model reference; framework: the model's.
        findings: what the implementation does otherwise than the spec states, each with
            its places in the spec and in the model's source.
        statements: every statement of the spec, with its status.
        comparison: the comparison underneath (lhs the implementation, rhs the spec run
            as the implementation chose where it is open): its rows and numbers.
        notes: what was not checked, and why.
        paper: the paper the spec states (title, url, section).
        accepted: the findings accept rules cover (``specgraph.accept``), each placed: not
            in ``findings``, so they do not fail the check; ``rules`` the rules in force.
    """

    spec: str
    model: str
    framework: str
    findings: tuple[SpecFinding, ...]
    statements: tuple[StatementResult, ...] = ()
    comparison: DiffReport | None = None
    notes: tuple[str, ...] = ()
    paper: Any = None
    accepted: tuple[Accepted, ...] = ()
    rules: tuple[AcceptRule, ...] = ()

    @property
    def satisfied(self) -> bool:
        return not self.findings

    def __bool__(self) -> bool:
        return self.satisfied

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "satisfied": self.satisfied,
            "equivalent": self.satisfied,
            "spec": {"path": self.spec, "paper": dict(self.paper or {})},
            "model": {"model": self.model, "framework": self.framework},
            "findings": [f.to_dict() for f in self.findings],
            "statements": [{**s.to_dict(), "accepted": list(s.accepted)} if self.rules
                           else s.to_dict() for s in self.statements],
            "numeric": c.numeric.to_dict() if c is not None and c.numeric is not None
            else None,
            "notes": list(self.notes),
            **({"accept": [r.to_dict() for r in self.rules],
                "accepted": [a.to_dict() for a in self.accepted]} if self.rules else {}),
        }
