# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.window_close_rows``: one row per host of a window run shared by several processes.

Pure Python in plugins/module_utils/upgrade/run_nodes.py (merge_rows)."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.run_nodes import merge_rows

DOCUMENTATION = r"""
name: window_close_rows
short_description: A shared maintenance window's rows, from the processes' summaries and the Nodes
description:
  - "The summaries of the processes (AWX job slices) that shared one window, merged with the nodes
    M(npuops.fleet.npu_window_nodes) found for its run id - one row per host, sorted by host."
  - "Two rows for one host - the one whose C(status) is not C(not-started) is kept; when both or neither
    are, the later slice's. Each row gets C(slice) (its slice's C(participant)) and, when a node of the run
    has its C(node) (else its C(host)) as name, C(node_state) (that node's upgrade state)."
  - "A node of the run that no summary names (its process died before writing one) gets a row from its
    node record - C(host) and C(node) its name, C(status) the node's status (C(upgraded), C(failed),
    C(in-progress), C(other)), C(final_state) its state, C(reason) its last transition's reason,
    C(slice) null and C(from_node_record) true."
  - "A slice that is not a dict, a row without C(host), or O(nodes) not a list of node rows fails the task."
options:
  _input:
    description: "The processes' summaries in the order they were written, each with C(participant) and
      C(hosts) (rows with at least C(host) and C(status))."
    type: list
    elements: dict
    required: true
  nodes:
    description: "RV(npuops.fleet.npu_window_nodes#module:nodes) of the same run."
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: The nodes of the run, then one row per host
  npuops.fleet.npu_window_nodes:
    run_id: "{{ maintenance_run_id }}"
  register: run_nodes

- name: Show the window's rows
  ansible.builtin.debug:
    msg: "{{ slice_summaries | npuops.fleet.window_close_rows(run_nodes.nodes) }}"
"""

RETURN = r"""
_value:
  description: "The rows sorted by C(host) - each summary row with C(slice) and, where a node matched,
    C(node_state); plus the node-record rows with C(from_node_record) true."
  type: list
  elements: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"window_close_rows": merge_rows}
