#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine, as root:
# OpenSSH's sshd (to simulate edge nodes on loopback), sudo (for non-root logins), Go
# (tests/template_go.rs checks keadmCmd templates against Go's own text/template), the
# distribution registry (`batch bundle` pulls images from one the tests start on
# loopback), htpasswd (its basic-auth test), and containerd, runc and busybox-static (a
# real container runtime per test node, and the shell inside the tests' own tiny images)
# and xz (the nodes unpack the xz copy of keadm with it), and iproute2 (the relay tests
# put nodes on site LANs: network namespaces, veth pairs and bridges made with `ip`), and
# the shellcheck linter (every script sent to a node passes it for POSIX sh, in the unit
# tests), and python3-prometheus-client (tests/metrics.rs reads `--metrics` files with
# Prometheus' own text parser, under Debian's /usr/bin/python3), and Chromium with its
# ChromeDriver (tests/report.rs opens report.html in headless Chromium over WebDriver).
# The packages' own services are kept from starting: the simulated nodes listen on
# loopback addresses, and a system sshd on 0.0.0.0:22 would collide with them; the tests
# start every containerd and registry they use themselves, each with its own state.
set -euo pipefail

need=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || need+=(openssh-server)
command -v sudo >/dev/null 2>&1 || need+=(sudo)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v ps >/dev/null 2>&1 || need+=(procps)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
[ -e /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v ctr >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
# tests/junit.rs validates --junit files against a JUnit schema with xmllint.
command -v xmllint >/dev/null 2>&1 || need+=(libxml2-utils)
/usr/bin/python3 -c 'import prometheus_client.parser' >/dev/null 2>&1 || need+=(python3-prometheus-client)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# Text in the report's screenshots (Chromium only recommends a font).
[ -d /usr/share/fonts/truetype/liberation ] || need+=(fonts-liberation)
# bench/report.sh and bench/validate.sh read peak memory with GNU time.
[ -x /usr/bin/time ] || need+=(time)

if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need root to install: ${need[*]}" >&2
    exit 1
  fi
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
# sshd refuses to start without its privilege-separation directory.
mkdir -p /run/sshd
chmod 0755 /run/sshd
