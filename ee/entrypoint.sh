#!/bin/sh
# Execution environment entrypoint: AWX runs the image as uid 1000, OpenShift as an arbitrary uid in
# group 0. ssh (and Python's getpass) need a passwd entry for the uid: add one when it has none
# (/etc/passwd is group-0 writable for this), with HOME /runner.
if ! whoami >/dev/null 2>&1 && [ -w /etc/passwd ]; then
  echo "runner:x:$(id -u):$(id -g):runner:${HOME:-/runner}:/bin/sh" >> /etc/passwd
fi
exec "$@"
