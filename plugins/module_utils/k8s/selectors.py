# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Label selectors, parsed and matched in one place (pure functions, labels = ``{key: value}``).

A selector *string* (``kubectl -l``, ``drain.podSelector``, the profile's
``dra_kubelet_plugin_selector``) follows the grammar of Kubernetes' ``labels.Parse``
(k8s.io/apimachinery/pkg/labels/selector.go), without its ``>`` / ``<`` forms::

    <selector>    ::= "" | <requirement> | <requirement> "," <selector>
    <requirement> ::= "!" KEY                         key absent
                    | KEY                             key present (any value, "" too)
                    | KEY ("=" | "==") VALUE          key present with exactly VALUE (VALUE may be "")
                    | KEY "!=" VALUE                  key absent, or its value is not VALUE
                    | KEY "in" "(" <values> ")"       key present with one of the values
                    | KEY "notin" "(" <values> ")"    key absent, or its value is none of them
    <values>      ::= VALUE | VALUE "," <values>

KEY: ``[A-Za-z0-9./_-]+`` (prefix/name); VALUE: ``[A-Za-z0-9._-]*``; blanks around tokens are
ignored. The requirements are ANDed; the empty selector matches everything. Two leniencies against
``labels.Parse``: blank terms (``a=x,``, ``a=x,,b``) are dropped rather than refused, and keys and values
are not checked for length or first/last character (the API server checks the objects that carry them).

A selector *object* (metav1.LabelSelector: ``{matchLabels, matchExpressions}``, a PDB's
``spec.selector``) is read as ``metav1.LabelSelectorAsSelector`` reads it: every ``matchLabels``
pair must be equal, every ``matchExpressions`` requirement must hold (:func:`requirement_matches`);
``{}`` matches everything (policy/v1 PodDisruptionBudget), ``None`` nothing.

driver/vendor_profiles.py keeps its own copy of the term pattern (the driver layer may not import
this one); a unit test holds the two to the same language.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple, Optional

KEY = r"[A-Za-z0-9./_-]+"
VALUE = r"[A-Za-z0-9._-]*"
_SET_TERM = re.compile(r"^\s*(%s)\s+(in|notin)\s*\(([^()]*)\)\s*$" % KEY)
_EQ_TERM = re.compile(r"^\s*(%s)\s*(==|=|!=)\s*(%s)\s*$" % (KEY, VALUE))
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*(%s)\s*$" % KEY)

# labels.Requirement operators as matchExpressions / nodeSelectorTerms spell them.
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
# metav1.LabelSelector allows only these (Gt/Lt are node affinity's).
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_INT64 = re.compile(r"^[+-]?[0-9]+\Z")
_INT64_MAX = 2**63 - 1


class Requirement(NamedTuple):
    """One parsed term: ``operator`` is one of :data:`OPERATORS` but Gt/Lt, plus ``=`` and ``!=``."""

    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "=":
            return present and labels[self.key] in self.values
        if self.operator == "!=":
            return not present or labels[self.key] not in self.values
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present  # DoesNotExist


def split(selector: str) -> list[str]:
    """A selector's terms: split on commas outside parentheses (``a in (x,y),b`` -> 2 terms); blank
    terms are dropped."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur)
    return [t for t in terms if t.strip()]


def parse_term(term: str) -> Requirement:
    """One requirement of the grammar above; ValueError("invalid label selector term ...") if not."""
    m = _SET_TERM.match(term)
    if m:
        # as labels.Parse: an empty entry is the value "" (``in ()`` is ``in ("")``)
        values = frozenset(v.strip() for v in m.group(3).split(","))
        return Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn", values)
    m = _EQ_TERM.match(term)
    if m:
        return Requirement(m.group(1), "!=" if m.group(2) == "!=" else "=", frozenset([m.group(3)]))
    m = _EXISTS_TERM.match(term)
    if m:
        return Requirement(m.group(2), "DoesNotExist" if m.group(1) else "Exists", frozenset())
    raise ValueError("invalid label selector term %r" % term)


def parse(selector: Optional[str]) -> list[Requirement]:
    """Every requirement of ``selector`` ("" or None: none); ValueError at the first invalid term."""
    return [parse_term(t) for t in split(selector or "")]


def matches(labels: Optional[Mapping[str, str]], selector: Optional[str]) -> bool:
    """Evaluate a selector string against ``labels``; "" matches everything. ValueError when invalid
    (the whole selector is parsed first, as labels.Parse does, so no term is matched before that)."""
    labels = labels or {}
    return all(req.matches(labels) for req in parse(selector))


def _int64(value: Any) -> Optional[int]:
    """strconv.ParseInt(value, 10, 64), or None where it would fail."""
    if not isinstance(value, str) or not _INT64.match(value):
        return None
    n = int(value)
    return n if -_INT64_MAX - 1 <= n <= _INT64_MAX else None


def requirement_matches(
    labels: Mapping[str, str], req: Mapping[str, Any], operators: tuple[str, ...] = OPERATORS
) -> Optional[bool]:
    """True/False for one ``{key, operator, values}`` (a matchExpressions entry) against ``labels``;
    None when it is malformed: no key, an operator not in ``operators``, In/NotIn without values,
    Exists/DoesNotExist with values, Gt/Lt without exactly one base-10 int64 value.

    Gt / Lt: the key is present and its value, parsed as a base-10 int64, is greater / less than the
    one value ("07" is 7; "550.90" is not a number, so it does not match)."""
    key, op, values = req.get("key"), req.get("operator"), list(req.get("values") or [])
    if not key or op not in operators:
        return None
    present = key in labels
    if op == "In":
        return present and labels[key] in values if values else None
    if op == "NotIn":
        return (not present or labels[key] not in values) if values else None
    if op == "Exists":
        return present if not values else None
    if op == "DoesNotExist":
        return (not present) if not values else None
    # Gt / Lt
    want = _int64(values[0]) if len(values) == 1 else None
    if want is None:
        return None
    if not present:
        return False
    have = _int64(labels[key])
    if have is None:
        return False
    return have > want if op == "Gt" else have < want


def matches_object(labels: Optional[Mapping[str, str]], selector: Optional[Mapping[str, Any]]) -> bool:
    """Evaluate a metav1.LabelSelector (matchLabels/matchExpressions). An empty selector matches
    everything, as for a policy/v1 PDB; a missing one matches nothing, and so does a malformed one
    (LabelSelectorAsSelector fails, and the eviction registry then skips that PDB)."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(
        requirement_matches(labels, expr, LABEL_SELECTOR_OPERATORS) is True
        for expr in selector.get("matchExpressions") or []
    )
