"""MIG layouts (case E5): nvidia-smi's MIG tables as NVIDIA's MIG user guide prints them, the put-back plan,
and the window record's restore against a GPU model written here (instances that vanish with the driver)."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host import mig
from ansible_collections.npuops.fleet.plugins.module_utils.host import window_record as wr

# `nvidia-smi mig -lgi` on an A100 40GB, as the MIG user guide shows it (R470+ layout)
LGI_A100 = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.5gb          19        7          4:1     |
+-------------------------------------------------------+
|   0  MIG 1g.5gb          19        8          5:1     |
+-------------------------------------------------------+
|   0  MIG 2g.10gb         14        3          0:2     |
+-------------------------------------------------------+
|   1  MIG 7g.40gb          0        0          0:8     |
+-------------------------------------------------------+
"""
LCI_A100 = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      7       MIG 1g.5gb           0         0          0:1     |
+--------------------------------------------------------------------+
|   0      8       MIG 1g.5gb           0         0          0:1     |
+--------------------------------------------------------------------+
|   0      3       MIG 2g.10gb          1         0          0:2     |
+--------------------------------------------------------------------+
|   1      0       MIG 1c.7g.40gb       0         0          0:1     |
+--------------------------------------------------------------------+
|   1      0       MIG 1c.7g.40gb       0         1          1:1     |
+--------------------------------------------------------------------+
"""
MODES = ("0, 00000000:07:00.0, Enabled, Enabled\n1, 00000000:0F:00.0, Enabled, Enabled\n"
         "2, 00000000:47:00.0, [N/A], [N/A]\n")


def test_parse_gpu_instances_user_guide_table():
    assert mig.parse_gpu_instances(0, LGI_A100) == [
        {"gpu": 0, "name": "MIG 1g.5gb", "profile_id": 19, "gi_id": 7, "placement": "4:1"},
        {"gpu": 0, "name": "MIG 1g.5gb", "profile_id": 19, "gi_id": 8, "placement": "5:1"},
        {"gpu": 0, "name": "MIG 2g.10gb", "profile_id": 14, "gi_id": 3, "placement": "0:2"},
        {"gpu": 1, "name": "MIG 7g.40gb", "profile_id": 0, "gi_id": 0, "placement": "0:8"},
    ]


def test_parse_compute_instances_user_guide_table():
    got = mig.parse_compute_instances(0, LCI_A100)
    assert [(c["gpu"], c["gi_id"], c["name"], c["ci_id"]) for c in got] == [
        (0, 7, "MIG 1g.5gb", 0), (0, 8, "MIG 1g.5gb", 0), (0, 3, "MIG 2g.10gb", 0),
        (1, 0, "MIG 1c.7g.40gb", 0), (1, 0, "MIG 1c.7g.40gb", 1)]


@pytest.mark.parametrize("text", ["No GPU instances found: Not Found", "No MIG-enabled devices found."])
def test_nothing_to_list_is_empty_not_an_error(text):
    assert mig.parse_gpu_instances(6, text + "\n") == []
    assert mig.parse_compute_instances(6, "No compute instances found: Not Found\n") == []


def test_a_failing_smi_is_an_error_quoting_it():
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
           "latest NVIDIA driver is installed and running.")
    with pytest.raises(mig.MigError, match="rc 9.*couldn't communicate"):
        mig.parse_gpu_instances(9, msg + "\n")


def test_layout_groups_instances_per_gpu_in_placement_order():
    lay = mig.build_layout(mig.parse_mode_query(MODES), mig.parse_gpu_instances(0, LGI_A100),
                           mig.parse_compute_instances(0, LCI_A100))
    g0, g1, g2 = lay["gpus"]
    assert [(i["name"], i["placement"], i["compute"]) for i in g0["instances"]] == [
        ("MIG 2g.10gb", "0:2", ["MIG 2g.10gb"]), ("MIG 1g.5gb", "4:1", ["MIG 1g.5gb"]),
        ("MIG 1g.5gb", "5:1", ["MIG 1g.5gb"])]
    assert g1["instances"][0]["compute"] == ["MIG 1c.7g.40gb", "MIG 1c.7g.40gb"]
    assert (g2["mode"], g2["instances"]) == (None, [])
    assert mig.describe(lay) == ["GPU 0 (00000000:07:00.0): MIG 2g.10gb, MIG 1g.5gb, MIG 1g.5gb",
                                 "GPU 1 (00000000:0F:00.0): MIG 7g.40gb"]
    # GPU 1's two 1c compute instances cannot be made with -C: refused, naming the GPU and the instances
    (why,) = mig.restore_refusals(lay)
    assert "GPU 1 (00000000:0F:00.0)" in why and "MIG 1c.7g.40gb, MIG 1c.7g.40gb" in why


def test_a_pending_mode_change_is_refused():
    lay = {"gpus": [{"index": 3, "pci_bus_id": "00000000:C7:00.0", "mode": "Disabled", "pending": "Enabled",
                     "instances": []}]}
    (why,) = mig.restore_refusals(lay)
    assert why.startswith("GPU 3 (00000000:C7:00.0): MIG mode Disabled now, Enabled after the next GPU reset")


def _gpu(index, bus, *gis, mode="Enabled"):
    return {"index": index, "pci_bus_id": bus, "mode": mode, "pending": mode,
            "instances": [{"name": n, "profile_id": p, "placement": pl, "compute": [n]} for n, p, pl in gis]}


def test_compare_ignores_placement_and_index_but_not_profiles():
    before = {"gpus": [_gpu(0, "00000000:18:00.0", ("MIG 3g.40gb", 9, "0:4"), ("MIG 3g.40gb", 9, "4:4"))]}
    moved = {"gpus": [_gpu(1, "00000000:18:00.0", ("MIG 3g.40gb", 9, "4:4"), ("MIG 3g.40gb", 9, "0:4"))]}
    assert mig.compare(before, moved) == []
    other = {"gpus": [_gpu(0, "00000000:18:00.0", ("MIG 7g.80gb", 0, "0:8"))]}
    assert mig.compare(before, other) == [
        "GPU 0 (00000000:18:00.0): MIG devices MIG 7g.80gb now, MIG 3g.40gb, MIG 3g.40gb before the window"]
    off = {"gpus": [_gpu(0, "00000000:18:00.0", mode="Disabled")]}
    assert mig.compare(before, off) == ["GPU 0 (00000000:18:00.0): MIG mode Disabled now, Enabled before the window"]
    assert "not listed by nvidia-smi now" in mig.compare(before, {"gpus": []})[0]


class FakeGpus:
    """nvidia-smi over GPUs whose MIG instances live in the driver: ``unload()`` drops them, the mode stays."""

    PROFILES = {9: ("3g.40gb", 4), 19: ("1g.10gb", 1), 20: ("1g.10gb+me", 1), 0: ("7g.80gb", 8)}

    def __init__(self, gpus, loaded=True, fail_orders=(), lgi=None):
        self.gpus = gpus  # [{"bus", "mode", "gis": [(profile, start)]}]
        self.loaded = loaded
        self.fail_orders = set(fail_orders)  # -cgi lists the driver finds no room for after their first instance
        self.lgi = lgi  # (rc, out) that -lgi answers instead of the table
        self.calls = []

    def unload(self):
        for g in self.gpus:
            g["gis"] = []

    def __call__(self, argv, data=None):
        self.calls.append(argv[1:])
        if not self.loaded:
            return 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""
        args = argv[1:]
        if args[0].startswith("--query-gpu="):
            return 0, "".join("%d, %s, %s, %s\n" % (i, g["bus"], g["mode"], g["mode"])
                              for i, g in enumerate(self.gpus)), ""
        if args[:2] == ["mig", "-lgi"]:
            if self.lgi:
                return self.lgi[0], self.lgi[1], ""
            rows = [(i, p, n) for i, g in enumerate(self.gpus) for n, (p, s) in enumerate(g["gis"], 1)]
            if not rows:
                return 6, "No GPU instances found: Not Found\n", ""
            out = "| GPU instances: |\n|====|\n" + "".join(
                "|   %d  MIG %s   %d   %d   %d:%d   |\n+---+\n" % (i, self.PROFILES[p][0], p, n, s, self.PROFILES[p][1])
                for i, g in enumerate(self.gpus) for n, (p, s) in enumerate(g["gis"], 1))
            return 0, out, ""
        if args[:2] == ["mig", "-lci"]:
            # a default compute instance is named without the profile's attributes (+me)
            out = "".join("|   %d   %d   MIG %s   0   0   0:1   |\n" % (i, n, self.PROFILES[p][0].split("+")[0])
                          for i, g in enumerate(self.gpus) for n, (p, s) in enumerate(g["gis"], 1))
            return (0, out, "") if out else (6, "No compute instances found: Not Found\n", "")
        if args[:2] == ["mig", "-i"] and args[3] == "-cgi" and args[5:] == ["-C"]:
            g = self.gpus[int(args[2])]
            order = tuple(int(x) for x in args[4].split(","))
            for k, p in enumerate(order):
                if k == 1 and order in self.fail_orders:
                    return 2, ("Successfully created GPU instance ...\nUnable to create a GPU instance on GPU %s using "
                               "profile %d: Insufficient Resources\n" % (args[2], p)), ""
                g["gis"].append((p, 8 - k - 1))  # placements of the driver's choosing
            return 0, "Successfully created GPU instance ...\n", ""
        if args[:2] == ["mig", "-i"] and args[3] in ("-dci", "-dgi"):
            if args[3] == "-dgi":
                self.gpus[int(args[2])]["gis"] = []
            return 0, "Successfully destroyed ...\n", ""
        raise AssertionError("unexpected nvidia-smi call %s" % args)


def _window(gpus):
    def run(argv, data=None):
        if argv[0] == "nvidia-smi":
            return gpus(argv, data)
        if argv[0] == "systemctl":
            return (0, "enabled\n", "") if argv[1] == "is-enabled" else (0, "active\n", "")
        return 0, "", ""
    return wr.HostWindow(run, mig_smi="nvidia-smi", wait_locks=lambda paths, timeout: {"free": True})


def test_the_record_holds_the_layout_and_the_restore_makes_it_again_after_an_unload():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Disabled", "gis": []},
                     {"bus": "00000000:28:00.0", "mode": "Enabled", "gis": [(9, 0), (19, 4), (19, 5)]}])
    hw = _window(gpus)
    record = hw.snapshot("r1", [])
    assert record["mig"]["smi"] == "nvidia-smi"
    assert [(g["pci_bus_id"], len(g["instances"])) for g in record["mig"]["gpus"]] == [
        ("00000000:18:00.0", 0), ("00000000:28:00.0", 3)]
    gpus.unload()
    res = hw.restore(record, 10, check_mode=False)
    assert res["failed"] == []
    assert res["mig_reapplied"] == ["GPU 1 (00000000:28:00.0): MIG 3g.40gb, MIG 1g.10gb, MIG 1g.10gb"]
    assert ["mig", "-i", "1", "-cgi", "9,19,19", "-C"] in gpus.calls
    assert sorted(p for p, _s in gpus.gpus[1]["gis"]) == [9, 19, 19] and gpus.gpus[0]["gis"] == []
    # a second restore (a rerun) finds the devices there and makes nothing
    gpus.calls.clear()
    assert hw.restore(record, 10, check_mode=False)["mig_reapplied"] == []
    assert not [c for c in gpus.calls if "-cgi" in c]


def test_check_mode_says_what_it_would_make_and_makes_nothing():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Enabled", "gis": [(0, 0)]}])
    hw = _window(gpus)
    record = hw.snapshot(None, [])
    gpus.unload()
    res = hw.restore(record, 10, check_mode=True)
    assert res["mig_reapplied"] == ["GPU 0 (00000000:18:00.0): MIG 7g.80gb"]
    assert gpus.gpus[0]["gis"] == [] and not [c for c in gpus.calls if "-cgi" in c]


def test_instances_someone_else_made_are_left_alone_and_fail_the_restore():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Enabled", "gis": [(9, 0), (9, 4)]}])
    hw = _window(gpus)
    record = hw.snapshot(None, [])
    gpus.gpus[0]["gis"] = [(0, 0)]
    res = hw.restore(record, 10, check_mode=False)
    assert gpus.gpus[0]["gis"] == [(0, 0)] and not [c for c in gpus.calls if "-cgi" in c]
    assert res["failed"] == [{"kind": "mig", "name": "MIG layout", "msg": (
        "MIG layout not as before the window: GPU 0 (00000000:18:00.0): MIG devices MIG 7g.80gb now, "
        "MIG 3g.40gb, MIG 3g.40gb before the window")}]


def test_a_driver_that_does_not_answer_fails_the_restore_and_records_nothing():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Enabled", "gis": [(9, 0)]}])
    hw = _window(gpus)
    record = hw.snapshot(None, [])
    gpus.loaded = False
    (f,) = hw.restore(record, 10, check_mode=False)["failed"]
    assert f["kind"] == "mig" and "couldn't communicate with the NVIDIA driver" in f["msg"]
    assert hw.snapshot(None, [])["mig"] is None


def test_no_gpu_in_mig_mode_records_no_layout_and_restores_nothing():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Disabled", "gis": []}])
    hw = _window(gpus)
    record = hw.snapshot(None, [])
    assert record["mig"] is None
    assert hw.restore(record, 10, check_mode=False)["mig_reapplied"] == []
    assert [c for c in gpus.calls if c[:1] == ["mig"]] == []


def test_the_default_compute_instance_of_an_attribute_profile_is_not_refused():
    gi = {"name": "MIG 1g.10gb+me", "profile_id": 20, "placement": "0:1", "compute": ["MIG 1g.10gb"]}
    lay = {"gpus": [{"index": 0, "pci_bus_id": "00000000:18:00.0", "mode": "Enabled", "pending": "Enabled",
                     "instances": [gi]}]}
    assert mig.restore_refusals(lay) == []
    split = dict(gi, name="MIG 3g.40gb", profile_id=9, compute=["MIG 1c.3g.40gb", "MIG 2c.3g.40gb"])
    assert len(mig.restore_refusals({"gpus": [dict(lay["gpus"][0], instances=[split])]})) == 1


def test_output_that_is_not_the_table_is_an_error_not_an_empty_layout():
    with pytest.raises(mig.MigError, match="no row this collection can read"):
        mig.parse_gpu_instances(0, "GPU instances: (a format of some later branch)\n")
    assert mig.parse_gpu_instances(0, "") == []


def test_an_order_that_finds_no_room_is_undone_and_the_largest_first_order_tried():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Enabled", "gis": [(19, 0), (9, 4)]}], fail_orders={(19, 9)})
    hw = _window(gpus)
    record = hw.snapshot(None, [])
    gpus.unload()
    res = hw.restore(record, 10, check_mode=False)
    assert res["failed"] == [] and res["mig_reapplied"] == ["GPU 0 (00000000:18:00.0): MIG 1g.10gb, MIG 3g.40gb"]
    made = [c for c in gpus.calls if c[:2] == ["mig", "-i"]]
    assert made == [["mig", "-i", "0", "-cgi", "19,9", "-C"], ["mig", "-i", "0", "-dci"], ["mig", "-i", "0", "-dgi"],
                    ["mig", "-i", "0", "-cgi", "9,19", "-C"]]
    assert sorted(p for p, _s in gpus.gpus[0]["gis"]) == [9, 19]


def test_when_no_order_fits_the_gpu_is_left_empty_for_the_next_run_and_the_restore_fails():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Enabled", "gis": [(19, 0), (9, 4)]}],
                    fail_orders={(19, 9), (9, 19)})
    hw = _window(gpus)
    record = hw.snapshot(None, [])
    gpus.unload()
    (f,) = hw.restore(record, 10, check_mode=False)["failed"]
    assert f["kind"] == "mig" and gpus.gpus[0]["gis"] == []
    assert ("mig -i 0 -cgi 19,9 -C failed (rc 2): Unable to create a GPU instance on GPU 0 using profile 9: "
            "Insufficient Resources; mig -i 0 -cgi 9,19 -C failed (rc 2): Unable") in f["msg"]


def test_a_gpu_left_halfway_gets_only_its_missing_instances():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Enabled", "gis": [(9, 0), (19, 4), (19, 5)]}])
    hw = _window(gpus)
    record = hw.snapshot(None, [])
    gpus.gpus[0]["gis"] = [(9, 0)]
    res = hw.restore(record, 10, check_mode=False)
    assert res["failed"] == [] and res["mig_reapplied"] == ["GPU 0 (00000000:18:00.0): MIG 1g.10gb, MIG 1g.10gb"]
    assert [c for c in gpus.calls if "-cgi" in c] == [["mig", "-i", "0", "-cgi", "19,19", "-C"]]
    assert not [c for c in gpus.calls if "-dgi" in c]


def test_a_layout_that_cannot_be_read_while_the_driver_answers_stops_the_record():
    gpus = FakeGpus([{"bus": "00000000:18:00.0", "mode": "Enabled", "gis": [(9, 0)]}],
                    lgi=(4, "Failed to display GPU instances: Insufficient Permissions\n"))
    with pytest.raises(wr.RecordError, match="MIG layout cannot be read before the host work.*Insufficient Perm"):
        _window(gpus).snapshot(None, [])
