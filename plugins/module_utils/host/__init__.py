# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers of the host-side modules (code that runs on the accelerator host, not on the control node)."""
