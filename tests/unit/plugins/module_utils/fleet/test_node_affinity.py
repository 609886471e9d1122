"""Node affinity / nodeSelector matching, against what kube-scheduler's NodeAffinity filter decides
(k8s.io/component-helpers nodeaffinity + apimachinery labels.Requirement), written out by hand."""

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.fleet.node_affinity import NodeConstraints

MAJ = "nvidia.com/cuda.driver.major"
VER = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
NODE = {MAJ: "550", "nvidia.com/cuda.driver.rev": "07", VER: "22.04"}


def spec(*terms, selector=None):
    s = {}
    if selector is not None:
        s["nodeSelector"] = selector
    if terms != (None,):
        s["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
        }
    return s


def expr(key, op, *values):
    r = {"key": key, "operator": op}
    if values:
        r["values"] = list(values)
    return {"matchExpressions": [r]}


@pytest.mark.parametrize(
    "term,labels,fits",
    [
        (expr(MAJ, "In", "550"), NODE, True),
        (expr(MAJ, "In", "535", "580"), NODE, False),
        (expr(MAJ, "In", "550"), {}, False),
        (expr(MAJ, "NotIn", "550"), NODE, False),
        (expr(MAJ, "NotIn", "535"), NODE, True),
        (expr(MAJ, "NotIn", "550"), {}, True),  # absent key satisfies NotIn
        (expr(MAJ, "Exists"), NODE, True),
        (expr(MAJ, "Exists"), {}, False),
        (expr(MAJ, "DoesNotExist"), NODE, False),
        (expr(MAJ, "DoesNotExist"), {}, True),
        (expr(MAJ, "Gt", "560"), NODE, False),
        (expr(MAJ, "Gt", "560"), {MAJ: "580"}, True),
        (expr(MAJ, "Gt", "550"), NODE, False),  # strictly greater
        (expr(MAJ, "Lt", "560"), NODE, True),
        (expr(MAJ, "Gt", "560"), {}, False),  # absent key never satisfies Gt/Lt
        (expr("nvidia.com/cuda.driver.rev", "Gt", "5"), NODE, True),  # "07" parses as 7
        (expr(VER, "Gt", "20"), NODE, False),  # "22.04" is no integer: no match
        (expr(MAJ, "Gt", "560", "570"), {MAJ: "580"}, False),  # malformed: two values
        (expr(MAJ, "Exists", "550"), NODE, False),  # malformed: Exists with values
        (expr(MAJ, "Matches", "550"), NODE, False),  # unknown operator
        ({}, NODE, False),  # an empty term matches nothing
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, NODE, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}, NODE, False),
        ({"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["n1"]}]}, NODE, False),
    ],
)
def test_one_term(term, labels, fits):
    assert NodeConstraints(spec(term)).matches(labels, "n1") is fits


def test_expressions_of_a_term_are_anded_and_terms_ored():
    both = {
        "matchExpressions": [
            {"key": MAJ, "operator": "In", "values": ["550"]},
            {"key": VER, "operator": "In", "values": ["24.04"]},
        ]
    }
    assert NodeConstraints(spec(both)).matches(NODE) is False
    assert NodeConstraints(spec(both, expr(VER, "In", "22.04"))).matches(NODE) is True
    # matchExpressions AND matchFields within one term
    mixed = {
        "matchExpressions": [{"key": MAJ, "operator": "Exists"}],
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}],
    }
    assert NodeConstraints(spec(mixed)).matches(NODE, "n1") is False


def test_node_selector_and_affinity_must_both_hold():
    assert NodeConstraints(spec(None, selector={MAJ: "550"})).matches(NODE) is True
    assert NodeConstraints(spec(None, selector={MAJ: "550", VER: "24.04"})).matches(NODE) is False
    assert NodeConstraints(spec(expr(MAJ, "In", "550"), selector={VER: "24.04"})).matches(NODE) is False


def test_no_constraints_and_required_without_terms():
    assert NodeConstraints({}).empty and NodeConstraints({}).matches({}) is True
    assert NodeConstraints(None).matches(NODE) is True
    none = NodeConstraints(spec())  # required affinity with an empty term list
    assert not none.empty and none.matches(NODE) is False
    preferred = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": expr(MAJ, "In", "535")}]
            }
        }
    }
    assert NodeConstraints(preferred).empty  # only ranks nodes


def test_keys_signature_and_description():
    c = NodeConstraints(spec(expr(MAJ, "In", "550"), selector={VER: "22.04"}))
    assert c.label_keys() == {MAJ, VER}
    same = NodeConstraints({"affinity": c and spec(expr(MAJ, "In", "550"))["affinity"], "nodeSelector": {VER: "22.04"}})
    assert c.signature() == same.signature()
    assert c.describe() == "nodeSelector %s=22.04; affinity (%s In [550])" % (VER, MAJ)
