/* npuops lab: LD_PRELOAD (via /etc/ld.so.preload) uname() that reports the simulated booted
 * kernel. The release is read from /run/npuops-lab/kernel-release, written once per boot by
 * npuops-lab-boot.service; /run is a fresh tmpfs on every container start, so the reported
 * kernel changes only at reboot. Falls back to the real uname() when the file is absent. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <stdio.h>

int uname(struct utsname *buf) {
    static int (*real_uname)(struct utsname *) = 0;
    if (!real_uname)
        real_uname = (int (*)(struct utsname *))dlsym(RTLD_NEXT, "uname");
    int rc = real_uname(buf);
    if (rc != 0)
        return rc;
    int fd = open("/run/npuops-lab/kernel-release", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rc;
    char rel[sizeof(buf->release)];
    ssize_t n = read(fd, rel, sizeof(rel) - 1);
    close(fd);
    if (n <= 0)
        return rc;
    rel[n] = 0;
    char *nl = strchr(rel, '\n');
    if (nl)
        *nl = 0;
    if (!rel[0])
        return rc;
    strncpy(buf->release, rel, sizeof(buf->release) - 1);
    buf->release[sizeof(buf->release) - 1] = 0;
    /* Ubuntu-style version string for the simulated kernel */
    const char *p = strchr(rel, '-');
    char ver[sizeof(buf->version)];
    int abi = 0;
    if (p) {
        for (p++; *p >= '0' && *p <= '9'; p++)
            abi = abi * 10 + (*p - '0');
    }
    snprintf(ver, sizeof(ver), "#%d-Ubuntu SMP PREEMPT_DYNAMIC (npuops-lab simulated kernel)", abi);
    strncpy(buf->version, ver, sizeof(buf->version) - 1);
    buf->version[sizeof(buf->version) - 1] = 0;
    return rc;
}
