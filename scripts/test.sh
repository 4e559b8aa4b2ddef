#!/usr/bin/env bash
# The test command: installs what the tests need (sshd, sudo), then runs every test.
# Integration tests start their own sshd nodes on loopback, so this must run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two cores: two test threads keep the sshd fleets from starving each other.
cargo test --locked -- --test-threads="${TEST_THREADS:-2}"
