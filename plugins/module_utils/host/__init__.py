# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""What runs on the accelerator host (not the control node): apt and dpkg output, DKMS, kmod holders
and versions, smi parsers, MIG, CDI, secure boot, the host's driver facts and the window record it
keeps. Plain python3 must import it (the drift monitor ships it without Ansible): imports only
host/, driver/ and errors.py, never ansible."""
