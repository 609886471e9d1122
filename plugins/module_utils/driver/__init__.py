# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Pure driver knowledge, the same on the control node and on the host: the one rule for "same driver
version", verdicts, what a Node's NFD/GFD labels say, precompiled driver tags and OS tags, the
support matrix, the vendor profiles. No I/O and no client; imports only driver/ and errors.py."""
