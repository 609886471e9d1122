"""k8s_client: which kubeconfig is loaded and what is reported as its source and context.

Real kubeconfig files are written to tmp_path; HOME (and os.path.expanduser) point at an empty
directory so the developer's ~/.kube/config can never leak in. Expected hosts and context names are
the literal values written into the files, not values computed by the code under test.
"""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import client as kc

HOST_A = "https://a.example.test:6443"
HOST_B = "https://b.example.test:7443"
HOST_N = "https://n.example.test:8443"
HOST_HOME = "https://home.example.test:9443"

AUTH_ENV = (
    "KUBECONFIG",
    "K8S_AUTH_KUBECONFIG",
    "K8S_AUTH_CONTEXT",
    "K8S_AUTH_HOST",
    "K8S_AUTH_API_KEY",
    "K8S_AUTH_VERIFY_SSL",
    "K8S_AUTH_SSL_CA_CERT",
    "KUBERNETES_SERVICE_HOST",
)


def write_kubeconfig(path, context, server, current=True, cluster=None):
    """One cluster/user/context named after ``context``; ``current-context`` only when ``current``."""
    cluster = cluster or "cl-" + context
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server}}],
        "users": [{"name": "u-" + context, "user": {"token": "tok-" + context}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": "u-" + context}}],
    }
    if current:
        cfg["current-context"] = context
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty HOME; every auth variable unset."""
    h = tmp_path / "home"
    h.mkdir()
    for name in AUTH_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(h))
    real = os.path.expanduser

    def expanduser(p):
        p = os.fspath(p)
        if p == "~" or p.startswith("~/"):
            return str(h) + p[1:]
        return real(p)

    monkeypatch.setattr(os.path, "expanduser", expanduser)
    return h


@pytest.fixture
def files(tmp_path):
    """a: ctx-a (current), b: ctx-b (current), nocur: ctx-n without current-context."""
    d = tmp_path / "kc"
    d.mkdir()
    return {
        "a": write_kubeconfig(d / "a.yaml", "ctx-a", HOST_A),
        "b": write_kubeconfig(d / "b.yaml", "ctx-b", HOST_B),
        "nocur": write_kubeconfig(d / "nocur.yaml", "ctx-n", HOST_N, current=False),
        "missing": str(d / "does-not-exist.yaml"),
    }


def build(params=None):
    api, auth = kc.get_api_client_and_source(params or {})
    return api.configuration.host, auth


def test_env_kubeconfig_single_file(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["a"])
    host, auth = build()
    assert host == HOST_A
    assert auth == {"source": "env KUBECONFIG", "kubeconfig": files["a"], "context": "ctx-a"}


def test_env_kubeconfig_list_current_context_from_second_file(home, files, monkeypatch):
    value = files["nocur"] + ":" + files["b"]
    monkeypatch.setenv("KUBECONFIG", value)
    host, auth = build()
    assert host == HOST_B
    assert auth == {"source": "env KUBECONFIG", "kubeconfig": value, "context": "ctx-b"}


@pytest.mark.parametrize("how", ["option", "env"])
def test_env_kubeconfig_list_context_of_first_file_selectable(home, files, monkeypatch, how):
    monkeypatch.setenv("KUBECONFIG", files["nocur"] + ":" + files["b"])
    params = {}
    if how == "option":
        params["context"] = "ctx-n"
    else:
        monkeypatch.setenv("K8S_AUTH_CONTEXT", "ctx-n")
    host, auth = build(params)
    assert host == HOST_N
    assert auth["context"] == "ctx-n" and auth["source"] == "env KUBECONFIG"


def test_env_kubeconfig_list_skips_missing_file(home, files, monkeypatch):
    value = files["missing"] + ":" + files["a"]
    monkeypatch.setenv("KUBECONFIG", value)
    host, auth = build()
    assert host == HOST_A
    assert auth == {"source": "env KUBECONFIG", "kubeconfig": value, "context": "ctx-a"}


def test_env_kubeconfig_list_both_set_current_context_last_wins(home, files, monkeypatch):
    """The kubernetes Python client's merge: the last file's current-context wins (kubectl: the first)."""
    monkeypatch.setenv("KUBECONFIG", files["a"] + ":" + files["b"])
    host, auth = build()
    assert host == HOST_B and auth["context"] == "ctx-b"


def test_env_kubeconfig_list_first_definition_of_a_name_wins(home, files, monkeypatch, tmp_path):
    # Same context and cluster names as a.yaml, other server: a.yaml comes first, so a.yaml's are used.
    dup = write_kubeconfig(tmp_path / "dup.yaml", "ctx-a", "https://dup.example.test:1", cluster="cl-ctx-a")
    monkeypatch.setenv("KUBECONFIG", files["a"] + ":" + dup)
    host, auth = build()
    assert host == HOST_A and auth["context"] == "ctx-a"


def test_env_kubeconfig_missing_file_fails_naming_it(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["missing"])
    with pytest.raises(kc.K8sAuthError) as ei:
        build()
    assert "env KUBECONFIG" in str(ei.value) and files["missing"] in str(ei.value)


def test_env_kubeconfig_missing_list_names_each_path_and_never_uses_home_config(home, files, monkeypatch):
    (home / ".kube").mkdir()
    write_kubeconfig(home / ".kube" / "config", "ctx-home", HOST_HOME)
    other = files["missing"] + ".2"
    monkeypatch.setenv("KUBECONFIG", files["missing"] + ":" + other)
    with pytest.raises(kc.K8sAuthError) as ei:
        build()
    msg = str(ei.value)
    assert files["missing"] in msg and other in msg
    assert HOST_HOME not in msg


def test_k8s_auth_kubeconfig_beats_kubeconfig(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["a"])
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", files["b"])
    host, auth = build()
    assert host == HOST_B
    assert auth == {"source": "env K8S_AUTH_KUBECONFIG", "kubeconfig": files["b"], "context": "ctx-b"}


def test_option_beats_both_env(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["b"])
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", files["b"])
    host, auth = build({"kubeconfig": files["a"]})
    assert host == HOST_A
    assert auth == {"source": "option kubeconfig", "kubeconfig": files["a"], "context": "ctx-a"}


def test_option_list(home, files, monkeypatch):
    value = files["nocur"] + os.pathsep + files["b"]
    host, auth = build({"kubeconfig": value})
    assert host == HOST_B
    assert auth == {"source": "option kubeconfig", "kubeconfig": value, "context": "ctx-b"}


def test_option_missing_file_fails_without_fallback_to_env(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["a"])
    with pytest.raises(kc.K8sAuthError) as ei:
        build({"kubeconfig": files["missing"]})
    assert "option kubeconfig" in str(ei.value) and files["missing"] in str(ei.value)


def test_home_kube_config_when_nothing_set(home, monkeypatch):
    (home / ".kube").mkdir()
    path = write_kubeconfig(home / ".kube" / "config", "ctx-home", HOST_HOME)
    host, auth = build()
    assert host == HOST_HOME
    assert auth == {"source": "~/.kube/config", "kubeconfig": path, "context": "ctx-home"}


def test_empty_kubeconfig_variable_counts_as_unset(home, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "")
    (home / ".kube").mkdir()
    write_kubeconfig(home / ".kube" / "config", "ctx-home", HOST_HOME)
    host, auth = build()
    assert host == HOST_HOME and auth["source"] == "~/.kube/config"


def test_nothing_set_fails_naming_home_config(home):
    with pytest.raises(kc.K8sAuthError) as ei:
        build()
    assert str(home / ".kube" / "config") in str(ei.value)


def test_in_cluster_last_resort(home, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")

    def fake_incluster(client_configuration):
        client_configuration.host = "https://10.0.0.1:443"

    monkeypatch.setattr(kc.k8s_config, "load_incluster_config", fake_incluster)
    host, auth = build()
    assert host == "https://10.0.0.1:443"
    assert auth == {"source": "in-cluster", "kubeconfig": None, "context": None}


def test_in_cluster_not_used_when_kubeconfig_set_but_missing(home, files, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBECONFIG", files["missing"])
    monkeypatch.setattr(kc.k8s_config, "load_incluster_config", lambda **kw: pytest.fail("in-cluster used"))
    with pytest.raises(kc.K8sAuthError):
        build()


def test_host_and_api_key_ignore_kubeconfig(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["a"])
    host, auth = build({"host": "https://direct.example.test:6443", "api_key": "secret"})
    assert host == "https://direct.example.test:6443"
    assert auth == {"source": "host+api_key", "kubeconfig": None, "context": None}


def test_unknown_context_fails_naming_source_and_context(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["a"])
    with pytest.raises(kc.K8sAuthError) as ei:
        build({"context": "no-such-ctx"})
    msg = str(ei.value)
    assert "env KUBECONFIG" in msg and files["a"] in msg and "no-such-ctx" in msg


def test_empty_file_fails_naming_it(home, tmp_path, monkeypatch):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    monkeypatch.setenv("KUBECONFIG", str(empty))
    with pytest.raises(kc.K8sAuthError) as ei:
        build()
    assert str(empty) in str(ei.value)


def test_get_api_client_returns_only_the_client(home, files, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", files["nocur"] + ":" + files["b"])
    api = kc.get_api_client({})
    assert api.configuration.host == HOST_B
