"""Label selectors against Kubernetes' documented semantics (concepts/overview/working-with-objects/labels,
apimachinery labels.Parse and metav1.LabelSelector), written here independently of the product's grammar."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver import vendor_profiles
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import selectors

GPU_NODE = {"nvidia.com/gpu.present": "true", "tier": "gpu", "zone": "a"}
PLAIN_NODE = {"zone": "b"}


@pytest.mark.parametrize(
    "selector,labels,expected",
    [
        # The empty selector selects every object.
        ("", GPU_NODE, True),
        ("", {}, True),
        (None, {}, True),
        # Equality-based: = and == are the same; != also selects objects without the key.
        ("tier=gpu", GPU_NODE, True),
        ("tier==gpu", GPU_NODE, True),
        ("tier=gpu", PLAIN_NODE, False),
        ("tier!=gpu", GPU_NODE, False),
        ("tier!=gpu", PLAIN_NODE, True),
        ("tier=", {"tier": ""}, True),
        ("tier=", {}, False),
        # Set-based: in needs the key; notin also selects objects without the key.
        ("zone in (a, b)", GPU_NODE, True),
        ("zone in (c)", GPU_NODE, False),
        ("tier in (gpu)", PLAIN_NODE, False),
        ("zone notin (a,b)", GPU_NODE, False),
        ("tier notin (gpu,npu)", PLAIN_NODE, True),
        ("tier notin (npu)", GPU_NODE, True),
        # Existence: key selects any value, the empty one too; !key selects objects without it.
        ("tier", GPU_NODE, True),
        ("tier", {"tier": ""}, True),
        ("tier", PLAIN_NODE, False),
        ("!tier", PLAIN_NODE, True),
        ("!tier", GPU_NODE, False),
        ("! tier", PLAIN_NODE, True),
        # Requirements are ANDed; commas inside a value set do not split requirements.
        ("tier=gpu,zone in (a,b)", GPU_NODE, True),
        ("tier=gpu,zone notin (a,b)", GPU_NODE, False),
        ("zone in (a,b),!tier", PLAIN_NODE, True),
        ("nvidia.com/gpu.present=true,zone=a", GPU_NODE, True),
        (" tier = gpu , zone ", GPU_NODE, True),
    ],
)
def test_string_selector(selector, labels, expected):
    assert selectors.matches(labels, selector) is expected


@pytest.mark.parametrize("selector", ["tier>1", "a in (x", "a in x", "=v", "a=b=c", "a in ((x))", "!a=b", "a b"])
def test_invalid_string_selector_raises(selector):
    with pytest.raises(ValueError, match="invalid label selector term"):
        selectors.matches({}, selector)


def test_a_selector_is_parsed_whole_before_matching():
    # labels.Parse rejects the selector as a whole: no term is evaluated before the bad one.
    with pytest.raises(ValueError):
        selectors.matches({}, "a=b,a in (x")


def test_split_on_top_level_commas_only():
    assert selectors.split("a in (x,y),b,,c notin (p, q) ") == ["a in (x,y)", "b", "c notin (p, q) "]
    assert selectors.split("") == [] and selectors.split(" , ") == []


def test_parse_gives_requirements():
    reqs = selectors.parse("a in (x, y),b!=c,!d,e")
    assert [(r.key, r.operator, sorted(r.values)) for r in reqs] == [
        ("a", "In", ["x", "y"]),
        ("b", "!=", ["c"]),
        ("d", "DoesNotExist", []),
        ("e", "Exists", []),
    ]


@pytest.mark.parametrize(
    "selector,labels,expected",
    [
        ({}, {"a": "b"}, True),  # policy/v1: an empty selector selects every pod
        ({}, {}, True),
        (None, {"a": "b"}, False),  # no selector: nothing
        ({"matchLabels": {"app": "db"}}, {"app": "db", "x": "y"}, True),
        ({"matchLabels": {"app": "db"}}, {"app": "web"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}, {}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {"tier": ""}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {"tier": "x"}, False),
        (
            {"matchLabels": {"app": "db"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]},
            {"app": "db", "tier": "b"},
            False,
        ),
        # Invalid selectors (LabelSelectorAsSelector fails) select nothing.
        ({"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}, {"tier": "2"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": []}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]}, {"tier": "x"}, False),
    ],
)
def test_label_selector_object(selector, labels, expected):
    assert selectors.matches_object(labels, selector) is expected


@pytest.mark.parametrize(
    "req,labels,expected",
    [
        ({"key": "v", "operator": "Gt", "values": ["550"]}, {"v": "560"}, True),
        ({"key": "v", "operator": "Gt", "values": ["550"]}, {"v": "0550"}, False),
        ({"key": "v", "operator": "Lt", "values": ["7"]}, {"v": "06"}, True),
        ({"key": "v", "operator": "Gt", "values": ["550"]}, {"v": "550.90"}, False),
        ({"key": "v", "operator": "Gt", "values": ["550"]}, {}, False),
        ({"key": "v", "operator": "Gt", "values": ["5", "6"]}, {"v": "9"}, None),
        ({"key": "v", "operator": "Lt", "values": ["x"]}, {"v": "1"}, None),
        ({"key": "", "operator": "Exists"}, {"": "x"}, None),
    ],
)
def test_node_affinity_requirements(req, labels, expected):
    assert selectors.requirement_matches(labels, req) is expected


@pytest.mark.parametrize(
    "term",
    [
        "a", "!a", "! a", "a=b", "a==b", "a!=b", "a=", "a in (x,y)", "a notin ()", " a.b/c-d_e = v.1 ",
        "a in (x", "a in ((x))", "a in x", "!a=b", "a b", "=b", "a>1", "a=b=c", "a!", "a notin(x)", "",
    ],
)
def test_vendor_profile_check_accepts_the_parsers_language(term):
    # driver/ may not import k8s/, so the vendor profile check has its own pattern: keep them one language.
    try:
        selectors.parse_term(term)
        parsed = True
    except ValueError:
        parsed = False
    assert bool(vendor_profiles._SELECTOR_TERM.match(term)) is parsed


def test_an_empty_value_in_a_set_is_the_value_empty_string_as_in_apimachinery():
    # labels.Parse: "key in ()" and "key in (a,,b)" carry the value ""
    assert selectors.matches({"k": ""}, "k in ()")
    assert not selectors.matches({"k": "a"}, "k in ()")
    assert selectors.matches({"k": ""}, "k in (a,,b)")
    assert not selectors.matches({"k": ""}, "k notin (a,,b)")
    assert selectors.matches({"k": "c"}, "k notin ()")
