#!/bin/sh
# npuops lab simulated boot: pick the booted kernel (newest installed linux-image), reset
# /sys/module (a per-host bind mount), create the accelerator device files, load the driver
# modules on disk for the booted kernel (as udev/init would), publish state for the node agent.
HOSTDIR=/var/lib/npuops-lab/host
ACCEL=none; DEVICES=0
# an H100 SXM's modalias (vendor 10DE, class 0302: 3D controller), what the kernel hands udev
NVIDIA_MODALIAS=pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00
[ -r $HOSTDIR/hw.conf ] && . $HOSTDIR/hw.conf
case "$1" in
start)
    mkdir -p /run/npuops-lab
    rel=$(ls /boot 2>/dev/null | sed -n 's/^vmlinuz-//p' | sort -V | tail -n 1)
    [ -n "$rel" ] && echo "$rel" > /run/npuops-lab/kernel-release
    # a reboot forgets every loaded module
    find /sys/module -mindepth 1 -delete 2>/dev/null || true
    i=0
    case "$ACCEL" in
    nvidia)
        # the PCI bus the kernel would list (the product reads it from npuops_fleet_pci_devices_dir):
        # one 3D controller per GPU, at the bus ids the lab's nvidia-smi reports
        rm -rf /run/npuops-lab/pci
        while [ $i -lt "$DEVICES" ]; do
            : > /dev/nvidia$i
            d=/run/npuops-lab/pci/devices/$(printf '0000:%02x:00.0' $((0x18 + 0x10 * i)))
            mkdir -p $d
            echo 0x10de > $d/vendor; echo "${GPU_PCI_DEVICE:-0x2330}" > $d/device; echo 0x030200 > $d/class
            echo 0x10de > $d/subsystem_vendor; echo "${GPU_PCI_SUBSYSTEM:-0x16c1}" > $d/subsystem_device
            i=$((i+1))
        done
        : > /dev/nvidiactl; : > /dev/nvidia-uvm; : > /dev/nvidia-uvm-tools; : > /dev/nvidia-modeset
        # where the real depmod indexed real modules (Debian's nvidia-current*.ko): only what udev
        # loads, every module the device's PCI alias matches (nvidia-current, nvidia-current-drm and
        # through it -modeset); nothing loads nvidia-current-uvm on a headless Debian host at boot
        if [ -s /lib/modules/$rel/modules.alias ]; then
            modprobe -q "$NVIDIA_MODALIAS"
        else
            modprobe -q nvidia && modprobe -q nvidia_modeset && modprobe -q nvidia_drm
            modprobe -q nvidia_uvm
        fi
        ;;
    rbln)
        while [ $i -lt "$DEVICES" ]; do : > /dev/rbln$i; i=$((i+1)); done
        modprobe -q rebellions
        ;;
    esac
    chmod 666 /dev/nvidia* /dev/rbln* 2>/dev/null
    # boot marker = PID 1 start time (clock ticks since host boot): changes on every boot
    marker=$(cut -d' ' -f22 /proc/1/stat)
    # the simulated kernel's boot id (a container shares the machine's): new on every boot, read by
    # the product from here (npuops_fleet_boot_id_file) and reported as the Node's bootID by the agent
    cat /proc/sys/kernel/random/uuid > /run/npuops-lab/boot_id
    if [ -d $HOSTDIR ]; then
        cp /run/npuops-lab/boot_id $HOSTDIR/boot-id.tmp && mv $HOSTDIR/boot-id.tmp $HOSTDIR/boot-id
        # what a kubelet on this host would report as machineID (systemd has set it by now)
        head -n 1 /etc/machine-id > $HOSTDIR/machine-id.tmp 2>/dev/null && mv $HOSTDIR/machine-id.tmp $HOSTDIR/machine-id
        printf '%s\n' "${rel:-$(uname -r)}" > $HOSTDIR/kernel-release.tmp && mv $HOSTDIR/kernel-release.tmp $HOSTDIR/kernel-release
        printf '%s\n' "$marker" > $HOSTDIR/ready.tmp && mv $HOSTDIR/ready.tmp $HOSTDIR/ready
    fi
    ;;
stop)
    rm -f $HOSTDIR/ready
    ;;
esac
exit 0
