# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Paginated LISTs (``limit`` / ``continue``) returning the API's JSON dicts.

Raw dicts, not the client's models: deserialising thousands of objects into models costs seconds.
Every page goes through k8s_retry (the transient-error retry of every other read).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry


def list_all(
    call: Callable[..., Any], page_size: int = 500, timeout: Optional[float] = 60, **kwargs: Any
) -> tuple[list, int]:
    """Every item of ``call`` (a client list method, e.g. ``CoreV1Api.list_pod_for_all_namespaces``)
    with ``kwargs`` (``label_selector``...), ``page_size`` items per request, ``timeout`` seconds per
    request (None: the client's default).

    Returns ``(items, requests)``: the items as dicts and the number of HTTP requests made. A 410
    Gone (the continue token expired between pages) restarts the listing once from the beginning;
    any other ApiException is raised.
    """
    from kubernetes import client as k8s

    items: list = []
    requests = 0
    token = None
    restarted = False
    while True:
        kw: dict[str, Any] = dict(kwargs, limit=page_size, _preload_content=False)
        if token:
            kw["_continue"] = token
        if timeout:
            kw["_request_timeout"] = timeout
        try:
            resp = k8s_retry.call(call, **kw)
        except k8s.ApiException as exc:
            requests += 1
            if exc.status == 410 and token and not restarted:
                items, token, restarted = [], None, True
                continue
            raise
        requests += 1
        data = json.loads(resp.data)
        items.extend(data.get("items") or [])
        token = (data.get("metadata") or {}).get("continue")
        if not token:
            return items, requests


def list_nodes_raw(
    api_client: Any, label_selector: str, page_size: int = 500, timeout: Optional[float] = 60
) -> tuple[list, int]:
    """All nodes matching ``label_selector``: ``(items, requests)`` from k8s/paged_list.list_all."""
    from kubernetes import client as k8s

    return list_all(k8s.CoreV1Api(api_client).list_node, page_size, timeout, label_selector=label_selector)
